"""``RewardRouter``: each row of a batch to the scorer of its reward kind, which its data source
picks (``reward.sources``: verl's data_source column), else ``reward.kind``.

A row of a rule kind gets the rule's verdict (``RuleScorer``); a row of kind remote the
service's (``RemoteScorer``); a row of kind model or judge the rule's verdict
(``reward.model.rule``) and the model's score, combined as ``reward.model.combine`` says. Every row
a rule judges is scored in one call, so that ``reward.rules.max_timeout_share`` and
``reward.rules.batch_timeout_s`` count the whole batch's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from rlcore.data.answers import scorer_of
from rlcore.rewards.rules import load_custom_fn
from rlcore.rewards.scorer import Rows, RuleScorer, Scorer
from rlcore.rewards.verdicts import Verdict

MODELLED = ("model", "judge")  # the kinds a model scores (a rule still gives the verdict)


@dataclass
class Routed:
    """One batch's verdicts and kinds, one per row, and what the scorers said besides:
    ``model_scores`` (the model's or judge's own, before ``reward.model.combine``: ``[B]``, nan
    where it scored none), ``modelled`` (its rows), ``columns`` (``remote_failures``,
    ``judge_unparsed``, ``judge_outputs``: per row, for the metrics and the validation
    samples) and ``unscored`` (the rows the scoring pools left unscored, as messages say
    it)."""

    verdicts: list[Verdict]
    kinds: list[str]
    model_scores: torch.Tensor | None = None
    modelled: list[int] = field(default_factory=list)
    columns: dict[str, Any] = field(default_factory=dict)
    unscored: str = ""


def build_scorers(config: Any, device: torch.device, ctx: Any = None) -> dict[str, Scorer]:
    """The scorers of the reward kinds ``config.reward`` uses (``reward.kind`` and those of
    ``reward.sources``), each built once per reward rank; the rules' always."""
    reward = config.reward
    used = {reward.kind, *reward.sources.values()}
    rule = reward.model.rule if reward.kind == "model" else reward.kind  # the rule of most verdicts
    answer_key = config.data.answer_key
    if rule == "custom" or "custom" in used:
        load_custom_fn(reward.rules.custom_fn, answer_key)  # a bad file fails here, naming the key
    scorers: dict[str, Scorer] = {"rule": RuleScorer(reward, start=rule, answer_key=answer_key)}
    try:
        if "remote" in used:
            from rlcore.rewards.remote import RemoteScorer

            scorers["remote"] = RemoteScorer(reward)
        if "model" in used:
            from rlcore.rewards.model import ModelScorer

            scorers["model"] = ModelScorer(config, device, ctx)
        if "judge" in used:
            from rlcore.rewards.judge import JudgeScorer

            scorers["judge"] = JudgeScorer(config, device, ctx)
    except BaseException:  # a model that fails to load: the scoring processes stop too
        for scorer in scorers.values():
            scorer.close()
        raise
    return scorers


class RewardRouter:
    """The scorers of one reward rank (``build_scorers``) and which rows each scores."""

    def __init__(self, config: Any, scorers: dict[str, Scorer]) -> None:
        self.config = config  # the reward section
        self.scorers = scorers

    @property
    def rules(self) -> RuleScorer:
        return self.scorers["rule"]

    def kind_of(self, source: Any) -> str:
        """A row's reward kind: its data source's in ``reward.sources``, else ``reward.kind``;
        a rule kind resolved to the rule (auto: by the source, as verl's default scorer)."""
        kind = self.config.sources.get(source, self.config.kind) if source else self.config.kind
        return kind if kind in ("remote", "model") else scorer_of(kind, source)

    def rule_of(self, kind: str, source: Any) -> str | None:
        """The rule that gives a row of ``kind`` its verdict: a model's or judge's
        ``reward.model.rule``; None for a service, which gives its own."""
        if kind in MODELLED:
            return scorer_of(self.config.model.rule, source)
        return None if kind == "remote" else kind

    def score(self, rows: Rows) -> Routed:
        """Every row's verdict by its scorer (see the module docstring)."""
        kinds = [self.kind_of(source) for source in rows.sources]
        routed = Routed([None] * len(rows), kinds)
        rules = [self.rule_of(k, s) for k, s in zip(kinds, rows.sources, strict=True)]
        ruled = [i for i, rule in enumerate(rules) if rule is not None]
        if ruled:
            taken = rows.take(ruled, [rules[i] for i in ruled])
            _place(routed.verdicts, ruled, self.rules.score(taken))
            routed.unscored = self.rules.unscored_said()
        self._remote(rows, routed)
        self._modelled(rows, routed)
        return routed

    def _remote(self, rows: Rows, routed: Routed) -> None:
        """The service's verdicts on the rows of kind remote, and ``remote_failures``: 1 on as
        many of them as its failed requests held (a count: which rows does not matter)."""
        remote = [i for i, kind in enumerate(routed.kinds) if kind == "remote"]
        if not remote:
            return
        scorer = self.scorers["remote"]
        _place(routed.verdicts, remote, scorer.score(rows.take(remote)))
        failures = torch.zeros(len(rows))
        failures[remote[: scorer.failed]] = 1.0
        routed.columns["remote_failures"] = failures

    def _modelled(self, rows: Rows, routed: Routed) -> None:
        """The rows of kinds model and judge: the model's (or judge's: validation allows one
        of them) score combined with the rule's verdict, its own kept in ``model_scores``."""
        modelled = [i for i, kind in enumerate(routed.kinds) if kind in MODELLED]
        scorer = self.scorers.get("judge") or self.scorers.get("model")
        if not modelled:
            if getattr(scorer, "collective", False):  # its passes join the other ranks'
                scorer.score(rows.take([]))
            return
        own = scorer.score(rows.take(modelled))
        routed.modelled = modelled
        routed.model_scores = torch.full((len(rows),), float("nan"))  # (nan: rows it skipped)
        routed.model_scores[modelled] = torch.tensor([v.score for v in own], dtype=torch.float32)
        combined = self._combined([routed.verdicts[i] for i in modelled], own)
        _place(routed.verdicts, modelled, combined)
        if "judge" in self.scorers:  # the judge's answers (validation samples) and misses
            judge = self.scorers["judge"]
            said = [""] * len(rows)
            for i, output in zip(modelled, judge.outputs, strict=True):
                said[i] = output
            missed = torch.zeros(len(rows))
            missed[: judge.unparsed] = 1.0  # (a count: which rows does not matter)
            routed.columns["judge_unparsed"] = missed
            routed.columns["judge_outputs"] = said

    def _combined(self, verdicts: list[Verdict], scored: list[Verdict]) -> list[Verdict]:
        """The rule's verdicts with the model's scores as ``reward.model.combine`` says."""
        cfg = self.config.model
        weights = {
            "rule_only_for_accuracy": (1.0, 0.0),
            "sum": (1.0, 1.0),
            "weighted": (cfg.model_weight, cfg.rule_weight),
        }[cfg.combine]
        return [
            dataclasses.replace(v, score=weights[0] * m.score + weights[1] * v.score)
            for v, m in zip(verdicts, scored, strict=True)
        ]

    def close(self) -> None:
        for scorer in self.scorers.values():
            scorer.close()
        self.scorers.clear()


def _place(into: list[Any], indices: list[int], values: list[Any]) -> None:
    for i, value in zip(indices, values, strict=True):
        into[i] = value
