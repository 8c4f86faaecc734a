"""``ScoringPool``: judging that may not finish (math-verify's sympy, a user's function) runs in
worker processes under a deadline that holds (``rlcore.procpool.DeadlinePool``).

Each response gets ``reward.rules.timeout_s`` in one of ``reward.rules.num_processes`` processes:
Python- level work (a sleep, sympy's loops) is stopped in its process at 0.8 of it
(``procpool.SoftDeadline``), which goes on; past the whole of it (code stuck in C), the process
is killed and replaced. Either way the response scores 0 and counts as timed out. So a
batch of B responses takes at most ``ceil(B / num_processes) * timeout_s`` plus the restarts,
whatever the scorer does, and at most ``reward.rules.batch_timeout_s`` in all: past it, the
responses being scored are stopped and those not started are not scored (both score 0 and
count as timed out), so a scorer that keeps timing out costs the budget, not a deadline and a
restarted process per response. A batch where most time out ends the run
(``reward.rules.max_timeout_share``, in the reward worker), as soon as that many have: the rest are
not scored. The verdicts themselves: ``verdicts.py``.
"""

from __future__ import annotations

from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.procpool import SKIPPED, START_TIMEOUT_S, DeadlinePool, PoolFailed
from rlcore.rewards.verdicts import Rules, Verdict, rule_verdict, serve

__all__ = ["RewardError", "Rules", "ScoringPool", "Verdict", "rule_verdict"]


class RewardError(ConfigError):
    """A custom reward function that raised or returned something other than a finite number
    (or ``{"score": number, "correct": bool}``), named by ``reward.rules.custom_fn``: the run
    stops."""


class ScoringPool:
    """``reward.rules.num_processes`` scoring processes (see the module docstring)."""

    def __init__(self, config: Any, kind: str | None = None, answer_key: str = "answer") -> None:
        """``kind``: the rule to score with, in place of ``config.kind`` (math, for the rows
        that ``reward.kind`` auto routes to it); ``answer_key``: ``data.answer_key``."""
        self.rules = Rules.of(config, kind, answer_key)
        rules = config.rules
        self.timeout_s = rules.timeout_s
        self.budget_s = rules.batch_timeout_s
        self.pool = DeadlinePool(serve, self.rules, rules.num_processes, rules.timeout_s)
        self.unscored = 0  # the last batch's responses not scored (the budget, max_timeouts)

    def score(self, pairs: list[tuple], max_timeouts: int | None = None) -> list[Verdict]:
        """One verdict per ``(response, answer)`` (or ``(response, answer, data_source,
        extra_info)``, for a custom function written as verl's), in order; ``RewardError`` for
        a bad reward, or a scoring process that died (not a timeout: that scores 0). Past
        ``reward.rules.batch_timeout_s``, or once over ``max_timeouts`` responses timed out, the
        rest are not scored: they score 0 as timed out, counted in ``unscored``."""
        try:
            outcomes = self.pool.run(
                pairs,
                stop_on_death=True,
                budget_s=self.budget_s,
                max_timeouts=max_timeouts,
                timed_out=lambda result: getattr(result, "timed_out", False),
            )
        except PoolFailed as error:
            if str(error).startswith("no process started"):
                raise RewardError(
                    f"reward: no scoring process started within {START_TIMEOUT_S:g} s"
                ) from None
            raise RewardError(f"reward.rules.custom_fn: {self.rules.custom_fn}: {error}") from None
        verdicts = []
        self.unscored = sum(outcome is SKIPPED for outcome in outcomes)
        for index, outcome in enumerate(outcomes):
            if outcome is not None and outcome.kind == "died":
                scorer = (
                    f"reward.rules.custom_fn {self.rules.custom_fn}"
                    if self.rules.custom_fn
                    else "reward"
                )
                raise RewardError(
                    f"{scorer}: the scoring process died on response {index}, {outcome.result}; "
                    "not a timeout"
                )
            if outcome.kind in ("timeout", "skipped") or outcome.result is None:
                verdicts.append(Verdict(0.0, False, timed_out=True))
            elif isinstance(outcome.result, str):
                raise RewardError(outcome.result)
            else:
                verdicts.append(outcome.result)
        return verdicts

    def close(self) -> None:
        """Stop the processes."""
        self.pool.close()
