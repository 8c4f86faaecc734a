"""``RewardWorker``, the ``reward`` component: decodes a batch's responses and scores each by
its reward kind's scorer (``router.py``), then checks the rewards and shapes them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.config.schema import ReasoningConfig
from rlcore.config.service_url import redacted
from rlcore.log import warn
from rlcore.models.lm import load_tokenizer
from rlcore.rewards.router import RewardRouter, Routed, build_scorers
from rlcore.rewards.scorer import Rows
from rlcore.rewards.scoring import RewardError
from rlcore.rewards.verdicts import Verdict
from rlcore.scheduler.dispatch import Dispatch, dispatch


class RewardWorker:
    """``score(batch)`` -> ``[B]`` rows of ``scores``, ``correct``, ``unparsed`` (no answer found)
    and ``timed_out``. The kinds math and custom score in processes killed past
    ``reward.rules.timeout_s`` (``ScoringPool``); gsm8k's bounded regex runs here."""

    def __init__(self, ctx: Any, config: ReasoningConfig, model_dir: Path) -> None:
        self.config = config.reward
        self.component_keys = list(config.algorithm.gdpo_reward_keys)
        self.max_response_length = config.data.max_response_length
        self.tokenizer = load_tokenizer(model_dir)
        files = config.data.train_files
        self.data = ", ".join(files) if files else "the synthetic task"
        device = ctx.torch_device if ctx is not None else torch.device("cpu")
        self.router = RewardRouter(self.config, build_scorers(config, device, ctx))

    @dispatch(Dispatch.SHARD)
    def score(self, batch: TensorDict) -> TensorDict:
        given = self._rows(batch)
        routed = self.router.score(given)
        self._check_timeouts(routed, given.texts)
        rows = _verdict_columns(routed.verdicts)
        buffer = self.config.overlong_buffer
        if buffer.enable:
            lengths = batch["response_mask"].sum(-1)
            rows["overlong_penalty"] = overlong_penalty(
                lengths, self.max_response_length, buffer.len, buffer.penalty_factor
            )
            rows["scores"] = rows["scores"] + rows["overlong_penalty"]
        self._check_rewards(routed, rows["scores"])
        if self.component_keys:
            rows["reward_components"] = self._components(
                routed.verdicts, rows.get("overlong_penalty")
            )
        # per row, so that the batch's sum is the count: remote_failures, judge_unparsed; the
        # reward model's own scores, before combine; the judge's answers (validation samples)
        said = routed.columns | {"model_scores": routed.model_scores}
        for key in ("remote_failures", "model_scores", "judge_unparsed"):
            if said.get(key) is not None:
                rows[key] = said[key]
        if "judge_outputs" in said:
            rows["judge_outputs"] = NonTensorStack(*said["judge_outputs"])
        return TensorDict(rows, batch_size=[len(given)])

    def _rows(self, batch: TensorDict) -> Rows:
        """The batch's responses decoded, with the data's columns (verl's data_source and
        extra_info where the files have them); multi-turn (``rollout.tools``, docs/agents.md):
        a custom function (and a reward model, judge or service) reads the whole trajectory,
        its text and extra_info["trajectory"], the built-in rules the model's own text, so a
        tool's output never scores."""
        texts = self._decoded(batch, "response_mask")
        sources, extras = (_column(batch, key, len(texts)) for key in ("sources", "extras"))
        own = texts
        if "trajectories" in batch:
            trajectories = batch["trajectories"].tolist()
            extras = [
                {**(e or {}), "trajectory": t} for e, t in zip(extras, trajectories, strict=True)
            ]
            own = self._decoded(batch, "loss_mask")
        answers = list(batch["answers"])
        return Rows(texts, own, answers, sources, extras, lambda: self._prompts(batch))

    def _decoded(self, batch: TensorDict, mask_key: str) -> list[str]:
        """The responses' tokens under ``batch[mask_key]`` as text."""
        mask = batch[mask_key]
        return self.tokenizer.batch_decode(
            batch["responses"] * mask + self.tokenizer.pad_token_id * (1 - mask),
            skip_special_tokens=True,
        )

    def _prompts(self, batch: TensorDict) -> list[str]:
        """Each row's prompt as text, its left padding dropped (what the model saw)."""
        width = batch["input_ids"].shape[1] - batch["responses"].shape[1]
        ids, keep = batch["input_ids"][:, :width], batch["attention_mask"][:, :width].bool()
        return [
            self.tokenizer.decode(row[k], skip_special_tokens=True)
            for row, k in zip(ids, keep, strict=True)
        ]

    def _check_timeouts(self, routed: Routed, texts: list[str]) -> None:
        """``RewardError`` when more than ``reward.rules.max_timeout_share`` of the batch (and at
        least 2) timed out, else one warning line for those that did."""
        verdicts, unscored = routed.verdicts, routed.unscored
        late = [i for i, v in enumerate(verdicts) if v.timed_out]
        size = len(verdicts)
        if len(late) >= 2 and len(late) > self.config.rules.max_timeout_share * size:
            scorer = (
                f"reward.rules.custom_fn {self.config.rules.custom_fn}"
                if self.config.kind == "custom"
                else f"reward.kind {self.config.kind} (math-verify)"
            )
            or_budget = " or reward.rules.batch_timeout_s" if unscored else ""
            raise RewardError(
                f"reward.rules.max_timeout_share: {len(late)} of {size} responses of a batch "
                f"took over reward.rules.timeout_s={self.config.rules.timeout_s:g} s{unscored} "
                f"with {scorer} on the answers of {self.data}; check the reward and the "
                f"answers, or raise reward.rules.timeout_s{or_budget}"
            )
        if late:
            sample = texts[late[0]][-200:].replace("\n", " ")
            warn(
                f"reward: {len(late)} of {size} responses took over "
                f"reward.rules.timeout_s={self.config.rules.timeout_s:g} s{unscored} and score 0; "
                f"response {late[0]} ends: {sample!r}"
            )

    def _check_rewards(self, routed: Routed, scores: torch.Tensor) -> None:
        """``RewardError`` naming the reward and the value unless every reward, its source's
        (a model's before ``reward.model.combine`` too) and the final one, is a finite number within
        ``reward.score_range``: a NaN or an infinity would make every optimiser step
        non-finite, and each be skipped without a word."""
        low, high = self.config.score_range
        given = [(i, v.score, "") for i, v in enumerate(routed.verdicts)]
        if routed.model_scores is not None:
            given += [
                (i, float(routed.model_scores[i]), " (before reward.model.combine)")
                for i in routed.modelled
            ]
        shaped = (
            " with reward.overlong_buffer's penalty" if self.config.overlong_buffer.enable else ""
        )
        given += [(i, float(score), shaped) for i, score in enumerate(scores.tolist())]
        for i, value, when in given:
            if not (math.isfinite(value) and low <= value <= high):
                raise RewardError(
                    f"reward.score_range: response {i} scored {value:g}{when} by "
                    f"{self._source(routed.kinds[i])}, outside [{low:g}, {high:g}] or not a "
                    "finite number (it would make the optimiser skip its steps); fix the "
                    "reward, or widen reward.score_range"
                )

    def _source(self, kind: str) -> str:
        """A reward kind as messages name it, with the key that says where it comes from."""
        cfg = self.config
        if kind == "custom":
            return f"reward.rules.custom_fn {cfg.rules.custom_fn}"
        if kind == "remote":
            return f"reward.remote.url {redacted(cfg.remote.url)}"
        if kind in ("model", "judge"):
            return f"the {kind} at reward.model.path {cfg.model.path}"
        return f"reward.kind {kind} (reward.rules.correct_score, format_score)"

    def _components(self, verdicts: list, penalty: torch.Tensor | None) -> torch.Tensor:
        """``[B, K]``: each response's ``algorithm.gdpo_reward_keys`` components (0 for a
        timed-out response); ``overlong_penalty`` is the buffer's when it is enabled."""
        columns = []
        for key in self.component_keys:
            if key == "overlong_penalty" and penalty is not None:
                columns.append(penalty.to(torch.float32))
                continue
            column = []
            for i, verdict in enumerate(verdicts):
                parts = verdict.components
                if parts is not None and key not in parts:
                    raise RewardError(
                        f"algorithm.gdpo_reward_keys: '{key}' is not among the numbers the "
                        f"reward gave response {i} ({', '.join(parts)}); return it from "
                        f"reward.rules.custom_fn ({self.config.rules.custom_fn}) in the dict, or "
                        "remove it "
                        "from gdpo_reward_keys"
                    )
                column.append(0.0 if parts is None else parts[key])
            columns.append(torch.tensor(column, dtype=torch.float32))
        return torch.stack(columns, dim=1)

    def close(self) -> None:
        router = getattr(self, "router", None)  # (a worker whose start failed has none)
        if router is not None:
            router.close()


def _verdict_columns(verdicts: list[Verdict]) -> dict[str, torch.Tensor]:
    """``[B]`` columns of the verdicts: the score, whether it is right, whether there is a
    verdict, whether no answer was found, whether it timed out."""
    return {
        "scores": torch.tensor([v.score for v in verdicts], dtype=torch.float32),
        "correct": torch.tensor([bool(v.correct) for v in verdicts]),
        "judged": torch.tensor([v.judged for v in verdicts]),
        "unparsed": torch.tensor(
            [v.judged and v.correct is None and not v.timed_out for v in verdicts]
        ),
        "timed_out": torch.tensor([v.timed_out for v in verdicts]),
    }


def _column(batch: TensorDict, key: str, size: int) -> list[Any]:
    """The batch's non-tensor column ``key`` as a list (Nones where the batch has none)."""
    column = batch.get(key, None)
    return [None] * size if column is None else column.tolist()


def overlong_penalty(
    lengths: torch.Tensor, max_length: int, buffer: int, factor: float
) -> torch.Tensor:
    """DAPO's overlong reward shaping (Yu et al. 2025, arXiv 2503.14476; verl's DAPO reward
    manager): 0 for a response of at most ``max_length - buffer`` tokens, then falling linearly
    to ``-factor`` at ``max_length``: ``min(0, -(length - (max_length - buffer)) / buffer *
    factor)``."""
    excess = lengths.to(torch.float32) - (max_length - buffer)
    return torch.clamp(-excess / buffer * factor, max=0.0)
