"""A reward function written as TRL's, ``f(completions, **kwargs) -> list[float]``, is called as
TRL calls it (lists of prompts, completions and the data's columns, by keyword; one value per
completion), and one that takes what rlcore cannot give is refused in the dry run, naming the
signatures rlcore calls."""

from pathlib import Path

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.config import ConfigError, load_config
from rlcore.placement import plan_for_config
from rlcore.rewards import load_custom_fn
from rlcore.rewards.router import RewardRouter
from rlcore.rewards.scorer import RuleScorer
from rlcore.rewards.scoring import RewardError
from rlcore.runners.preflight import preflight
from tests.rewards.test_rules import Letters, worker

FUNCTIONS = Path(__file__).with_name("trl_rewards.py")


def fn(name: str) -> str:
    return f"{FUNCTIONS}:{name}"


class Characters(Letters):
    def decode(self, row, skip_special_tokens=True):
        return "".join(chr(int(t)) for t in row if t)


def batch(prompts, responses, answers, sources=None, width=8):
    """Prompts left-padded and responses right-padded, one character a token."""

    def codes(text, pad_left):
        pad = [0] * (width - len(text))
        return pad + [ord(c) for c in text] if pad_left else [ord(c) for c in text] + pad

    prompt_ids = torch.tensor([codes(p, True) for p in prompts])
    response_ids = torch.tensor([codes(r, False) for r in responses])
    ids = torch.cat([prompt_ids, response_ids], 1)
    out = TensorDict(
        {
            "input_ids": ids,
            "attention_mask": (ids != 0).long(),
            "responses": response_ids,
            "response_mask": (response_ids != 0).long(),
        },
        batch_size=[len(prompts)],
    )
    out["answers"] = NonTensorStack(*answers)
    if sources is not None:
        out["sources"] = NonTensorStack(*sources)
    return out


def scored(name, data, answer_key="answer"):
    w = worker(kind="custom", custom_fn=fn(name))
    w.tokenizer = Characters()
    w.router = RewardRouter(
        w.config, {"rule": RuleScorer(w.config, start="custom", answer_key=answer_key)}
    )
    try:
        return w.score(data)
    finally:
        w.close()


def test_a_trl_function_gets_the_completions_and_the_answers_as_lists():
    out = scored("ends_with_answer", batch(["1+3", "2+2"], ["so 4", "so 5"], ["4", "4"]))
    assert out["scores"].tolist() == [1.0, 0.0]
    assert not out["judged"].any()  # a bare number: a reward with no verdict


def test_a_trl_function_gets_each_rows_prompt_as_the_model_saw_it():
    out = scored("prompt_and_completion_lengths", batch(["ab", "abcde"], ["x", "xyz"], ["", ""]))
    assert out["scores"].tolist() == [100.0 * 2 + 1, 100.0 * 5 + 3]


def test_the_answers_come_under_data_answer_key_too_and_data_source_by_name():
    out = scored("by_solution_column", batch(["q", "q"], ["7", "8"], ["7", "7"]), "solution")
    assert out["scores"].tolist() == [2.0, 2.0] and out["correct"].tolist() == [True, False]
    out = scored("every_keyword", batch(["q"], ["7"], ["7"], sources=["openai/gsm8k"]))
    assert out["scores"].tolist() == [float(len("openai/gsm8k"))]


def test_a_trl_function_that_returns_other_than_one_value_per_completion_stops_the_run():
    with pytest.raises(RewardError, match=r"returned \[1.0, 2.0\]; return a list with one number"):
        scored("two_for_one", batch(["q"], ["7"], ["7"]))


@pytest.mark.parametrize(
    "name, answer_key, refusal",
    [
        ("needs_completion_ids", "answer", "takes completion_ids, which rlcore does not give"),
        ("by_solution_column", "answer", "takes solution, which rlcore does not give"),
        ("one_argument", "answer", "takes one_argument(text): rlcore calls f(response, answer)"),
        ("by_solution_column", "solution", None),
        ("ends_with_answer", "answer", None),
    ],
)
def test_the_signature_is_checked_when_the_function_is_loaded(name, answer_key, refusal):
    if refusal is None:
        assert callable(load_custom_fn(fn(name), answer_key))
        return
    with pytest.raises(ConfigError) as error:
        load_custom_fn(fn(name), answer_key)
    message = str(error.value)
    assert refusal in message and "\n" not in message
    assert "TRL's f(completions, **kwargs) (given prompts, completions, answer" in message


def test_the_dry_run_refuses_a_function_rlcore_cannot_call(tmp_path):
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [
            "reward.kind=custom",
            f"reward.rules.custom_fn={fn('needs_completion_ids')}",
            f"runner.output_dir={tmp_path}",
        ],
    )
    with pytest.raises(ConfigError, match="takes completion_ids, which rlcore does not give"):
        preflight(config, plan_for_config(config))
