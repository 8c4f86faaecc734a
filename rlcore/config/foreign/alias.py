"""An ``Alias``: another spelling of one rlcore key (or a few), and the value conversions that
verl's and RLinf's spellings share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlcore.config.errors import ConfigError


@dataclass(frozen=True)
class Alias:
    """``origin``'s spelling of ``targets`` (usually one key; verl's ``clip_ratio`` sets both
    bounds). ``convert`` maps the value (to one value per target when there are several
    targets and it returns a tuple); ``note`` is said after the mapping on stderr. ``yields``
    (why, when given): a spelling of what rlcore keeps as one setting for two things (verl's
    reference model's offload, which is the actor's here), that gives way where another alias
    sets the target differently, said, rather than clash with it."""

    origin: str
    targets: tuple[str, ...]
    convert: Callable[[Any], Any] | None = None
    note: str = ""
    yields: str = ""

    def gives_way(self, path: str, value: Any, other: str, kept: Any) -> str:
        """The line for this alias at ``path`` set to ``value``, not applied: ``other`` sets
        its target to ``kept``."""
        return f"{path}={value} ({self.origin}) gives way to {other}={kept}: {self.yields}"

    def values(self, value: Any) -> list[tuple[str, Any]]:
        """``[(target, value)]`` for ``value`` written in this spelling."""
        converted = value if self.convert is None else self.convert(value)
        if len(self.targets) > 1 and isinstance(converted, tuple):
            return list(zip(self.targets, converted, strict=True))
        return [(target, converted) for target in self.targets]

    def describe(self, path: str) -> str:
        targets = " and ".join(self.targets)
        return f"{path} ({self.origin}) is {targets} here" + (f"; {self.note}" if self.note else "")


def minus_one_is(off: int) -> Callable[[Any], Any]:
    """The conversion of a count where -1 means "off" (verl's and RLinf's) to ``off``."""
    return lambda value: off if value == -1 else value


LOGGERS = ("console", "tensorboard", "wandb")


def loggers(value: Any, key: str = "trainer.logger") -> tuple[bool, ...]:
    """verl's ``trainer.logger`` (RLinf's ``runner.logger.logger_backends``) list ->
    ``(logger.console, logger.tensorboard, logger.wandb)``."""
    if value is not None and not isinstance(value, str | list | tuple):
        raise ConfigError(f"{key}: {value!r}; give a list of loggers, e.g. [console,tensorboard]")
    names = [value] if isinstance(value, str) else list(value or [])
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ConfigError(
            f"{key}: {', '.join(map(str, unknown))} is not a logger here; rlcore writes "
            f"to {', '.join(LOGGERS)}"
        )
    return tuple(name in names for name in LOGGERS)
