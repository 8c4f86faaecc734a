"""Scoring has a deadline that holds: a custom reward that sleeps or spins holding the GIL, and
math-verify on a tower of powers, are stopped after reward.rules.timeout_s (their process killed and
replaced) and score 0; a reward that is not a finite number ends the run naming the function."""

import time

import pytest

from rlcore.config import load_config
from rlcore.rewards import RewardError, ScoringPool
from rlcore.rewards.verdicts import Rules, rule_verdict

REWARD = """
import math

def spins(response, answer):
    if response == "slow":
        return float(10 ** (10 ** 10) % 7)  # C code holding the GIL for minutes
    return {"score": float(response == answer), "correct": response == answer}

def nan(response, answer):
    return math.nan if response == "bad" else 0.0

def text(response, answer):
    return "1.0"

def raises(response, answer):
    raise KeyError("answer")

def verdict(response, answer):
    return {"score": 0.5, "correct": response == answer}

def exits(response, answer):
    import sys
    sys.exit(3)

def one_for_correct(response, answer):
    return {"score": 1.0, "correct": 1}

def dies(response, answer):
    import os
    if response == "crash":
        os._exit(7)
    return 0.0
"""


def reward_config(tmp_path, *extra):
    (tmp_path / "reward.py").write_text(REWARD)
    return load_config("reasoning/tiny_arith_ppo", ["reward.kind=custom", *extra]).reward


def pool(tmp_path, function, *extra):
    config = reward_config(
        tmp_path,
        f"reward.rules.custom_fn={tmp_path / 'reward.py'}:{function}",
        "reward.rules.timeout_s=0.5",
        *extra,
    )
    return ScoringPool(config)


def test_a_scorer_spinning_in_c_is_stopped_at_the_deadline_and_the_next_batch_goes_on(tmp_path):
    """It holds the GIL: a thread's timeout could not stop it (a sleeping scorer: test_rules)."""
    scoring = pool(tmp_path, "spins")
    try:
        scoring.score([("warm", "up")])  # the processes' start-up is not the point here
        start = time.monotonic()
        verdicts = scoring.score([("slow", "7"), ("7", "7"), ("slow", "7"), ("8", "7")])
        took = time.monotonic() - start
        assert [(v.score, v.correct, v.timed_out) for v in verdicts] == [
            (0.0, False, True),
            (1.0, True, False),
            (0.0, False, True),
            (0.0, False, False),
        ]
        assert took < 0.5 * 2 + 3  # two rounds of the deadline, plus replacing processes
        again = scoring.score([("7", "7"), ("6", "7")])  # the replacements score
        assert [v.correct for v in again] == [True, False]
    finally:
        scoring.close()
    assert all(not p.is_alive() for p, _ in scoring.pool._workers)


def test_math_verify_on_a_tower_of_powers_times_out_instead_of_hanging(tmp_path):
    config = load_config(
        "reasoning/tiny_arith_ppo", ["reward.kind=math", "reward.rules.timeout_s=0.5"]
    ).reward
    scoring = ScoringPool(config)
    try:
        start = time.monotonic()
        tower, right = scoring.score(
            [("\\boxed{9^{9^{9^{9}}}}", "3"), ("\\boxed{\\frac{1}{2}}", "0.5")]
        )
        assert time.monotonic() - start < 10
        assert tower.score == 0.0 and not tower.correct
        assert right.correct
    finally:
        scoring.close()


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (
            "nan",
            r"reward.rules.custom_fn: .*reward.py:nan on response 1 returned nan; rewards must be "
            r"finite numbers",
        ),
        (
            "text",
            r"reward.rules.custom_fn: .*:text on response 0 returned '1.0'; return a number, or",
        ),
        ("raises", r"reward.rules.custom_fn: .*:raises on response 0 raised KeyError: 'answer'"),
        ("exits", r"reward.rules.custom_fn: .*:exits on response 0 raised SystemExit: 3"),
        (
            "one_for_correct",
            r":one_for_correct on response 0 returned correct=1; the verdict is True or False",
        ),
    ],
)
def test_a_reward_that_is_not_a_finite_number_names_the_function(tmp_path, function, message):
    scoring = pool(tmp_path, function, "reward.rules.num_processes=1")
    try:
        with pytest.raises(RewardError, match=message):
            scoring.score([("ok", "1"), ("bad", "1")])
    finally:
        scoring.close()


def test_a_custom_verdict_is_the_accuracy_not_a_threshold_on_the_score(tmp_path):
    scoring = pool(tmp_path, "verdict", "reward.rules.correct_score=0.1")
    try:
        verdicts = scoring.score([("7", "7"), ("6", "7")])
    finally:
        scoring.close()
    assert [(v.score, v.correct) for v in verdicts] == [(0.5, True), (0.5, False)]
    rules = Rules.of(
        reward_config(tmp_path, f"reward.rules.custom_fn={tmp_path / 'reward.py'}:verdict")
    )
    # verl's name for the verdict
    acc = rule_verdict(rules, lambda r, a: {"score": 1.0, "acc": r == a}, "6", "7")
    assert (acc.correct, acc.judged) == (False, True)
    # a bare number is a reward without a verdict, however high: no accuracy counts it
    bare = rule_verdict(rules, lambda r, a: 5.0, "7", "7")
    assert (bare.score, bare.correct, bare.judged) == (5.0, None, False)


def test_a_scorer_that_dies_is_named_with_its_exit_code_not_counted_as_a_timeout(tmp_path):
    scoring = pool(tmp_path, "dies", "reward.rules.num_processes=1", "reward.rules.timeout_s=30")
    try:
        assert [v.timed_out for v in scoring.score([("ok", "1")])] == [False]
        start = time.monotonic()
        with pytest.raises(RewardError, match=r"died on response 1, exit code 7 .*not a timeout"):
            scoring.score([("ok", "1"), ("crash", "1")])
        assert time.monotonic() - start < 10  # at once, not after reward.rules.timeout_s
        assert [v.score for v in scoring.score([("ok", "1")])] == [0.0]  # replaced: goes on
    finally:
        scoring.close()


def test_numpy_and_torch_scalars_are_numbers_and_numpy_bools_verdicts(tmp_path):
    import numpy as np
    import torch

    rules = Rules.of(
        reward_config(tmp_path, f"reward.rules.custom_fn={tmp_path / 'reward.py'}:verdict")
    )
    numpy = rule_verdict(
        rules, lambda r, a: {"score": np.float32(0.5), "correct": np.bool_(True)}, "", ""
    )
    assert (numpy.score, numpy.correct) == (0.5, True) and type(numpy.correct) is bool
    tensor = rule_verdict(rules, lambda r, a: torch.tensor(2.0), "", "")
    assert (tensor.score, tensor.judged) == (2.0, False)
    assert rule_verdict(rules, lambda r, a: np.array(1.5), "", "").score == 1.5


def test_a_process_killed_at_its_deadline_is_replaced_by_a_warm_spare(tmp_path):
    scoring = pool(tmp_path, "spins", "reward.rules.num_processes=1")
    try:
        scoring.score([("warm", "up")])
        deadline = time.monotonic() + 30
        while not scoring.pool._spare_is_ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        spare = scoring.pool._spare[0].pid
        (slow,) = scoring.score([("slow", "7")])
        assert slow.timed_out
        # the spare took the killed one's place, ready: no process start before the next one
        assert scoring.pool._workers[0][0].pid == spare and scoring.pool._ready == [True]
        assert scoring.pool._spare[0].pid != spare
        (right,) = scoring.score([("7", "7")])
        assert right.correct
    finally:
        scoring.close()
    assert not scoring.pool._spare[0].is_alive()
