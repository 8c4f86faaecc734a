"""``actor.model.use_fused_kernels`` through the actor and the reference: the old and reference
log-probs, ``sum_pi_squared`` and the update's gradient (PPO, KL loss, entropy bonus) are those
of the plain passes, under torch and under FSDP2 (whose root gathers the tied embedding and LM
head only for its own forward and backward)."""

import pytest
import torch

from rlcore.config import replace_keys
from rlcore.workers.reasoning.lm_actor import LMActor, LMReference
from tests.lm_fixtures import SOLO, tiny_config
from tests.workers.test_lm_actor import gradients, make_batch


@pytest.mark.parametrize("backend", ["torch", "fsdp2"])
def test_fused_passes_give_the_plain_log_probs_and_gradients(tiny_lm, backend, monkeypatch):
    import rlcore.models.forward as forward

    runs = []
    monkeypatch.setattr(
        forward, "fused_head", lambda *a, f=forward.fused_head: runs.append(1) or f(*a)
    )
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "actor.ppo_mini_batch_size=8",
        "algorithm.use_kl_loss=true",
        "algorithm.entropy_bonus=0.01",
        "rollout.temperature=0.8",
        f"actor.training_backend={backend}",
    )
    fused = replace_keys(
        config,
        {"actor.model.use_fused_kernels": True, "actor.entropy_from_logits_chunk_size": 7},
    )
    batch = make_batch(config, dirs)
    plain_actor, fused_actor = LMActor(SOLO, config, dirs.actor), LMActor(SOLO, fused, dirs.actor)
    want = plain_actor.compute_log_probs_and_sum_pi_squared(batch)
    got = fused_actor.compute_log_probs_and_sum_pi_squared(batch)
    for key in ("old_log_probs", "sum_pi_squared"):
        torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-6, msg=key)
    ref = LMReference(SOLO, fused, dirs.actor).compute_log_probs(batch)
    torch.testing.assert_close(ref, LMReference(SOLO, config, dirs.actor).compute_log_probs(batch))
    batch["old_log_probs"] = want["old_log_probs"] + 0.05
    batch["ref_log_probs"] = want["old_log_probs"] - 0.1
    full = gradients(plain_actor, batch.clone(), micro=4)
    got = gradients(fused_actor, batch.clone(), micro=4)
    assert got.keys() == full.keys() and full
    assert len(runs) == 4 + 4 + 2  # old and reference log-probs and update, by micro-batch
    for name, grad in full.items():
        as_full = getattr(grad, "full_tensor", lambda g=grad: g)()
        mine = getattr(got[name], "full_tensor", lambda g=got[name]: g)()
        torch.testing.assert_close(mine, as_full, rtol=1e-5, atol=1e-6, msg=name)


def test_fused_passes_read_the_head_through_lora_adapters(tiny_lm):
    """With LoRA adapters (not on the head) the fused passes give the plain reference
    log-probs (adapters off) and the adapters' gradient."""
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "actor.ppo_mini_batch_size=8",
        "actor.model.lora.rank=4",
        "algorithm.entropy_bonus=0.01",
    )
    fused = replace_keys(config, {"actor.model.use_fused_kernels": True})
    batch = make_batch(config, dirs)
    torch.manual_seed(5)  # the same adapters' initial values in both
    plain_actor = LMActor(SOLO, config, dirs.actor)
    torch.manual_seed(5)
    fused_actor = LMActor(SOLO, fused, dirs.actor)
    torch.testing.assert_close(
        fused_actor.compute_ref_log_probs(batch), plain_actor.compute_ref_log_probs(batch)
    )
    batch["old_log_probs"] = plain_actor.compute_log_probs(batch) + 0.05
    full = gradients(plain_actor, batch.clone(), micro=4)
    got = gradients(fused_actor, batch.clone(), micro=4)
    assert got.keys() == full.keys() and all("lora" in name for name in full)
    for name, grad in full.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-5, atol=1e-6, msg=name)
