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

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "scoring": ("RewardError", "ScoringPool"),
        "verdicts": ("Rules", "Verdict", "rule_verdict"),
        "rules": ("gsm8k_correct", "load_custom_fn", "math_correct"),
    },
)
