"""``RewardWorker``: decodes responses and scores them against the reference answers."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rlcore.config.schema import ReasoningConfig
from rlcore.models.lm import load_tokenizer
from rlcore.rewards.rules import gsm8k_correct, load_custom_fn, math_correct
from rlcore.scheduler.dispatch import Dispatch, dispatch


class RewardWorker:
    """``score(batch)`` -> ``[B]`` rows of ``scores``, ``correct``, ``unparsed`` (no answer found)
    and ``timed_out``. A response whose scoring outlasts ``reward.timeout_s`` scores 0 (the thread
    is abandoned: Python cannot stop it, but the run goes on)."""

    def __init__(self, ctx: Any, config: ReasoningConfig, model_dir: Path) -> None:
        self.config = config.reward
        self.tokenizer = load_tokenizer(model_dir)
        self.custom = (
            load_custom_fn(self.config.custom_fn) if self.config.kind == "custom" else None
        )
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)

    def judge(self, response: str, answer: str) -> tuple[float, bool | None]:
        """``(score, correct)`` of one response; ``correct`` is None when it has no answer."""
        cfg = self.config
        if self.custom is not None:
            score = float(self.custom(response, answer))
            return score, score >= cfg.correct_score
        if cfg.kind == "math":
            correct = math_correct(response, answer)
        else:
            correct = gsm8k_correct(response, answer, cfg.gsm8k_mode)
        if correct is None:
            return 0.0, None
        return (cfg.correct_score if correct else cfg.format_score), correct

    @dispatch(Dispatch.SHARD)
    def score(self, batch: TensorDict) -> TensorDict:
        texts = self.tokenizer.batch_decode(
            batch["responses"] * batch["response_mask"]
            + self.tokenizer.pad_token_id * (1 - batch["response_mask"]),
            skip_special_tokens=True,
        )
        futures = [
            self.pool.submit(self.judge, t, a) for t, a in zip(texts, batch["answers"], strict=True)
        ]
        scores, correct, unparsed, timed_out = [], [], [], []
        for future in futures:
            late = False
            try:
                score, right = future.result(timeout=self.config.timeout_s)
            except concurrent.futures.TimeoutError:
                score, right, late = 0.0, False, True
                # A stuck thread keeps its slot; a fresh pool keeps the next batch moving.
                self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)
            unparsed.append(right is None)
            timed_out.append(late)
            scores.append(score)
            correct.append(bool(right))
        rows = {"scores": torch.tensor(scores, dtype=torch.float32),
                "correct": torch.tensor(correct), "unparsed": torch.tensor(unparsed),
                "timed_out": torch.tensor(timed_out)}  # fmt: skip
        return TensorDict(rows, batch_size=[len(texts)])
