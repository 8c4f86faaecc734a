"""Rule rewards: numeric GSM8K comparison, math-verify, user functions and the time limit."""

import time
from types import SimpleNamespace

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.config.errors import ConfigError
from rlcore.config.foreign.earlier import REWARD_KEYS
from rlcore.data.answers import scorer_of
from rlcore.rewards import (
    RewardError,
    gsm8k_correct,
    load_custom_fn,
    math_correct,
)
from rlcore.rewards.router import RewardRouter
from rlcore.rewards.scorer import RuleScorer
from rlcore.rewards.worker import RewardWorker


@pytest.mark.parametrize(
    ("response", "answer", "strict", "flexible"),
    [
        ("so 72 in all.\n#### 72", "72", True, True),
        ("#### 72.", "72", True, True),  # the anchors' string compare gets these three wrong
        ("#### 1,000", "1000", True, True),
        ("#### $72", "72", True, True),
        ("#### 71", "72", False, False),
        ("the answer is 72", "72", None, True),  # strict needs the marker
        ("#### 72 or maybe 73", "72", True, False),
        ("#### 0.5", "0.50", True, True),
        ("nothing here", "72", None, None),
    ],
)
def test_gsm8k_compares_numbers_not_strings(response, answer, strict, flexible):
    assert gsm8k_correct(response, answer, "strict") is strict
    assert gsm8k_correct(response, answer, "flexible") is flexible


def test_math_answers_are_compared_as_math():
    assert math_correct("so the answer is $\\boxed{\\frac{1}{2}}$", "0.5") is True
    assert math_correct("$\\boxed{3}$", "\\frac{6}{2}") is True
    assert math_correct("$\\boxed{4}$", "3") is False


def test_a_math_reference_answer_is_read_once_per_process(monkeypatch):
    from rlcore.rewards import rules

    reads = []
    monkeypatch.setattr(rules, "math_reference", lambda a, t: reads.append(a) or [a])
    rules._reference.cache_clear()
    for response in ("$\\boxed{7}$", "$\\boxed{8}$", "$\\boxed{7}$"):
        rules.math_correct(response, "7.25")
    rules._reference.cache_clear()
    assert reads == ["7.25"]


def test_custom_function_from_a_file(tmp_path):
    (tmp_path / "mine.py").write_text("def score(response, answer):\n    return len(response)\n")
    assert load_custom_fn(f"{tmp_path}/mine.py:score")("abc", "x") == 3
    with pytest.raises(ConfigError, match=r"reward.rules.custom_fn: .* defines no function 'nope'"):
        load_custom_fn(f"{tmp_path}/mine.py:nope")
    with pytest.raises(ConfigError, match=r"reward.rules.custom_fn: .*missing.py does not exist"):
        load_custom_fn(f"{tmp_path}/missing.py:score")
    with pytest.raises(ConfigError, match=r"is not 'path/to/file.py:function'"):
        load_custom_fn("just_a_name")


class Letters:
    """Decodes token i to chr(i); the pad (0) disappears."""

    pad_token_id = 0

    def batch_decode(self, rows, skip_special_tokens=True):
        return ["".join(chr(int(t)) for t in row if t) for row in rows]


def sectioned(flat: dict) -> SimpleNamespace:
    """A reward section written with the earlier flat keys (``REWARD_KEYS``), in its
    subsections."""
    sections: dict = {}
    for key, value in flat.items():
        section, _, leaf = REWARD_KEYS.get(key, f".{key}").rpartition(".")
        sections.setdefault(section, {})[leaf] = value
    top = sections.pop("", {})
    return SimpleNamespace(
        **top, **{name: SimpleNamespace(**keys) for name, keys in sections.items()}
    )


def worker(components=(), **reward) -> RewardWorker:
    w = RewardWorker.__new__(RewardWorker)
    w.component_keys = list(components)  # algorithm.gdpo_reward_keys
    defaults = {
        "kind": "gsm8k",
        "gsm8k_mode": "strict",
        "correct_score": 1.0,
        "format_score": 0.1,
        "custom_fn": None,
        "timeout_s": 2.0,
        "num_processes": 1,
        "max_timeout_share": 1.0,
        "batch_timeout_s": None,
        "score_range": (-1e4, 1e4),
        "overlong_buffer": SimpleNamespace(enable=False),
        "sources": {},
        "rule": "auto",
    }
    w.config = sectioned(defaults | reward)
    w.max_response_length = 12
    w.tokenizer = Letters()
    # (kinds remote and model: test_remote.py, test_model.py)
    w.router = RewardRouter(w.config, {"rule": RuleScorer(w.config, start=w.config.kind)})
    return w


def encode(texts, answers, width=12, sources=None):
    rows = [[ord(c) for c in t] + [0] * (width - len(t)) for t in texts]
    responses = torch.tensor(rows)
    batch = TensorDict(
        {"responses": responses, "response_mask": (responses != 0).long()}, batch_size=[len(texts)]
    )
    batch["answers"] = NonTensorStack(*answers)
    if sources is not None:
        batch["sources"] = NonTensorStack(*sources)
    return batch


def test_reward_worker_scores_right_wrong_and_unparsed_responses():
    out = worker().score(encode(["#### 4", "#### 5", "four"], ["4", "4", "4"]))
    assert out["scores"].tolist() == pytest.approx([1.0, 0.1, 0.0])
    assert out["correct"].tolist() == [True, False, False]
    assert out["unparsed"].tolist() == [False, False, True]
    assert not out["timed_out"].any()


def test_auto_scores_each_row_by_its_data_source_as_verl_does():
    """verl's default scorer: openai/gsm8k by its '####' rule (a boxed answer is no answer
    there), the MATH sources by math-verify, and a row without a source (rlcore's own files)
    by gsm8k's."""
    w = worker(kind="auto", format_score=0.0)
    try:
        out = w.score(
            encode(
                ["\\boxed{4}", "\\boxed{4}", "#### 4"],
                ["4", "4", "4"],
                sources=["openai/gsm8k", "lighteval/MATH", None],
            )
        )
        assert out["correct"].tolist() == [False, True, True]
        assert out["unparsed"].tolist() == [True, False, False]
        pools = w.router.rules.pools
        assert list(pools) == ["math"] and pools["math"].rules.kind == "math"  # for MATH
    finally:
        w.close()


@pytest.mark.parametrize(
    ("source", "kind"),
    [("openai/gsm8k", "gsm8k"), ("HuggingFaceH4/MATH-500", "math"), (None, "gsm8k")],
)
def test_a_data_source_picks_the_scorer_only_under_auto(source, kind):
    assert scorer_of("auto", source) == kind
    assert scorer_of("math", "openai/gsm8k") == "math"  # a kind given is every row's
    with pytest.raises(ValueError, match=r"data_source 'codeforces' has no scorer here"):
        scorer_of("auto", "codeforces")


def test_a_scorer_that_hangs_scores_zero_after_the_timeout_and_says_so(tmp_path, capsys):
    (tmp_path / "slow.py").write_text(
        "import time\n"
        "def score(r, a):\n    if r == 'slow':\n        time.sleep(1000)\n    return 1.0\n"
    )
    w = worker(kind="custom", custom_fn=f"{tmp_path}/slow.py:score", timeout_s=0.3)
    try:
        w.score(encode(["fast"], ["x"]))  # the scoring process is up
        start = time.perf_counter()
        out = w.score(encode(["slow", "fast"], ["x", "x"]))
        # it returns instead of waiting for the hung scorer (1000 s); a loaded machine took 2.05 s
        assert time.perf_counter() - start < 30.0
    finally:
        w.close()
    assert out["scores"].tolist() == [0.0, 1.0]
    assert out["timed_out"].tolist() == [True, False]
    assert out["unparsed"].tolist() == [False, False]
    said = capsys.readouterr().err
    assert "1 of 2 responses took over reward.rules.timeout_s=0.3 s and score 0; response 0" in said


def test_gdpo_components_come_from_the_verdicts_and_the_overlong_buffer():
    w = worker(components=["correct", "format", "score"])
    out = w.score(encode(["#### 4", "#### 5", "four"], ["4", "4", "4"]))
    # right / wrong but in form / no answer: (correct, format, score) by hand
    want = [[1.0, 1.0, 1.0], [0.0, 1.0, 0.1], [0.0, 0.0, 0.0]]
    assert torch.allclose(out["reward_components"], torch.tensor(want))
    shaped = worker(
        components=["overlong_penalty", "correct"],
        overlong_buffer=SimpleNamespace(enable=True, len=4, penalty_factor=1.0),
    )
    # 12 tokens at most, buffer 4: the 10-character response is 2 into it
    out = shaped.score(encode(["#### 4", "#### 44444"], ["4", "4"]))
    assert out["reward_components"].tolist() == [[0.0, 1.0], [-0.5, 0.0]]


def test_a_gdpo_component_the_custom_reward_does_not_return_names_the_key(tmp_path):
    (tmp_path / "parts.py").write_text(
        "def score(r, a):\n"
        "    return {'score': 1.0, 'correct': r == a, 'format_reward': 0.5, 'pred': r}\n"
    )
    spec = f"{tmp_path}/parts.py:score"
    w = worker(components=["format_reward", "correct"], kind="custom", custom_fn=spec)
    try:
        out = w.score(encode(["x", "y"], ["x", "x"]))
        assert out["reward_components"].tolist() == [[0.5, 1.0], [0.5, 0.0]]
        w.component_keys = ["length"]
        with pytest.raises(
            RewardError,
            match=r"algorithm.gdpo_reward_keys: 'length' is not "
            r"among the numbers the reward gave response 0 \(score, correct, "
            r"format_reward\); return it from reward.rules.custom_fn",
        ):
            w.score(encode(["x"], ["x"]))
    finally:
        w.close()
