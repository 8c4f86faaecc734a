"""The reward code in one room: the rules (``rules.py``) and the verdict on one response
(``verdicts.py``), the scoring processes killed past ``reward.rules.timeout_s`` (``scoring.py``),
the ``Scorer`` seam every reward kind is scored through (``scorer.py``: the rules; ``remote.py``: an
HTTP service; ``model.py``: a reward model; ``judge.py``: a generative judge), the router that
sends each row to its kind's scorer by its data source (``router.py``) and the ``reward``
component that runs them on a run's responses (``worker.py``: ``RewardWorker``).

Names are imported on first use: a scoring process imports ``rlcore.rewards.verdicts`` without
torch or transformers, so it starts (and is replaced after a timeout) in a fraction of a second.
"""

from __future__ import annotations

from rlcore.lazy import lazy_exports

_WHERE = {
    "RewardError": "rlcore.rewards.scoring",
    "ScoringPool": "rlcore.rewards.scoring",
    "Rules": "rlcore.rewards.verdicts",
    "Verdict": "rlcore.rewards.verdicts",
    "rule_verdict": "rlcore.rewards.verdicts",
    "gsm8k_correct": "rlcore.rewards.rules",
    "load_custom_fn": "rlcore.rewards.rules",
    "math_correct": "rlcore.rewards.rules",
}

__all__ = sorted(_WHERE)

__getattr__ = lazy_exports("rlcore.rewards", _WHERE)
