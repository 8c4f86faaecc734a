"""The weight version a rollout holds: the driver names the version it synced in every call that
acts or generates, and a rollout holding another refuses (a missed sync would otherwise sample
from a stale policy without a trace)."""

from __future__ import annotations


class StaleWeightsError(RuntimeError):
    """The rollout was asked to act with weights it does not hold (a missed weight sync)."""


def check_weight_version(rank: int, held: int, expected: int) -> None:
    if held != expected:
        raise StaleWeightsError(
            f"rollout rank {rank} holds policy weights of version {held}, but the driver expects "
            f"version {expected}: a weight sync was missed"
        )
