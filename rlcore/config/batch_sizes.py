"""The embodied mini-batch follows the user's edits of the batch, as in CleanRL and SB3.

An embodied batch is ``runner.rollout_steps x env.num_envs`` transitions. A shipped config
writes its mini-batch for its own batch (``configs/embodied/cartpole_ppo.yaml``: 64 envs x 8
steps, one mini-batch of 512); a user who changes ``env.num_envs`` or ``runner.rollout_steps``
and leaves the mini-batch alone keeps the config's NUMBER of mini-batches per epoch (CleanRL's
``num_minibatches``, with ``minibatch_size = batch_size // num_minibatches``), said in one line.

The number is kept where it divides ``runner.rollout_steps``, else the divisor of
``runner.rollout_steps`` nearest to it is taken: so a derived mini-batch is a multiple of
``env.num_envs``, which every layout's actor ranks divide (``rlcore/placement/checks.py``), and
it splits over them whatever the layout. A mini-batch the user wrote (on the command line, in
any spelling, or in a YAML file of their own) is theirs: where it does not fit, the placement
check refuses it naming the values that do (``valid_mini_batches``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hydra.core.override_parser.types import Override, OverrideType
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlcore.config.foreign import ALIASES

MINI_BATCH = "actor.ppo_mini_batch_size"
_ABSENT = object()


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` >= 1, ascending (``divisors(12) == [1, 2, 3, 4, 6, 12]``)."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def valid_mini_batches(batch: int, ranks: int) -> list[int]:
    """The mini-batch sizes a batch of ``batch`` samples can take on ``ranks`` ranks: its
    divisors that the ranks share evenly."""
    return [d for d in divisors(batch) if d % ranks == 0]


def name_values(values: list[int], near: int, most: int = 16) -> str:
    """``values`` for a one-line message: all of them, or the ``most`` nearest to ``near``."""
    if len(values) <= most:
        return ", ".join(map(str, values))
    kept = sorted(sorted(values, key=lambda v: (abs(v - near), v))[:most])
    return f"{', '.join(map(str, kept))} (the {most} nearest to {near}, of {len(values)})"


def nearest_divisor(n: int, target: int) -> int:
    """The divisor of ``n`` nearest to ``target``; of two as near, the smaller."""
    return min(divisors(n), key=lambda d: (abs(d - target), d))


@dataclass(frozen=True)
class ConfiguredBatch:
    """The embodied batch and mini-batch as the config files write them, before the command
    line: what the config's number of mini-batches is read from."""

    rollout_steps: int
    num_envs: int
    mini_batch: int

    @property
    def count(self) -> int:
        """Mini-batches per epoch (at least one; the nearest whole number where the files'
        mini-batch does not divide their batch)."""
        return max(1, round(self.rollout_steps * self.num_envs / self.mini_batch))

    @classmethod
    def read(cls, cfg: DictConfig) -> ConfiguredBatch | None:
        """The sizes in ``cfg``, or None where one is not a positive integer yet (the
        validator names it) or the config is not embodied."""
        if cfg.get("mode") != "embodied":
            return None
        values = [_select(cfg, p) for p in ("runner.rollout_steps", "env.num_envs", MINI_BATCH)]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            return None
        return cls(*values)


def given_by_user(
    key: str, overrides: Iterable[Override], own: DictConfig, users_own_file: bool
) -> bool:
    """Whether the user set ``key`` (an rlcore key): on the command line, in its spelling or an
    alias's (``actor_rollout_ref.actor.ppo_mini_batch_size``), or in the config file ``own``
    (the file as written) when it is a file of their own (``Request.users_own_file``; the
    shipped configs' values are defaults to follow)."""
    spellings = [key, *(path for path, alias in ALIASES.items() if key in alias.targets)]
    for override in overrides:
        if override.type is OverrideType.DEL:
            continue
        name = override.key_or_group
        for spelling in spellings:
            if spelling == name:
                return True
            if spelling.startswith(f"{name}.") and isinstance(value := override.value(), dict):
                inner = spelling.removeprefix(f"{name}.")
                if _select(OmegaConf.create(value), inner) is not _ABSENT:
                    return True
    return users_own_file and any(_select(own, spelling) is not _ABSENT for spelling in spellings)


def fit_mini_batch(cfg: DictConfig, configured: ConfiguredBatch | None, given: bool) -> list[str]:
    """Set the embodied mini-batch to the configured number of mini-batches of the batch, where
    the mini-batch in ``cfg`` (not ``given`` by the user) no longer divides it; the line to say.
    ``configured``: the sizes before the command line (``ConfiguredBatch.read``)."""
    now = ConfiguredBatch.read(cfg)
    if given or configured is None or now is None:
        return []
    steps, envs, mini = now.rollout_steps, now.num_envs, now.mini_batch
    batch = steps * envs
    if batch % mini == 0:
        return []
    wanted = configured.count
    count = wanted if steps % wanted == 0 else nearest_divisor(steps, wanted)
    OmegaConf.update(cfg, MINI_BATCH, batch // count, merge=False)
    plural = "es" if count > 1 else ""
    why = (
        f"the config's {wanted}"
        if count == wanted
        else f"the divisor of runner.rollout_steps {steps} nearest the config's {wanted}, so "
        "that the actor ranks share it as they share the envs"
    )
    return [
        f"{MINI_BATCH}: {mini} does not divide the batch of {batch} (runner.rollout_steps "
        f"{steps} x env.num_envs {envs}), so it is {batch // count} here: {count} mini-batch"
        f"{plural} per epoch, {why} (CleanRL's num_minibatches); set {MINI_BATCH} to choose another"
    ]


def _select(cfg: DictConfig, path: str) -> Any:
    try:
        return OmegaConf.select(cfg, path, default=_ABSENT)
    except OmegaConfBaseException:  # (an interpolation that cannot resolve: the loader names it)
        return _ABSENT
