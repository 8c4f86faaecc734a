"""The SGLang rollout adapter against a fake engine (sglang has no CPU build): the fake has the
real 0.5.21 ``Engine``'s signatures, read from that release's source; the adapter gives what the
hf engine gives (greedy responses equal, sampled log-probs equal the actor's recomputed ones),
and a run pushes the actor's weights into the engine each sync, flushes its cache, and gives
its memory back while the actor trains, syncing again after taking it back."""

import inspect
import json
import shutil

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.config.errors import ConfigError
from rlcore.data.sequences import left_pad
from rlcore.workers.reasoning.lm_actor import LMActor
from rlcore.workers.reasoning.rollout import HFEngine
from rlcore.workers.reasoning.sglang_engine import SGLANG_VERSION, SGLangEngine
from tests.lm_fixtures import SOLO, tiny_config, unchecked
from tests.workers import fake_sglang
from tests.workers.sglang_api import load

CPU = torch.device("cpu")
KINDS = {
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
    inspect.Parameter.POSITIONAL_ONLY: "positional",
    inspect.Parameter.VAR_POSITIONAL: "var_positional",
    inspect.Parameter.KEYWORD_ONLY: "keyword_only",
    inspect.Parameter.VAR_KEYWORD: "var_keyword",
}


def signature_rows(fn):
    rows = []
    for p in inspect.signature(fn).parameters.values():
        default = None if p.default is inspect.Parameter.empty else repr(p.default)
        rows.append([p.name, KINDS[p.kind], default])
    return rows


def test_the_fake_has_the_real_engines_signatures():
    api = load()
    assert api["version"] == SGLANG_VERSION  # the snapshot is of the pinned release
    ours = [n for n, f in vars(fake_sglang.Engine).items() if callable(f) and not n.startswith("_")]
    for name in [*ours, "__init__"]:
        real = api["engine_methods"][name]
        assert signature_rows(getattr(fake_sglang.Engine, name)) == real, name


def sglang_config(dirs, tmp_path, *overrides):
    """The tiny config, switched to rollout.backend=sglang after the checks that refuse it on a
    machine with no GPU and no sglang (tested below)."""
    config = tiny_config(dirs.actor.parent, tmp_path, *overrides)
    return unchecked(config, {"rollout.backend": "sglang"})


def prompts_td(engine, n=6):
    texts = [f"What is {i} + {2 * i}?" for i in range(n)]
    ids, mask = left_pad(
        [engine.tokenizer(t)["input_ids"][: 3 + i] for i, t in enumerate(texts)],
        engine.tokenizer.pad_token_id,
    )
    return TensorDict({"input_ids": ids, "attention_mask": mask}, batch_size=[n])


def test_server_args_are_real_and_greedy_answers_equal_the_hf_engines(
    tiny_lm, tmp_path, fake_engines
):
    _, dirs = tiny_lm
    config = sglang_config(dirs, tmp_path)
    engine = SGLangEngine(config, dirs.actor, CPU, rank=0, tp_size=1, collocated=False)
    (fake,) = fake_engines  # the fake refuses any keyword 0.5.21's ServerArgs lacks
    assert fake.server_args["tp_size"] == 1 and fake.server_args["skip_tokenizer_init"]
    hf = HFEngine(config, dirs.actor, CPU)
    prompts = prompts_td(hf)
    ours, theirs = engine.generate(prompts, greedy=True), hf.generate(prompts, greedy=True)
    assert set(ours.keys()) == set(theirs.keys())
    for key in ("input_ids", "attention_mask", "position_ids", "responses", "response_mask"):
        assert torch.equal(ours[key], theirs[key]), key


def test_sampled_log_probs_equal_the_actors_recomputed_ones(tiny_lm, tmp_path, fake_engines):
    _, dirs = tiny_lm
    config = sglang_config(dirs, tmp_path, "rollout.temperature=0.7")
    engine = SGLangEngine(config, dirs.actor, CPU, rank=0, tp_size=1, collocated=False)
    batch = engine.generate(prompts_td(engine), greedy=False, log_probs=True)
    mask = batch["response_mask"]
    assert mask.sum() > 6 and (mask.sum(-1) > 0).all()
    actor = LMActor(SOLO, config, dirs.actor)  # teacher-forced, at rollout.temperature
    recomputed = actor.compute_log_probs(batch)
    torch.testing.assert_close(batch["rollout_log_probs"], recomputed * mask, atol=1e-5, rtol=0)


def test_the_agent_loop_gives_on_sglang_what_it_gives_on_hf(tiny_lm, tmp_path, fake_engines):
    """Multi-turn (an interaction replies once, so every trajectory has two model turns unless
    the budget ends it): greedy trajectories, masks and records equal the hf engine's."""
    _, dirs = tiny_lm
    (tmp_path / "again.py").write_text(
        "class Again:\n    def respond(self, messages, answer):\n"
        "        return 'Again.' if len(messages) < 2 else None\n"
    )
    config = sglang_config(
        dirs,
        tmp_path,
        f"rollout.interaction={tmp_path}/again.py:Again",
        "rollout.tool_processes=1",
        "data.max_response_length=24",
        "warmup.stop_at_accuracy=null",
    )
    # the barely trained model never ends a turn: a copy whose end tokens are the ones it says
    # first, so that each turn ends at once and the interaction's reply comes in between
    model = tmp_path / "model"
    shutil.copytree(dirs.actor, model)
    prompts = prompts_td(HFEngine(config, dirs.actor, CPU))
    first = HFEngine(config, dirs.actor, CPU).generate(prompts, greedy=True)["responses"][:, 0]
    settings = json.loads((model / "generation_config.json").read_text())
    settings["eos_token_id"] = sorted({*first.tolist(), settings["eos_token_id"]})
    (model / "generation_config.json").write_text(json.dumps(settings))
    engine = SGLangEngine(config, model, CPU, rank=0, tp_size=1, collocated=False)
    hf = HFEngine(config, model, CPU)
    try:
        prompts["answers"] = NonTensorStack(*["3"] * len(prompts))
        ours, theirs = engine.generate(prompts, greedy=True), hf.generate(prompts, greedy=True)
    finally:
        engine.close()
        hf.close()
    for key in ("input_ids", "attention_mask", "responses", "response_mask", "loss_mask"):
        assert torch.equal(ours[key], theirs[key]), key
    assert ours["trajectories"].tolist() == [
        {**t, "tool_s": 0.0} for t in theirs["trajectories"].tolist()
    ]
    assert (ours["response_mask"] != ours["loss_mask"]).any()  # the replies are context


def test_a_run_pushes_weights_flushes_and_resyncs_after_releasing_memory(
    tiny_lm, tmp_path, fake_engines, monkeypatch
):
    """One process (the rollout fused with the actor, so collocated): each iteration generates,
    gives the engine's memory back while the actor trains (the fake then zeroes its weights),
    takes it back and syncs the weights in buckets, even when their version did not change,
    then flushes the cache."""
    from rlcore.placement import checks, plan_for_config
    from rlcore.runners.supervisor import build_runner

    _, dirs = tiny_lm
    # critic_warmup: iteration 1 leaves the actor's weights as they were, so only the release
    # makes the next sync necessary
    config = sglang_config(
        dirs, tmp_path, "runner.total_iterations=3", "sync.bucket_mb=0.05", "critic.critic_warmup=1"
    )
    # The placement check refuses sglang on CPU slots (tested below); the adapter's loop runs.
    monkeypatch.setattr(checks, "_spans", lambda plan, config: [])
    runner = build_runner(config, plan_for_config(config))
    try:
        (fake,) = fake_engines
        summary = runner.run()
        assert summary["iterations"] == 3
        trained = runner.actor.weights()
        held = fake.model.state_dict()
        assert all(torch.equal(trained[k], held[k]) for k in trained)  # the last sync
    finally:
        runner.close()
    calls = fake.calls
    assert calls.count("release_memory_occupation") == 3  # once per iteration
    # every generation after a release came after taking the memory back and a new push
    for i, call in enumerate(calls):
        if call == "release_memory_occupation":
            after = calls[i + 1 :]
            if "generate" in after:
                nxt = after[: after.index("generate")]
                assert nxt[0] == "resume_memory_occupation"
                assert nxt.count("update_weights_from_tensor") > 1  # several 52 KiB buckets
                assert nxt[-1] == "flush_cache"


def test_the_config_refuses_sglang_where_it_cannot_run(tiny_lm, tmp_path):
    from rlcore.config.checks import check_config
    from rlcore.placement import PlacementError, plan_for_config

    _, dirs = tiny_lm
    config = sglang_config(dirs, tmp_path)
    with pytest.raises(ConfigError, match=rf"sglang=={SGLANG_VERSION} .* is not installed"):
        check_config(config)  # not installed on these machines
    with pytest.raises(PlacementError, match="sglang runs on GPUs only"):
        plan_for_config(config)
    lora = sglang_config(dirs, tmp_path, "actor.model.lora.rank=4")  # passes with hf
    with pytest.raises(ConfigError, match=r"sglang with actor\.model\.lora"):
        check_config(lora)
