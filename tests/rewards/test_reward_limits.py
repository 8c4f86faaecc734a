"""The limits on what a reward may give and cost: every reward a finite number within
reward.score_range (else the run ends naming the reward and the value, whatever its kind), and
a batch's scoring bounded by reward.rules.batch_timeout_s and reward.rules.max_timeout_share however
often the scorer times out."""

import math
import re
import time
from types import SimpleNamespace

import pytest
import torch

from rlcore.config import ConfigError, load_config
from rlcore.rewards import RewardError, ScoringPool, Verdict
from tests.rewards.test_rules import encode, worker

REWARD = """
import time

def huge(response, answer):
    return 1e308 if response == "big" else 1.0

def sleeps(response, answer):
    if response != "warm":
        time.sleep(600)
    return 1.0
"""


@pytest.fixture
def reward_file(tmp_path):
    (tmp_path / "reward.py").write_text(REWARD)
    return tmp_path / "reward.py"


def test_a_custom_reward_of_1e308_ends_the_run_naming_the_function_and_the_value(reward_file):
    """1e308 is finite, but a mean or a variance of it is not: every step would be skipped."""
    w = worker(kind="custom", custom_fn=f"{reward_file}:huge")
    try:
        with pytest.raises(RewardError) as raised:
            w.score(encode(["ok", "big"], ["x", "x"]))
    finally:
        w.close()
    message = str(raised.value)
    assert message == (
        "reward.score_range: response 1 scored 1e+308 by reward.rules.custom_fn "
        f"{reward_file}:huge, "
        "outside [-10000, 10000] or not a finite number (it would make the optimiser skip its "
        "steps); fix the reward, or widen reward.score_range"
    )


class Letters:
    pad_token_id = 0

    def batch_decode(self, rows, skip_special_tokens=True):
        return ["".join(chr(int(t)) for t in row if t) for row in rows]

    def decode(self, row, skip_special_tokens=True):
        return "".join(chr(int(t)) for t in row if t)


def test_a_reward_model_giving_nan_ends_the_run_naming_the_model():
    """The score head's NaN would reach the advantages; it stops here instead."""
    w = worker(
        kind="model",
        model_path="/models/rm",
        combine="rule_only_for_accuracy",
        model_weight=1.0,
        rule_weight=1.0,
    )
    w.tokenizer = Letters()
    # a reward model whose score head gives NaN on the second row
    w.router.scorers["model"] = SimpleNamespace(
        collective=False,
        score=lambda rows: [
            Verdict(s, None, judged=False)
            for s, _ in zip((0.5, math.nan), rows.prompts, strict=True)
        ],
        close=lambda: None,
    )
    batch = encode(["#### 4", "#### 5"], ["4", "4"])
    batch["input_ids"] = torch.cat([torch.full((2, 2), ord("q")), batch["responses"]], dim=1)
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    with pytest.raises(
        RewardError,
        match=r"^reward.score_range: response 1 scored nan by the model at reward.model.path "
        r"/models/rm, outside \[-10000, 10000\] or not a finite number",
    ):
        w.score(batch)


def test_the_score_after_the_overlong_penalty_is_checked_too():
    w = worker(
        score_range=(0.0, 1.0),
        overlong_buffer=SimpleNamespace(enable=True, len=4, penalty_factor=1.0),
    )
    assert w.score(encode(["#### 4"], ["4"]))["scores"].tolist() == [1.0]  # in range
    # 12 tokens at most, buffer 4: the 10-character response is 2 into it (-0.5); wrong: 0.1
    with pytest.raises(
        RewardError, match=r"response 0 scored -0.4 with reward.overlong_buffer's penalty by "
    ):
        w.score(encode(["#### 44444"], ["4"]))


def test_score_range_and_the_batch_budget_are_checked_before_the_start():
    for keys, says in [
        (["reward.score_range=[1, -1]"], "reward.score_range: [1.0, -1.0]; give [low, high]"),
        (["reward.score_range=[0, 1, 2]"], "reward.score_range: [0.0, 1.0, 2.0]; give"),
        (
            ["reward.score_range=[-1, 1]", "reward.rules.correct_score=5"],
            "reward.rules.correct_score: 5 is outside reward.score_range [-1, 1]",
        ),
        (
            ["reward.rules.batch_timeout_s=1"],
            "reward.rules.batch_timeout_s: 1, shorter than one response's",
        ),
    ]:
        with pytest.raises(ConfigError, match=says.replace("[", r"\[").replace("]", r"\]")):
            load_config("reasoning/tiny_arith_ppo", keys)


def storm_pool(reward_file, *keys):
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [
            "reward.kind=custom",
            f"reward.rules.custom_fn={reward_file}:sleeps",
            "reward.rules.timeout_s=0.5",
            "reward.rules.num_processes=2",
            *keys,
        ],
    ).reward
    pool = ScoringPool(config)
    pool.score([("warm", "x")])  # the processes' start is not the point here
    return pool


def test_a_reward_that_always_times_out_costs_the_batch_budget(reward_file):
    """64 responses at 0.5 s each on 2 processes would take 16 s (and more with restarts)."""
    pool = storm_pool(reward_file, "reward.rules.batch_timeout_s=2")
    try:
        start = time.monotonic()
        verdicts = pool.score([("x", "1")] * 64)
        took = time.monotonic() - start
        assert took < 2 + 1.5  # the budget, and stopping the processes still running
        assert all(v.timed_out and v.score == 0.0 for v in verdicts)
        # each response stopped in its process at 0.8 x 0.5 s at the soonest: 2 processes ran
        # at most 5 rounds and 2 more were stopped at the budget; the rest were never sent
        assert pool.unscored >= 64 - 2 * 6
        assert pool.score([("warm", "x")])[0].score == 1.0  # the next batch is scored
    finally:
        pool.close()


def test_a_reward_overrunning_in_python_is_stopped_in_its_process_without_a_restart(
    reward_file,
):
    """A sleep (any Python-level work) is stopped at 0.8 x reward.rules.timeout_s inside the scoring
    process (procpool.SoftDeadline): it scores 0 as timed out, and the process goes on, where
    the pool's kill at the deadline would cost a process start per response."""
    pool = storm_pool(reward_file, "reward.rules.batch_timeout_s=null")
    try:
        pids = [process.pid for process, _ in pool.pool._workers]
        start = time.monotonic()
        verdicts = pool.score([("x", "1")] * 8)
        took = time.monotonic() - start
        assert all(v.timed_out and v.score == 0.0 for v in verdicts)
        assert [process.pid for process, _ in pool.pool._workers] == pids  # none replaced
        assert took < 4 * 0.5 + 1.5  # 4 rounds of at most the deadline
        assert pool.score([("warm", "x")])[0].score == 1.0
    finally:
        pool.close()


def test_a_batch_past_max_timeout_share_stops_at_once_and_ends_the_run(reward_file):
    """With max_timeout_share 0.25 of 16 responses, the 5th timeout ends the run: the 11
    responses after it are not scored first (one process: one response at a time)."""
    w = worker(
        kind="custom",
        custom_fn=f"{reward_file}:sleeps",
        timeout_s=0.3,
        max_timeout_share=0.25,
        batch_timeout_s=60.0,
    )
    w.data = "the test's answers"
    try:
        w.score(encode(["warm"], ["x"]))
        with pytest.raises(RewardError) as raised:
            w.score(encode(["slow"] * 16, ["x"] * 16))
    finally:
        w.close()
    message = str(raised.value)
    assert message.startswith("reward.rules.max_timeout_share: 16 of 16 responses of a batch took ")
    assert (
        "or were not scored (11: past reward.rules.batch_timeout_s=60 s, or once too many"
        in message
    )
    assert "\n" not in message


def test_responses_left_past_the_budget_are_said_in_one_warning_line(reward_file, capsys):
    w = worker(
        kind="custom",
        custom_fn=f"{reward_file}:sleeps",
        timeout_s=0.3,
        max_timeout_share=1.0,
        batch_timeout_s=0.3,
    )
    try:
        w.score(encode(["warm"], ["x"]))
        out = w.score(encode(["slow", "slow", "slow"], ["x"] * 3))
    finally:
        w.close()
    assert out["timed_out"].tolist() == [True] * 3 and out["scores"].tolist() == [0.0] * 3
    said = [line for line in capsys.readouterr().err.splitlines() if "reward:" in line]
    assert len(said) == 1
    # the first stopped in its process (0.24 s) or at the budget, the third never sent
    assert re.search(
        r"3 of 3 responses took over reward.rules.timeout_s=0.3 s or were not scored \([12]: past "
        r"reward.rules.batch_timeout_s=0.3 s, or once too many had timed out\) and score 0",
        said[0],
    )
