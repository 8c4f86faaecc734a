"""Rule-based rewards for reasoning runs: GSM8K numbers, math answers via math-verify, or a
user's function. Model output is only parsed, never executed, and scoring has a deadline that
holds (scoring.py). The ``reward`` component that runs them on a run's responses is
``rlcore.workers.reward.RewardWorker``.

Names are imported on first use: a scoring process imports ``rlcore.rewards.judge`` without
torch or transformers, so it starts (and is replaced after a timeout) in a fraction of a second.
"""

from __future__ import annotations

from rlcore.lazy import lazy_exports

_WHERE = {
    "RewardError": "rlcore.rewards.scoring",
    "ScoringPool": "rlcore.rewards.scoring",
    "Rules": "rlcore.rewards.judge",
    "Verdict": "rlcore.rewards.judge",
    "judge": "rlcore.rewards.judge",
    "gsm8k_correct": "rlcore.rewards.rules",
    "load_custom_fn": "rlcore.rewards.rules",
    "math_correct": "rlcore.rewards.rules",
}

__all__ = sorted(_WHERE)

__getattr__ = lazy_exports("rlcore.rewards", _WHERE)
