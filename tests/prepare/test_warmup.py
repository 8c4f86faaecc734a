"""The tiny model's supervised warm-up: it stops at the first accuracy check that reaches the
target, and the accuracy it checks is greedy decoding scored by the GSM8K rule."""

from types import SimpleNamespace

import pytest
import torch

from rlcore.data.prompts import PromptSet
from rlcore.models.lm import load_causal_lm, load_tokenizer
from rlcore.prepare.warmup import greedy_accuracy, sft_examples, supervised_warmup
from tests.lm_fixtures import tiny_config


class Digits:
    """A tokenizer of single characters (ids are code points, 0 pads, 1 ends)."""

    pad_token_id, eos_token_id = 0, 1

    def batch_decode(self, rows, skip_special_tokens=True):
        return ["".join(chr(int(t)) for t in row if int(t) > 1) for row in rows]


class Answers(torch.nn.Module):
    """Greedily 'answers' each prompt with the text given for it (whatever the prompt)."""

    def __init__(self, replies):
        super().__init__()
        self.replies = replies

    def generate(self, input_ids, attention_mask, max_new_tokens, **_):
        width = max(len(r) for r in self.replies)
        out = torch.zeros(len(input_ids), width, dtype=torch.long)
        for row, reply in enumerate(self.replies):
            out[row, : len(reply)] = torch.tensor([ord(c) for c in reply])
        return torch.cat([input_ids, out], dim=1)


def test_accuracy_is_greedy_decoding_scored_by_the_gsm8k_rule():
    prompts = PromptSet(
        prompts=[[50, 51], [52], [53, 54, 55], [56]], answers=["3", "7", "10", "4"], dropped=0
    )
    replies = ["#### 3", "#### 8", "so #### 10.", "4"]  # right, wrong, right, no '####'
    config = SimpleNamespace(
        data=SimpleNamespace(max_response_length=8),
        reward=SimpleNamespace(rules=SimpleNamespace(gsm8k_mode="strict")),
    )
    model = Answers(replies)
    assert greedy_accuracy(model, Digits(), prompts, config) == 0.5
    config.reward.rules.gsm8k_mode = "flexible"  # the last number anywhere: "4" counts too
    assert greedy_accuracy(model, Digits(), prompts, config) == 0.75
    assert model.training  # put back as it was


@pytest.mark.parametrize(("stop_at", "trained"), [(10, 10), (None, 12)])
def test_the_warm_up_stops_at_the_first_check_that_reaches_the_target(tiny_lm, stop_at, trained):
    _, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "warmup.steps=12",
        "warmup.check_every=5",
        "warmup.stop_at_accuracy=0.5",
    )
    tokenizer = load_tokenizer(dirs.actor)
    rows = [{"question": f"{a} + 1 =", "answer": f"#### {a + 1}"} for a in range(8)]
    examples = sft_examples(rows, tokenizer, " Answer after ####.", chat=False)
    asked = []

    def stop(step):
        asked.append(step)
        return stop_at is not None and step >= stop_at

    model = load_causal_lm(dirs.actor, "float32")
    losses = supervised_warmup(model, tokenizer.pad_token_id, examples, config, seed=0, stop=stop)
    assert len(losses) == trained
    assert asked == [5, 10]  # every 5 steps (none at step 0); the 12th step ends the run
