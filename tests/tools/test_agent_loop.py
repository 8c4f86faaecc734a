"""The agent loop on a scripted model: what goes into each turn, where tool answers land, the
masks, how trajectories stop; and the masks downstream: tool tokens never reach a loss, a
metric, the KL or the advantages."""

import json
from types import SimpleNamespace

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.algorithms import compute_gae, scores_to_token_rewards
from rlcore.data.sequences import left_pad, position_ids
from rlcore.models.lm import train_tiny_tokenizer
from rlcore.runners.reasoning_metrics import batch_metrics, trajectory_metrics
from rlcore.workers.reasoning.agent_loop import AgentLoop, TurnRenderer
from rlcore.workers.reasoning.lm_actor import LMActor
from tests.lm_fixtures import SOLO, tiny_config


@pytest.fixture(scope="module")
def tokenizer():
    corpus = ["What is 2 * 3? #### 6", '<tool_call>{"name": "calculator"}</tool_call>'] * 50
    return train_tiny_tokenizer(corpus, vocab_size=300, tools=True)


def config(width=64, max_turns=3):
    rollout = SimpleNamespace(
        max_turns=max_turns,
        tool_call_regex=None,
        interaction=None,
        tools=["calculator"],
        tool_processes=1,
        tool_timeout_s=10.0,
    )
    return SimpleNamespace(rollout=rollout, data=SimpleNamespace(max_response_length=width))


def call(expression):
    payload = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
    return f"<tool_call>{payload}</tool_call>"


class Script:
    """A model that says, for each prompt, its next scripted turn (the end token added)."""

    def __init__(self, tokenizer, turns):
        self.tokenizer, self.turns, self.seen = tokenizer, turns, []

    def __call__(self, contexts, budget):
        self.seen.append(contexts)
        out = []
        for context in contexts:
            row = next(i for i, p in enumerate(self.prompts) if context[: len(p)] == p)
            text = self.turns[row].pop(0)
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            out.append([*ids, self.tokenizer.eos_token_id])
        return out, [[-0.5] * len(o) for o in out]

    def batch(self, questions):
        self.prompts = [
            self.tokenizer(f"<|user|>{q}<|assistant|>", add_special_tokens=False)["input_ids"]
            for q in questions
        ]
        ids, mask = left_pad(self.prompts, self.tokenizer.pad_token_id)
        batch = TensorDict({"input_ids": ids, "attention_mask": mask}, batch_size=[len(ids)])
        batch["answers"] = NonTensorStack(*["6"] * len(ids))
        return batch


def test_tool_answers_come_back_as_context_and_only_model_tokens_are_trained(tokenizer):
    script = Script(
        tokenizer,
        [
            [call("2 * 3"), "#### 6"],  # a call, the answer read back
            ["#### 5"],  # answers at once
            ["<tool_call>{broken</tool_call>", "#### 1"],  # a malformed call
            [call("1+1"), call("2+2"), call("3+3")],  # calls until the turn limit
        ],
    )
    loop = AgentLoop(config(width=160, max_turns=3), tokenizer, [tokenizer.eos_token_id])
    try:
        batch = loop.run(script.batch(["a", "b", "c", "d"]), script, log_probs=True)
    finally:
        loop.close()
    eos = tokenizer.eos_token_id
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    # row 0 by hand: the call and its end token, the tool message the tiny template writes,
    # the answer and its end token
    tool = encode("<|user|><tool_response>6</tool_response><|assistant|>")
    expected = [*encode(call("2 * 3")), eos, *tool, *encode("#### 6"), eos]
    trained = [1] * (len(encode(call("2 * 3"))) + 1) + [0] * len(tool)
    trained += [1] * (len(encode("#### 6")) + 1)
    n = len(expected)
    assert batch["responses"][0, :n].tolist() == expected
    assert batch["response_mask"][0].tolist() == [1] * n + [0] * (160 - n)
    assert batch["loss_mask"][0, :n].tolist() == trained
    assert batch["loss_mask"][0, n:].sum() == 0
    # the rollout's log-probs are the model's, 0 on the tool's tokens
    assert torch.equal(batch["rollout_log_probs"][0] != 0, batch["loss_mask"][0].bool())
    # turn 2 of row 0 saw the prompt, its call and the tool's answer
    second = next(c for c in script.seen[1] if c[-len(tool) :] == tool)
    assert second == script.prompts[0] + expected[: n - len(encode("#### 6")) - 1]
    rows = batch["trajectories"].tolist()
    assert [r["stop"] for r in rows] == ["answer", "answer", "answer", "turn_limit"]
    assert [r["turns"] for r in rows] == [2, 1, 2, 3]
    assert rows[0]["calls"][0]["name"] == "calculator" and not rows[0]["calls"][0]["error"]
    assert rows[2]["malformed_calls"] == 1 and "malformed" in rows[2]["messages"][1]["content"]
    assert len(rows[3]["calls"]) == 2  # the third turn's call is not run
    assert torch.equal(batch["position_ids"], position_ids(batch["attention_mask"]))
    metrics = trajectory_metrics(rows)
    assert metrics["num_turns/mean"] == 2.0 and metrics["num_turns/max"] == 3
    assert metrics["tools/calls_per_trajectory/calculator"] == 3 / 4
    assert metrics["tools/malformed_per_trajectory"] == 1 / 4
    assert metrics["tools/hit_turn_limit"] == 1 / 4


def test_an_interaction_replies_as_the_user_until_it_ends(tokenizer, tmp_path):
    (tmp_path / "again.py").write_text(
        "class Again:\n"
        "    def respond(self, messages, answer):\n"
        "        said = messages[-1]['content']\n"
        "        return None if said.endswith(answer) else f'No, not {said[-1]}.'\n"
    )
    script = Script(tokenizer, [["#### 5", "#### 6"], ["#### 6"]])
    settings = config(width=64, max_turns=3)
    settings.rollout.tools, settings.rollout.interaction = [], f"{tmp_path}/again.py:Again"
    loop = AgentLoop(settings, tokenizer, [tokenizer.eos_token_id])
    try:
        batch = loop.run(script.batch(["a", "b"]), script, log_probs=False)
    finally:
        loop.close()
    first, second = batch["trajectories"].tolist()
    assert [m["role"] for m in first["messages"]] == ["assistant", "user", "assistant"]
    assert first["messages"][1]["content"] == "No, not 5."
    assert (first["turns"], first["interactions"], second["turns"]) == (2, 1, 1)
    reply = tokenizer("<|user|>No, not 5.<|assistant|>", add_special_tokens=False)["input_ids"]
    holes = (batch["response_mask"][0] - batch["loss_mask"][0]).sum()
    assert holes == len(reply)  # the user's words are context, not trained


def test_the_response_budget_cuts_a_tool_answer_and_ends_the_trajectory(tokenizer):
    script = Script(tokenizer, [[call("123456789 * 987654321"), "never"]])
    width = len(tokenizer(call("123456789 * 987654321"), add_special_tokens=False)["input_ids"]) + 4
    loop = AgentLoop(config(width=width), tokenizer, [tokenizer.eos_token_id])
    try:
        batch = loop.run(script.batch(["big"]), script, log_probs=False)
    finally:
        loop.close()
    (row,) = batch["trajectories"].tolist()
    assert row["stop"] == "token_limit" and row["turns"] == 1
    assert batch["response_mask"].sum() == width  # the tool's answer fills the rest, cut
    assert batch["loss_mask"].sum() == width - 3  # 3 tool tokens fit after the call's end


def test_a_template_without_a_tool_role_gets_tool_answers_as_a_user_turn(tokenizer):
    plain = train_tiny_tokenizer(["a b c"] * 20, vocab_size=300)  # the template has no tool role
    render = TurnRenderer(plain)
    assert not render.tool_role and TurnRenderer(tokenizer).tool_role
    ids = render.tokens([{"role": "tool", "content": "42"}], plain.eos_token_id)
    assert plain.decode(ids) == "<|user|><tool_response>\n42\n</tool_response><|assistant|>"


def holed_batch(config, dirs, tail):
    """Two sampled rows whose responses end with ``tail`` tokens of a tool's answer."""
    from rlcore.workers.reasoning.rollout import HFEngine

    torch.manual_seed(0)
    engine = HFEngine(config, dirs.actor, torch.device("cpu"))
    prompts = [engine.tokenizer(f"What is {i} + 4?")["input_ids"] for i in range(2)]
    ids, mask = left_pad(prompts, 0)
    batch = engine.generate(
        TensorDict({"input_ids": ids, "attention_mask": mask}, batch_size=[2]), greedy=False
    )
    width = batch["responses"].shape[1]
    full = torch.ones(2, width, dtype=torch.long)
    batch["responses"] = batch["responses"].masked_fill(batch["responses"] == 0, 7)
    batch["input_ids"][:, -width:] = batch["responses"]
    batch["response_mask"] = full
    batch["attention_mask"][:, -width:] = full
    batch["position_ids"] = position_ids(batch["attention_mask"])
    batch["loss_mask"] = full.clone()
    batch["loss_mask"][:, width - tail :] = 0
    gen = torch.Generator().manual_seed(1)
    batch["old_log_probs"] = -torch.rand(2, width, generator=gen)
    batch["advantages"] = torch.randn(2, width, generator=gen) * batch["loss_mask"]
    batch["ref_log_probs"] = -torch.rand(2, width, generator=gen)
    return batch


def test_tool_tokens_never_change_the_gradient(tiny_lm):
    """The same trajectories with other text in the tool's answer (at their ends, so no model
    token reads it) give the same loss, metrics and gradient."""
    _, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "algorithm.use_kl_loss=true",
        "algorithm.entropy_bonus=0.01",
        "actor.ppo_mini_batch_size=2",
        "actor.ppo_micro_batch_size=2",
        "data.train_batch_size=2",
    )
    batch = holed_batch(config, dirs, tail=3)
    other = batch.clone()
    width = batch["responses"].shape[1]
    other["responses"][:, width - 3 :] = torch.tensor([11, 12, 13])
    other["input_ids"][:, -3:] = torch.tensor([11, 12, 13])
    other["old_log_probs"][:, width - 3 :] = -5.0  # whatever sits there is not read
    other["ref_log_probs"][:, width - 3 :] = -9.0
    other["advantages"][:, width - 3 :] = 100.0
    runs = []
    for b in (batch, other):
        actor = LMActor(SOLO, config, dirs.actor)
        metrics = actor.update(b)
        grads = {n: p.grad.clone() for n, p in actor.trainer.model.named_parameters()}
        runs.append((metrics, grads))
    (m1, g1), (m2, g2) = runs
    assert m1 == pytest.approx(m2, rel=1e-6, abs=1e-7)
    for name in g1:
        assert torch.allclose(g1[name], g2[name], atol=1e-7), name
    # the batch's metrics too: the KL to the reference and the values read the model's tokens
    for b in (batch, other):
        b["values"] = torch.zeros(2, width)
        b["returns"] = torch.zeros(2, width)
    scored = TensorDict(
        {
            "scores": torch.ones(2),
            "correct": torch.ones(2, dtype=torch.bool),
            "judged": torch.ones(2, dtype=torch.bool),
            "unparsed": torch.zeros(2, dtype=torch.bool),
            "timed_out": torch.zeros(2, dtype=torch.bool),
        },
        batch_size=[2],
    )
    other["values"][:, width - 3 :] = 50.0
    assert batch_metrics(config, batch, scored) == batch_metrics(config, other, scored)


def test_advantages_run_over_the_model_tokens_in_order():
    """GAE over a response with a tool's answer in the middle equals GAE over the model's
    tokens alone, laid end to end; the score sits on the model's last token."""
    gen = torch.Generator().manual_seed(3)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0, 1, 1, 0]])  # 3 model tokens, a tool's 3, 2, tool 1
    values = torch.randn(1, 9, generator=gen)
    rewards = scores_to_token_rewards(torch.tensor([2.0]), mask)
    assert rewards.tolist() == [[0, 0, 0, 0, 0, 0, 0, 2.0, 0]]
    adv, returns = compute_gae(rewards, mask, values=values, gamma=0.9, lam=0.8)
    keep = mask[0].bool()
    compact, ret = compute_gae(
        rewards[:, keep], torch.ones(1, 5), values=values[:, keep], gamma=0.9, lam=0.8
    )
    assert torch.allclose(adv[:, keep], compact) and torch.allclose(returns[:, keep], ret)


def test_rules_score_the_models_own_text_and_a_custom_reward_the_whole_trajectory(tmp_path):
    """A tool's answer that reads '#### 6' scores nothing for a model that never wrote it; a
    custom function gets the whole text and the trajectory (here it pays for calls)."""
    from tests.rewards.test_rules import encode, worker

    text = "call#### 6 nope"  # the model's 'call', the tool's '#### 6', the model's ' nope'
    batch = encode([text, "#### 6"], ["6", "6"], width=16)
    batch["loss_mask"] = batch["response_mask"].clone()
    batch["loss_mask"][0, 4:10] = 0  # the tool's answer
    calls = [{"name": "calculator"}]
    batch["trajectories"] = NonTensorStack({"calls": calls}, {"calls": []})
    out = worker().score(batch)
    assert out["correct"].tolist() == [False, True]  # row 0's own text is 'call nope'
    assert out["unparsed"].tolist() == [True, False]
    (tmp_path / "r.py").write_text(
        "def score(data_source, solution_str, ground_truth, extra_info):\n"
        "    return len(solution_str) + 100 * len(extra_info['trajectory']['calls'])\n"
    )
    custom = worker(kind="custom", custom_fn=f"{tmp_path}/r.py:score")
    try:
        assert custom.score(batch)["scores"].tolist() == [100.0 + len(text), 6.0]
    finally:
        custom.close()
