"""The router: each row of a batch to its reward kind's scorer (``reward.sources`` by data
source, else ``reward.kind``), through the one ``Scorer`` protocol; a model's score combined
with the rule's verdict; the scorers' counts as per-row columns."""

import math

import pytest
import torch

from rlcore.rewards.router import RewardRouter
from rlcore.rewards.scorer import Rows, RuleScorer
from rlcore.rewards.verdicts import Verdict
from tests.rewards.test_rules import sectioned


class Recorder:
    """A scorer that records the rows it was given and scores each by ``score_of``."""

    def __init__(self, score_of, correct=None, failed=0, collective=False):
        self.score_of, self.correct, self.failed = score_of, correct, failed
        self.collective, self.seen, self.closed = collective, [], False

    def score(self, rows: Rows) -> list[Verdict]:
        self.seen.append((list(rows.texts), list(rows.prompts), list(rows.answers)))
        judged = self.correct is not None
        return [Verdict(self.score_of(t), self.correct, judged=judged) for t in rows.texts]

    def close(self) -> None:
        self.closed = True


def config(**reward):
    defaults = {
        "kind": "gsm8k",
        "sources": {},
        "gsm8k_mode": "strict",
        "correct_score": 1.0,
        "format_score": 0.0,
        "custom_fn": None,
        "timeout_s": 2.0,
        "num_processes": 1,
        "max_timeout_share": 1.0,
        "batch_timeout_s": None,
        "rule": "auto",
        "combine": "weighted",
        "model_weight": 0.5,
        "rule_weight": 2.0,
    }
    return sectioned(defaults | reward)


def rows(texts, sources, answers=None):
    answers = answers or ["4"] * len(texts)
    prompts = [f"q{i}" for i in range(len(texts))]
    none = [None] * len(texts)
    return Rows(texts, texts, answers, sources, none, lambda: prompts)


def test_each_row_goes_to_the_scorer_of_its_data_source_in_order():
    cfg = config(sources={"svc": "remote", "chat": "model"}, rule="gsm8k")
    remote = Recorder(lambda text: 0.25, correct=True, failed=1)
    model = Recorder(lambda text: float(len(text)))
    router = RewardRouter(cfg, {"rule": RuleScorer(cfg), "remote": remote, "model": model})
    texts = ["#### 4", "svc a", "#### 5", "svc b", "#### 4 yes"]
    routed = router.score(rows(texts, [None, "svc", "other", "svc", "chat"]))
    assert routed.kinds == ["gsm8k", "remote", "gsm8k", "remote", "model"]
    # the service saw its two rows, in order, with their prompts
    assert remote.seen == [(["svc a", "svc b"], ["q1", "q3"], ["4", "4"])]
    assert model.seen == [(["#### 4 yes"], ["q4"], ["4"])]
    v = routed.verdicts
    assert [(v[i].score, v[i].correct) for i in (0, 2)] == [(1.0, True), (0.0, False)]
    assert [(v[i].score, v[i].correct) for i in (1, 3)] == [(0.25, True), (0.25, True)]
    # the model row: 0.5 x its 10 characters + 2.0 x the rule's 1 (right), the rule's verdict
    assert (v[4].score, v[4].correct) == (0.5 * 10 + 2.0 * 1.0, True)
    assert routed.modelled == [4]
    scores = routed.model_scores.tolist()
    assert all(math.isnan(s) for s in scores[:4]) and scores[4] == 10.0
    # one failed request's item, counted on the first of the service's rows
    assert routed.columns["remote_failures"].tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]
    router.close()
    assert remote.closed and model.closed and router.scorers == {}


def test_a_batch_without_rows_for_a_sharded_model_still_joins_its_passes():
    """An FSDP2 reward model's passes are collectives: a rank with none of its rows calls it
    with no rows, so that the other ranks' passes are joined."""
    cfg = config(sources={"chat": "model"})
    model = Recorder(lambda text: 1.0, collective=True)
    router = RewardRouter(cfg, {"rule": RuleScorer(cfg), "model": model})
    routed = router.score(rows(["#### 4"], [None]))
    assert model.seen == [([], [], [])] and routed.model_scores is None


@pytest.mark.parametrize(
    ("combine", "expected"),
    [("rule_only_for_accuracy", 3.0), ("sum", 4.0), ("weighted", 0.5 * 3.0 + 2.0 * 1.0)],
)
def test_a_models_score_combines_with_the_rules_as_reward_model_combine_says(combine, expected):
    cfg = config(kind="model", combine=combine)
    router = RewardRouter(cfg, {"rule": RuleScorer(cfg), "model": Recorder(lambda text: 3.0)})
    routed = router.score(rows(["#### 4"], [None]))
    assert routed.verdicts[0].score == expected and routed.verdicts[0].correct is True
    assert routed.model_scores.tolist() == [3.0]
    assert torch.isfinite(routed.model_scores).all()


def test_a_scorer_that_fails_to_start_stops_those_built_before_it(monkeypatch, tmp_path):
    """A reward model that cannot load ends the worker's start; the rules' scoring processes,
    started before it, are stopped then, not left behind."""
    from types import SimpleNamespace

    from rlcore.config.errors import ConfigError
    from rlcore.rewards import router as router_module

    closed = []

    class Rules(RuleScorer):
        def close(self) -> None:
            closed.append(type(self).__name__)
            super().close()

    monkeypatch.setattr(router_module, "RuleScorer", Rules)
    cfg = SimpleNamespace(
        reward=config(kind="model", model_path=str(tmp_path / "nope")),
        data=SimpleNamespace(answer_key="answer"),
    )
    with pytest.raises(ConfigError, match=r"^reward\.model\.path: "):
        router_module.build_scorers(cfg, torch.device("cpu"))
    assert closed == ["Rules"]
