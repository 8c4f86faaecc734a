"""``reward.model.score_normalize``: the reward model's (or judge's) scores standardised by running
statistics, in the driver, which sees every rank's rows and keeps the statistics in its
checkpoint state (a resumed run normalises as the unbroken one).

Per training batch, the rows a model scored (``model_scores`` not NaN) first update the running
count, mean and sum of squared deviations (Chan et al.'s parallel update: the same as one pass
over every score so far), then each such row's reward loses its model part ``w * m`` and gains
``w * (m - mean) / std`` (population std, 1 when it is 0), ``w`` the model score's weight in
``reward.model.combine`` (``model_weight`` when weighted, else 1). The rule's part, the verdicts and
validation's scores are left as they are.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict

from rlcore.columns import SCORES


class ScoreNormalizer:
    def __init__(self, reward: Any) -> None:
        self.weight = reward.model.model_weight if reward.model.combine == "weighted" else 1.0
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    @classmethod
    def of(cls, reward: Any) -> ScoreNormalizer | None:
        """The normaliser of the reward section ``reward``; None without
        ``reward.model.score_normalize``."""
        return cls(reward) if reward.model.score_normalize else None

    def __call__(self, scored: TensorDict) -> dict[str, float]:
        """The ``scores`` column normalised in place where a model scored; the metrics."""
        model = scored.get("model_scores", None)
        if model is None:
            return {}
        rows = ~torch.isnan(model)
        if not bool(rows.any()):
            return {}
        values = model[rows].double()
        n, mean = values.numel(), float(values.mean())
        m2 = float(((values - mean) ** 2).sum())
        total = self.count + n
        delta = mean - self.mean
        self.m2 += m2 + delta * delta * self.count * n / total
        self.mean += delta * n / total
        self.count = total
        std = math.sqrt(self.m2 / self.count) or 1.0
        normalised = (values - self.mean) / std
        scores = scored[SCORES].clone()
        scores[rows] = (scores[rows].double() + self.weight * (normalised - values)).float()
        scored[SCORES] = scores
        return {"reward/model_score_running_mean": self.mean, "reward/model_score_running_std": std}

    def state_dict(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.count, self.mean, self.m2 = int(state["count"]), state["mean"], state["m2"]
