"""Validation with n samples: pass@k against counting every draw, mean@n and pass@k by hand."""

import itertools

import pytest
import torch
from tensordict import TensorDict

from rlcore.runners.validation import pass_at_k, sample_metrics


@pytest.mark.parametrize(("n", "c"), [(1, 0), (1, 1), (4, 0), (4, 1), (5, 2), (6, 5), (6, 6)])
def test_pass_at_k_is_the_share_of_k_draws_holding_a_right_answer(n, c):
    answers = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        draws = list(itertools.combinations(answers, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(d) for d in draws) / len(draws))


def scored(correct, scores, judged=True):
    correct = torch.tensor(correct, dtype=torch.bool).flatten()
    return TensorDict(
        {
            "correct": correct,
            "scores": torch.tensor(scores).flatten(),
            "judged": torch.full_like(correct, judged),
        },
        batch_size=[len(correct)],
    )


def test_sample_metrics_by_hand():
    # prompt 0: 1 of 3 right, prompt 1: none, prompt 2: all three
    rows = scored([[1, 0, 0], [0, 0, 0], [1, 1, 1]], [[1.0, 0, 0], [0, 0, 0], [1, 1, 1]])
    metrics = sample_metrics(rows, 3)
    assert metrics["val/mean@3"] == pytest.approx((1 / 3 + 0 + 1) / 3)
    assert metrics["val/pass@1"] == pytest.approx(metrics["val/mean@3"])
    assert metrics["val/pass@3"] == pytest.approx(2 / 3)
    assert metrics["val/reward_mean@3"] == pytest.approx(4 / 9)


def test_scores_without_verdicts_give_only_their_mean():
    rows = scored([[0, 0], [0, 0]], [[2.0, 4.0], [6.0, 0.0]], judged=False)
    assert sample_metrics(rows, 2) == {"val/reward_mean@2": 3.0}


def test_verls_validation_keys_load_onto_rlcores():
    from rlcore.config import load_config

    config = load_config(
        "reasoning/tiny_arith_ppo",
        [
            "actor_rollout_ref.rollout.val_kwargs.n=4",
            "actor_rollout_ref.rollout.val_kwargs.temperature=0.6",
            "actor_rollout_ref.rollout.val_kwargs.top_p=0.9",
            "actor_rollout_ref.rollout.val_kwargs.top_k=-1",
            "trainer.log_val_generations=3",
        ],
    )
    run, r = config.runner, config.rollout
    assert (run.val_n, r.val_temperature, run.log_val_generations) == (4, 0.6, 3)
    assert (r.val_top_p, r.val_top_k) == (0.9, 0)  # verl's -1 (no limit) is rlcore's 0
    topped = load_config(
        "reasoning/tiny_arith_ppo", ["actor_rollout_ref.rollout.val_kwargs.top_k=20"]
    )
    assert topped.rollout.val_top_k == 20
