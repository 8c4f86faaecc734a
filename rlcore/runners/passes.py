"""The passes a scored reasoning batch takes before its advantages: the old log-probs (the
actor's own recomputation, or the rollout's when they are the same numbers), the reference's
log-probs (for a KL) and the critic's values.

Which passes a run needs is decided once, from the config and the components (``Passes``); a
synchronous iteration runs them one after the other (``run``), an asynchronous one submits them
at once and waits for them later (``submit`` / ``wait``, ``pipeline.py``).
"""

from __future__ import annotations

from typing import Any

from tensordict import TensorDict

from rlcore.algorithms import ADVANTAGES
from rlcore.columns import (
    OLD_LOG_PROBS,
    REF_LOG_PROBS,
    ROLLOUT_LOG_PROBS,
    SUM_PI_SQUARED,
    VALUES,
)
from rlcore.config.schema import ReasoningConfig
from rlcore.runners.progress import Stopwatch
from rlcore.scheduler.handles import Pending, submit


class Passes:
    """A run's passes: ``calls`` as ``(timer, component, method, key)``, ``key`` the batch
    column the answer goes to (``None``: the answer is a ``TensorDict`` of columns).

    ``reuse_log_probs``: the rollout's log-probs are the old ones (bypass mode, or a rollout
    that samples with the actor's own module when nothing asks for a recomputation);
    ``record_log_probs``: the rollout returns its log-probs (reused, compared by the rollout
    correction, asked for, or an asynchronous run's)."""

    def __init__(
        self,
        config: ReasoningConfig,
        actor: Any,
        rollout: Any,
        ref: Any | None,
        critic: Any | None,
    ) -> None:
        alg = config.algorithm
        self.inputs = ADVANTAGES.entry(alg.adv_type).traits["inputs"]
        corr = alg.rollout_correction
        self.reuse_log_probs = config.derived.bypass_mode or (
            not config.actor.recompute_log_probs
            and SUM_PI_SQUARED not in self.inputs
            and rollout.generates_with_the_actor()
        )
        self.record_log_probs = (
            self.reuse_log_probs
            or corr.corrects
            or config.rollout.calculate_log_probs
            or config.runner.max_staleness > 0
        )
        self.calls: list[tuple[str, Any, str, str | None]] = []
        if not self.reuse_log_probs:  # the optimal token baselines want a second column
            both = SUM_PI_SQUARED in self.inputs
            method = "compute_log_probs_and_sum_pi_squared" if both else "compute_log_probs"
            self.calls.append(("logprob", actor, method, None if both else OLD_LOG_PROBS))
        if ref is not None:
            self.calls.append(("ref", ref, "compute_log_probs", REF_LOG_PROBS))
        elif alg.kl_loss_on or alg.kl_reward_on:  # LoRA: the base model is the reference
            self.calls.append(("ref", actor, "compute_ref_log_probs", REF_LOG_PROBS))
        if critic is not None:
            self.calls.append(("values", critic, "compute_values", VALUES))

    def run(self, batch: TensorDict, watch: Stopwatch) -> None:
        """Each pass in turn, timed by ``watch``; the answers into ``batch``."""
        self._reuse(batch)
        for timer, component, method, key in self.calls:
            with watch(timer):
                _put(batch, key, getattr(component, method)(batch))

    def submit(self, batch: TensorDict) -> list[tuple[str | None, Pending]]:
        """Every pass started (``scheduler.handles.submit``), for ``wait``."""
        self._reuse(batch)
        return [(key, submit(component, method, batch)) for _, component, method, key in self.calls]

    @staticmethod
    def wait(pending: list[tuple[str | None, Pending]], batch: TensorDict) -> None:
        """The answers of ``submit``'s passes into ``batch``."""
        for key, answer in pending:
            _put(batch, key, answer.result())

    def _reuse(self, batch: TensorDict) -> None:
        if self.reuse_log_probs:
            batch.rename_key_(ROLLOUT_LOG_PROBS, OLD_LOG_PROBS)


def _put(batch: TensorDict, key: str | None, answer: Any) -> None:
    if key is None:
        batch.update(answer)
    else:
        batch[key] = answer
