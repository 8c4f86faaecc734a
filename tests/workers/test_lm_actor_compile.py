"""``actor.use_torch_compile`` / ``critic.use_torch_compile``: each decoder layer compiled in
place (regional compilation) before the model is wrapped, and the passes compute what the plain
model computes. Traced here with dynamo's eager backend (``COMPILE_BACKEND``): the compiled
call path without inductor's C++ build, which takes minutes on these CPUs; inductor's speed is
what a GPU run measures (benchmarks/gpu_check.py)."""

import pytest
import torch

from rlcore.config import load_config, replace_keys
from rlcore.config.errors import ConfigError
from rlcore.models.lm import decoder_layers
from rlcore.workers.reasoning.lm_actor import LMActor, LMCritic, LMReference
from tests.lm_fixtures import SOLO, tiny_config
from tests.workers.test_lm_actor import gradients, make_batch


@pytest.fixture
def eager_backend(monkeypatch):
    import rlcore.models.compiling as compiling

    monkeypatch.setattr(compiling, "COMPILE_BACKEND", "eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compiled(model) -> list[bool]:
    return [layer._compiled_call_impl is not None for layer in decoder_layers(model)]


def test_compiled_layers_give_the_plain_log_probs_values_and_gradients(tiny_lm, eager_backend):
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "actor.ppo_mini_batch_size=8",
        "rollout.temperature=0.8",
    )
    on = replace_keys(config, {"actor.use_torch_compile": True, "critic.use_torch_compile": True})
    batch = make_batch(config, dirs)
    plain, actor = LMActor(SOLO, config, dirs.actor), LMActor(SOLO, on, dirs.actor)
    assert compiled(actor.model) == [True] and compiled(plain.model) == [False]
    want = plain.compute_log_probs(batch)
    torch.testing.assert_close(actor.compute_log_probs(batch), want, rtol=1e-5, atol=1e-6)
    # the reference and the critic compile theirs too (what compiled layers compute: above)
    assert compiled(LMReference(SOLO, on, dirs.actor).model) == [True]
    assert compiled(LMCritic(SOLO, on, dirs.actor).model) == [True]
    batch["old_log_probs"] = want + 0.05
    full, got = gradients(plain, batch.clone(), micro=4), gradients(actor, batch.clone(), micro=4)
    assert got.keys() == full.keys() and full
    for name, grad in full.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-5, atol=1e-6, msg=name)


def test_compiling_megatrons_model_is_refused():
    with pytest.raises(
        ConfigError, match=r"actor\.use_torch_compile: set, but actor\.training_backend is megatron"
    ):
        load_config(
            "reasoning/tiny_arith_ppo",
            ["actor.use_torch_compile=true", "actor.training_backend=megatron"],
        )
