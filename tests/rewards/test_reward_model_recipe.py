"""The tiny reward model's recipe (examples/reasoning/train_reward_model.py): the responses it
ranks below every well-formed sum are ones the task's rule finds wrong, and its ranking loss
puts them there. The example is loaded from its file, as a user runs it."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from rlcore.rewards.rules import gsm8k_correct

ROOT = Path(__file__).resolve().parents[2]


def _recipe():
    path = ROOT / "examples" / "reasoning" / "train_reward_model.py"
    spec = importlib.util.spec_from_file_location("train_reward_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_malformed_responses_are_wrong_by_the_rule_and_the_right_answer_is_not():
    recipe = _recipe()
    for answer in (0, 7, 131):
        assert gsm8k_correct(f" #### {answer}", str(answer), "strict")
        for text in recipe.malformed(answer):
            assert not gsm8k_correct(text, str(answer), "strict"), text


def _ce_first(scores: list[float]) -> float:
    """-log softmax(scores)[0], by hand."""
    return -scores[0] + math.log(sum(math.exp(x) for x in scores))


def test_the_ranking_loss_ranks_each_wrong_sum_above_the_malformed_responses():
    recipe = _recipe()
    # right 2, wrong sums 1 and 0, malformed -1 and 0.5 (one scored above a wrong sum)
    row = [2.0, 1.0, 0.0, -1.0, 0.5]
    logits = torch.tensor([row], requires_grad=True)
    loss = recipe.ranking_loss(logits, bad=2)
    tiers = (_ce_first([1.0, -1.0, 0.5]) + _ce_first([0.0, -1.0, 0.5])) / 2
    assert float(loss.detach()) == pytest.approx(_ce_first(row) + tiers, rel=1e-6)
    assert float(recipe.ranking_loss(logits.detach())) == pytest.approx(_ce_first(row), rel=1e-6)
    loss.backward()
    # a descent step raises the wrong sums against the malformed ones, the right one most
    step = -logits.grad[0]
    assert step[0] > 0 and step[1] > step[3] and step[2] > step[4] and step[4] < 0
