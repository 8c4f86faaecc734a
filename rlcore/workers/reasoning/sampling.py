"""The options a rollout engine samples with, read from the config in one place for every
engine (``hf`` and ``sglang``)."""

from __future__ import annotations

from rlcore.config.schema import ReasoningConfig


def sampling(config: ReasoningConfig, validation: bool) -> tuple[float, float, int]:
    """``(temperature, top_p, top_k)`` of the training's samples, or of the validation samples
    (``runner.val_n``); top_k 0 = no limit."""
    r = config.rollout
    if validation:
        return r.val_temperature, r.val_top_p, r.val_top_k
    return r.temperature, r.top_p, r.top_k
