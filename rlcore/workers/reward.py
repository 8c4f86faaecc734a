"""``RewardWorker``, the ``reward`` component: decodes responses and scores them against the
reference answers with the rules of ``rlcore.rewards``."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.config.schema import ReasoningConfig
from rlcore.config.service_url import redacted
from rlcore.data.answers import scorer_of
from rlcore.log import warn
from rlcore.models.lm import load_tokenizer
from rlcore.rewards.judge import Verdict
from rlcore.rewards.remote import RemoteScorer
from rlcore.rewards.rules import load_custom_fn
from rlcore.rewards.scoring import RewardError, Rules, ScoringPool, judge
from rlcore.scheduler.dispatch import Dispatch, dispatch
from rlcore.workers.reward_judge import JudgeScorer
from rlcore.workers.reward_model import ModelScorer


class RewardWorker:
    """``score(batch)`` -> ``[B]`` rows of ``scores``, ``correct``, ``unparsed`` (no answer found)
    and ``timed_out``. The kinds math and custom score in processes killed past
    ``reward.timeout_s`` (``ScoringPool``); gsm8k's bounded regex runs here."""

    def __init__(self, ctx: Any, config: ReasoningConfig, model_dir: Path) -> None:
        self.config = config.reward
        self.component_keys = list(config.algorithm.gdpo_reward_keys)
        self.max_response_length = config.data.max_response_length
        self.tokenizer = load_tokenizer(model_dir)
        self.gsm8k = Rules.of(self.config, "gsm8k")
        files = config.data.train_files
        self.data = ", ".join(files) if files else "the synthetic task"
        # the rule of each verdict: reward.kind, or with a reward model its reward.rule
        self.rule = self.config.rule if self.config.kind == "model" else self.config.kind
        used = {self.config.kind, *self.config.sources.values()}  # (reward.sources routes rows)
        if self.rule == "custom" or "custom" in used:
            load_custom_fn(self.config.custom_fn)  # a bad file fails here, naming the key
        # math and custom score in processes, one pool per rule, started at its first row (at
        # once for a run that scores every row so)
        self.pools: dict[str, ScoringPool] = {}
        if self.rule in ("math", "custom"):
            self.pools[self.rule] = ScoringPool(self.config, kind=self.rule)
        self.remote = RemoteScorer(self.config) if "remote" in used else None
        self.model: ModelScorer | None = None
        self.judge: JudgeScorer | None = None
        device = ctx.torch_device if ctx is not None else torch.device("cpu")
        if "model" in used:
            self.model = ModelScorer(config, device, ctx)
        if "judge" in used:
            self.judge = JudgeScorer(config, device, ctx)

    @dispatch(Dispatch.SHARD)
    def score(self, batch: TensorDict) -> TensorDict:
        texts = self._decoded(batch, "response_mask")
        pairs = list(zip(texts, batch["answers"], strict=True))
        # verl's data_source and extra_info, where the files have them (None elsewhere)
        sources, extras = (_column(batch, key, len(pairs)) for key in ("sources", "extras"))
        kinds = [self._kind_of(source) for source in sources]
        own = texts  # the model's own text: all of it, unless tools answered in between
        if "trajectories" in batch:  # multi-turn (rollout.tools): docs/agents.md
            # a custom function (and a reward model, judge or service) reads the whole
            # trajectory, text and extra_info["trajectory"]; the built-in rules (below) the
            # model's own text, so a tool's output never scores
            trajectories = batch["trajectories"].tolist()
            extras = [
                {**(e or {}), "trajectory": t} for e, t in zip(extras, trajectories, strict=True)
            ]
            own = self._decoded(batch, "loss_mask")
        # the verdicts of the rows a rule scores: theirs, and those of the reward model's rows
        rules = [
            scorer_of(self.config.rule, s)
            if k in ("model", "judge")
            else (None if k == "remote" else k)
            for k, s in zip(kinds, sources, strict=True)
        ]
        verdicts: list[Any] = [None] * len(pairs)
        ruled = [i for i, rule in enumerate(rules) if rule is not None]
        if ruled:
            context = [(sources[i], extras[i]) for i in ruled]
            read = [(own[i] if rules[i] in ("gsm8k", "math") else texts[i]) for i in ruled]
            ruled_pairs = [(text, pairs[i][1]) for text, i in zip(read, ruled, strict=True)]
            allowed = (
                max(1, int(self.config.max_timeout_share * len(texts)))
                if self.config.max_timeout_share < 1
                else None
            )
            found = self._judge(ruled_pairs, [rules[i] for i in ruled], context, allowed)
            for i, verdict in zip(ruled, found, strict=True):
                verdicts[i] = verdict
        failures = model_scores = None
        remote = [i for i, k in enumerate(kinds) if k == "remote"]
        if remote:
            asked, failed = self._ask_remote(
                batch[remote], [pairs[i] for i in remote], [sources[i] for i in remote]
            )
            failures = torch.zeros(len(pairs))
            failures[remote] = failed
            for i, verdict in zip(remote, asked, strict=True):
                verdicts[i] = verdict
        modelled = [i for i, k in enumerate(kinds) if k in ("model", "judge")]
        judge_rows = None
        if not modelled and self.model is not None and self.model.collective:
            self.model.score([], [])  # (no rows here: its passes join the other ranks')
        if modelled:
            prompts = self._prompts(batch)
            asked = [prompts[i] for i in modelled], [texts[i] for i in modelled]
            if self.judge is not None:  # (validation: one or the other is used)
                answers = [pairs[i][1] for i in modelled]
                scored = self.judge.score(*asked, answers)
                judge_rows = (modelled, self.judge.outputs, self.judge.unparsed)
            else:
                scored = self.model.score(*asked)
            model_scores = torch.full((len(pairs),), float("nan"))  # (nan: rows it did not score)
            model_scores[modelled] = scored
            combined = self._combined([verdicts[i] for i in modelled], scored)
            for i, verdict in zip(modelled, combined, strict=True):
                verdicts[i] = verdict
        late = [i for i, v in enumerate(verdicts) if v.timed_out]
        unscored = "" if not ruled else self._unscored_said()
        if len(late) >= 2 and len(late) > self.config.max_timeout_share * len(texts):
            scorer = (
                f"reward.custom_fn {self.config.custom_fn}"
                if self.config.kind == "custom"
                else f"reward.kind {self.config.kind} (math-verify)"
            )
            raise RewardError(
                f"reward.max_timeout_share: {len(late)} of {len(texts)} responses of a batch "
                f"took over reward.timeout_s={self.config.timeout_s:g} s{unscored} with "
                f"{scorer} on the answers of {self.data}; check the reward and the answers, or "
                f"raise reward.timeout_s{' or reward.batch_timeout_s' if unscored else ''}"
            )
        if late:
            sample = texts[late[0]][-200:].replace("\n", " ")
            warn(
                f"reward: {len(late)} of {len(texts)} responses took over "
                f"reward.timeout_s={self.config.timeout_s:g} s{unscored} and score 0; response "
                f"{late[0]} ends: {sample!r}"
            )
        rows = {
            "scores": torch.tensor([v.score for v in verdicts], dtype=torch.float32),
            "correct": torch.tensor([bool(v.correct) for v in verdicts]),
            "judged": torch.tensor([v.judged for v in verdicts]),
            "unparsed": torch.tensor(
                [v.judged and v.correct is None and not v.timed_out for v in verdicts]
            ),
            "timed_out": torch.tensor([v.timed_out for v in verdicts]),
        }
        buffer = self.config.overlong_buffer
        if buffer.enable:
            lengths = batch["response_mask"].sum(-1)
            rows["overlong_penalty"] = overlong_penalty(
                lengths, self.max_response_length, buffer.len, buffer.penalty_factor
            )
            rows["scores"] = rows["scores"] + rows["overlong_penalty"]
        self._check_rewards(verdicts, kinds, rows["scores"], model_scores, modelled)
        if self.component_keys:
            rows["reward_components"] = self._components(verdicts, rows.get("overlong_penalty"))
        if failures is not None:  # per row, so that the batch's sum is the count
            rows["remote_failures"] = failures
        if model_scores is not None:  # the reward model's own, before combine
            rows["model_scores"] = model_scores
        if judge_rows is not None:  # the judge's answers (validation samples) and misses
            rows_judged, outputs, unparsed = judge_rows
            said = [""] * len(texts)
            for i, output in zip(rows_judged, outputs, strict=True):
                said[i] = output
            missed = torch.zeros(len(texts))
            missed[:unparsed] = 1.0  # (a count: which rows does not matter)
            rows["judge_unparsed"] = missed
            rows["judge_outputs"] = NonTensorStack(*said)
        return TensorDict(rows, batch_size=[len(texts)])

    def _decoded(self, batch: TensorDict, mask_key: str) -> list[str]:
        """The responses' tokens under ``batch[mask_key]`` as text."""
        mask = batch[mask_key]
        return self.tokenizer.batch_decode(
            batch["responses"] * mask + self.tokenizer.pad_token_id * (1 - mask),
            skip_special_tokens=True,
        )

    def _ask_remote(
        self, batch: TensorDict, pairs: list[tuple[str, str]], sources: list[Any]
    ) -> tuple[list[Verdict], torch.Tensor]:
        """Each response's verdict from the reward service (``rlcore/rewards/remote.py``), and
        ``[B]`` 1 where its request failed (scored 0 under ``reward.on_error: zero``)."""
        items = [
            {"prompt": prompt, "response": text, "answer": answer, "data_source": source}
            for prompt, (text, answer), source in zip(
                self._prompts(batch), pairs, sources, strict=True
            )
        ]
        answer = self.remote.score(items)
        if answer.failed:
            warn(
                f"reward: {answer.failed} of {len(items)} responses score 0: their requests to "
                f"reward.url {redacted(self.config.url)} failed (reward.on_error=zero)"
            )
        judged = answer.correct is not None
        verdicts = [
            Verdict(score, answer.correct[i] if judged else None, judged=judged)
            for i, score in enumerate(answer.scores)
        ]
        failed = torch.zeros(len(items))
        failed[: answer.failed] = 1.0  # (a count: which rows does not matter)
        return verdicts, failed

    def _kind_of(self, source: Any) -> str:
        """A row's reward kind: its data source's in ``reward.sources``, else ``reward.kind``;
        a rule kind resolved to the rule (auto: by the source, as verl's default scorer)."""
        kind = self.config.sources.get(source, self.config.kind) if source else self.config.kind
        return kind if kind in ("remote", "model") else scorer_of(kind, source)

    def _prompts(self, batch: TensorDict) -> list[str]:
        """Each row's prompt as text, its left padding dropped (what the model saw)."""
        width = batch["input_ids"].shape[1] - batch["responses"].shape[1]
        ids, keep = batch["input_ids"][:, :width], batch["attention_mask"][:, :width].bool()
        return [
            self.tokenizer.decode(row[k], skip_special_tokens=True)
            for row, k in zip(ids, keep, strict=True)
        ]

    def _combined(self, verdicts: list[Verdict], model_scores: torch.Tensor) -> list[Verdict]:
        """The rule's verdicts with the reward model's score as ``reward.combine`` says."""
        cfg = self.config
        weights = {
            "rule_only_for_accuracy": (1.0, 0.0),
            "sum": (1.0, 1.0),
            "weighted": (cfg.model_weight, cfg.rule_weight),
        }[cfg.combine]
        return [
            dataclasses.replace(v, score=weights[0] * float(m) + weights[1] * v.score)
            for v, m in zip(verdicts, model_scores, strict=True)
        ]

    def _check_rewards(
        self,
        verdicts: list[Verdict],
        kinds: list[str],
        scores: torch.Tensor,
        model_scores: torch.Tensor | None,
        modelled: list[int],
    ) -> None:
        """``RewardError`` naming the reward and the value unless every reward, its source's
        (a model's before ``reward.combine`` too) and the final one, is a finite number within
        ``reward.score_range``: a NaN or an infinity would make every optimiser step
        non-finite, and each be skipped without a word."""
        low, high = self.config.score_range
        given = [(i, v.score, "") for i, v in enumerate(verdicts)]
        if model_scores is not None:
            given += [(i, float(model_scores[i]), " (before reward.combine)") for i in modelled]
        shaped = (
            " with reward.overlong_buffer's penalty" if self.config.overlong_buffer.enable else ""
        )
        given += [(i, float(score), shaped) for i, score in enumerate(scores.tolist())]
        for i, value, when in given:
            if not (math.isfinite(value) and low <= value <= high):
                raise RewardError(
                    f"reward.score_range: response {i} scored {value:g}{when} by "
                    f"{self._source(kinds[i])}, outside [{low:g}, {high:g}] or not a finite "
                    "number (it would make the optimiser skip its steps); fix the reward, or "
                    "widen reward.score_range"
                )

    def _source(self, kind: str) -> str:
        """A reward kind as messages name it, with the key that says where it comes from."""
        cfg = self.config
        if kind == "custom":
            return f"reward.custom_fn {cfg.custom_fn}"
        if kind == "remote":
            return f"reward.url {redacted(cfg.url)}"
        if kind in ("model", "judge"):
            return f"the {kind} at reward.model_path {cfg.model_path}"
        return f"reward.kind {kind} (reward.correct_score, format_score)"

    def _unscored_said(self) -> str:
        """The last batch's responses that the scoring pools left unscored, as messages say
        it ("" for none)."""
        unscored = sum(pool.unscored for pool in self.pools.values())
        if not unscored:
            return ""
        budget = self.config.batch_timeout_s
        return (
            f" or were not scored ({unscored}: past reward.batch_timeout_s={budget:g} s, or "
            "once too many had timed out)"
        )

    def _judge(
        self,
        pairs: list[tuple[str, str]],
        kinds: list[str],
        context: list[tuple[Any, Any]],
        max_timeouts: int | None = None,
    ) -> list[Any]:
        """Each pair's verdict by its rule: gsm8k's here, math's and custom's in the pool (with
        each row's ``context``, its data_source and extra_info, for a function written as
        verl's); a pool stops once over ``max_timeouts`` of the batch timed out (the run ends
        then: ``reward.max_timeout_share``)."""
        for pool in self.pools.values():
            pool.unscored = 0
        verdicts: list[Any] = [None] * len(pairs)
        pooled = [i for i, kind in enumerate(kinds) if kind != "gsm8k"]
        for i, kind in enumerate(kinds):
            if kind == "gsm8k":
                verdicts[i] = judge(self.gsm8k, None, *pairs[i], i)
        for rule in sorted({kinds[i] for i in pooled}):
            rows = [i for i in pooled if kinds[i] == rule]
            if rule not in self.pools:  # (auto or reward.sources: the first row of that rule)
                self.pools[rule] = ScoringPool(self.config, kind=rule)
            items = [(*pairs[i], *context[i]) for i in rows]
            late = sum(v is not None and v.timed_out for v in verdicts)
            left = None if max_timeouts is None else max(0, max_timeouts - late)
            for i, verdict in zip(rows, self.pools[rule].score(items, left), strict=True):
                verdicts[i] = verdict
        return verdicts

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
                        f"reward.custom_fn ({self.config.custom_fn}) in the dict, or remove it "
                        "from gdpo_reward_keys"
                    )
                column.append(0.0 if parts is None else parts[key])
            columns.append(torch.tensor(column, dtype=torch.float32))
        return torch.stack(columns, dim=1)

    def close(self) -> None:
        if getattr(self, "judge", None) is not None:  # (a worker whose start failed has none)
            self.judge.close()
        self.model = self.judge = None
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()
        if self.remote is not None:
            self.remote.close()


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
