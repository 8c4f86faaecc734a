"""The one seam every reward kind is scored through: a ``Scorer`` takes ``Rows`` (a batch's
responses, or some of them, decoded, with the data's columns) and gives one ``Verdict`` per row.

The scorers: ``RuleScorer`` (below: gsm8k's rule, math-verify and a custom function),
``RemoteScorer`` (``remote.py``: an HTTP service), ``ModelScorer`` (``model.py``: a reward
model) and ``JudgeScorer`` (``judge.py``: a generative judge). ``router.py`` sends each row to
its scorer by its data source (``reward.sources``), else by ``reward.kind``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from rlcore.rewards.scoring import ScoringPool
from rlcore.rewards.verdicts import Rules, Verdict, rule_verdict


class Rows:
    """The rows of one batch that a scorer scores, each column a list in the same order.

    ``texts``: each response as decoded (a multi-turn trajectory's whole text, tools' answers
    included); ``own``: the model's own text (the built-in rules read only it); ``answers``,
    ``sources`` and ``extras``: the data's reference answer, data_source and extra_info (None
    where the data has none); ``prompts``: each row's prompt as text, decoded on first use
    (a rule never reads it); ``rules``: the rule each row's verdict comes from (``RuleScorer``);
    ``batch_size``: the rows of the whole batch these were taken from."""

    def __init__(
        self,
        texts: list[str],
        own: list[str],
        answers: list[Any],
        sources: list[Any],
        extras: list[Any],
        prompts: Callable[[], list[str]],
        rules: list[str | None] | None = None,
        batch_size: int | None = None,
    ) -> None:
        self.texts, self.own, self.answers = texts, own, answers
        self.sources, self.extras, self.rules = sources, extras, rules
        self._prompts = prompts
        self.batch_size = len(texts) if batch_size is None else batch_size

    def __len__(self) -> int:
        return len(self.texts)

    @functools.cached_property
    def prompts(self) -> list[str]:
        return self._prompts()

    def take(self, indices: Sequence[int], rules: list[str | None] | None = None) -> Rows:
        """The rows at ``indices``, in that order (``rules``: theirs, one per index)."""

        def pick(column: list[Any]) -> list[Any]:
            return [column[i] for i in indices]

        return Rows(
            pick(self.texts),
            pick(self.own),
            pick(self.answers),
            pick(self.sources),
            pick(self.extras),
            lambda: pick(self.prompts),
            rules,
            self.batch_size,
        )


class Scorer(Protocol):
    """A reward kind: one ``Verdict`` per row, in order. A scorer that gives a score and no
    verdict (a reward model, a judge) returns verdicts with ``judged=False``; the router
    combines them with the rule's (``reward.model.combine``)."""

    def score(self, rows: Rows) -> list[Verdict]: ...

    def close(self) -> None: ...


class RuleScorer:
    """The rules: gsm8k's bounded regex in this process, math-verify and a custom function
    (``reward.rules.custom_fn``) in scoring processes killed past ``reward.rules.timeout_s``
    (``ScoringPool``), one pool per rule, started at its first row (``start``: the rule whose
    pool starts at once, for a run that scores every row with it)."""

    def __init__(self, config: Any, start: str | None = None, answer_key: str = "answer") -> None:
        self.config, self.answer_key = config, answer_key
        self.trl: bool | None = None  # the custom function is TRL's kind (None: not read yet)
        self.gsm8k = Rules.of(config, "gsm8k")
        self.pools: dict[str, ScoringPool] = {}
        if start in ("math", "custom"):
            self.pools[start] = ScoringPool(config, kind=start, answer_key=answer_key)

    def score(self, rows: Rows) -> list[Verdict]:
        """Each row's verdict by its rule (``rows.rules``): gsm8k's here, math's and custom's
        in the pool, with each row's data_source and extra_info, for a function written as
        verl's. A pool stops once over ``reward.rules.max_timeout_share`` of the whole batch timed
        out (the run ends then)."""
        for pool in self.pools.values():
            pool.unscored = 0
        rules = rows.rules  # (the router's: a rule kind, or a model's reward.model.rule)
        # the built-in rules read the model's own text; a custom function the whole trajectory
        read = [
            own if rule in ("gsm8k", "math") else text
            for own, text, rule in zip(rows.own, rows.texts, rules, strict=True)
        ]
        verdicts: list[Any] = [None] * len(rows)
        for i, rule in enumerate(rules):
            if rule == "gsm8k":
                verdicts[i] = rule_verdict(self.gsm8k, None, read[i], rows.answers[i], i)
        allowed = self._max_timeouts(rows.batch_size)
        for rule in sorted(set(rules) - {"gsm8k"}):
            chosen = [i for i, r in enumerate(rules) if r == rule]
            if rule not in self.pools:  # (auto or reward.sources: the first row of that rule)
                self.pools[rule] = ScoringPool(self.config, kind=rule, answer_key=self.answer_key)
            items = [(read[i], rows.answers[i], rows.sources[i], rows.extras[i]) for i in chosen]
            if rule == "custom" and self._prompted():  # (TRL's functions are given prompts)
                items = [(*item, rows.prompts[i]) for item, i in zip(items, chosen, strict=True)]
            late = sum(v is not None and v.timed_out for v in verdicts)
            left = None if allowed is None else max(0, allowed - late)
            for i, verdict in zip(chosen, self.pools[rule].score(items, left), strict=True):
                verdicts[i] = verdict
        return verdicts

    def _prompted(self) -> bool:
        """Whether the custom function is TRL's kind, which reads the prompts (read once)."""
        if self.trl is None:
            from rlcore.rewards.rules import load_custom_fn, trl_signature

            custom = self.config.rules.custom_fn
            loaded = None if custom is None else load_custom_fn(custom, self.answer_key)
            self.trl = loaded is not None and trl_signature(loaded) is not None
        return self.trl

    def _max_timeouts(self, batch_size: int) -> int | None:
        """The timeouts past which a pool stops scoring a batch (``reward.rules.max_timeout_share``
        of it, at least 1); None for a share of 1 (never)."""
        share = self.config.rules.max_timeout_share
        return max(1, int(share * batch_size)) if share < 1 else None

    def unscored_said(self) -> str:
        """The last batch's responses that the pools left unscored, as messages say it ("" for
        none)."""
        unscored = sum(pool.unscored for pool in self.pools.values())
        if not unscored:
            return ""
        budget = self.config.rules.batch_timeout_s
        return (
            f" or were not scored ({unscored}: past reward.rules.batch_timeout_s={budget:g} s, or "
            "once too many had timed out)"
        )

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()
