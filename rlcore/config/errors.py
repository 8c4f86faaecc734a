"""The one exception config problems raise, and the gathering of several into one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class ConfigError(ValueError):
    """A bad config: one line per problem, each naming the key (or file) and the fix.

    Entry points print it without a traceback and exit with status 2.
    """


class Problems:
    """The problems of a config gathered across keys and passes, so a user fixes them in one go:
    each ``with problems.gathered():`` block that raises ``ConfigError`` adds its lines and the
    work goes on; ``raise_any`` raises them together, each once, in the order met."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    @contextmanager
    def gathered(self) -> Iterator[None]:
        try:
            yield
        except ConfigError as error:
            self.lines += str(error).splitlines()

    def raise_any(self) -> None:
        if self.lines:
            raise ConfigError("\n".join(dict.fromkeys(self.lines)))
