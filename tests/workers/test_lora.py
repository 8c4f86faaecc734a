"""LoRA (peft) on the actor and critic: only the adapters train, the reference is the base with
them off, a rollout holding the base is synced the adapters alone, and the export merges them."""

import torch

from rlcore.scheduler.weight_buckets import buckets, copy_into
from rlcore.workers.reasoning.lm_actor import LMActor, LMCritic, LMReference
from rlcore.workers.reasoning.rollout import HFEngine
from tests.lm_fixtures import SOLO, tiny_config
from tests.workers.test_lm_actor import CPU, make_batch


def lora_config(tiny_lm, *extra):
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "actor.model.lora.rank=4",
        "actor.model.lora.alpha=8",
        "actor.ppo_mini_batch_size=8",
        "actor.optim.lr=0.01",
        "critic.optim.lr=0.01",
        *extra,
    )
    return config, dirs


def base_names(name):
    """A PeftModel's name for a base weight -> the plain model's."""
    return name.replace("base_model.model.", "").replace(".base_layer", "")


def test_only_the_adapters_train_and_the_base_model_is_the_reference(tiny_lm):
    config, dirs = lora_config(tiny_lm)
    batch = make_batch(config, dirs)
    actor = LMActor(SOLO, config, dirs.actor)
    reference = LMReference(SOLO, config, dirs.actor)  # the plain base model, from disk
    batch["old_log_probs"] = actor.compute_log_probs(batch)
    # the adapters start at 0 (lora_B): the policy is the base
    valid = batch["response_mask"].bool()
    base = reference.compute_log_probs(batch)
    assert torch.allclose(batch["old_log_probs"][valid], base[valid], atol=1e-6)
    before = {k: v.clone() for k, v in actor.model.state_dict().items()}
    trained = [n for n, p in actor.model.named_parameters() if p.requires_grad]
    assert trained and all(".lora_" in n for n in trained)
    optimised = sum(len(g["params"]) for g in actor.trainer.optimizer.param_groups)
    assert optimised == len(trained)
    actor.update(batch)
    after = actor.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(".lora_" in k for k in changed)  # the base did not move
    # the policy moved; with the adapters off it is the base, exactly the reference's pass
    assert not torch.allclose(actor.compute_log_probs(batch)[valid], base[valid], atol=1e-4)
    assert torch.allclose(actor.compute_ref_log_probs(batch)[valid], base[valid], atol=1e-6)
    # what a sync sends: the adapters only
    assert set(actor.weight_tensors()) == {n for n in after if ".lora_" in n}


def test_the_critic_trains_its_adapters_and_value_head_only(tiny_lm):
    config, dirs = lora_config(tiny_lm)
    batch = make_batch(config, dirs)
    critic = LMCritic(SOLO, config, dirs.actor)
    batch["values"] = critic.compute_values(batch)
    before = {k: v.clone() for k, v in critic.model.state_dict().items()}
    critic.update(batch)  # the head starts at 0, so the adapters get a gradient from step 2
    critic.update(batch)
    after = critic.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert any(".lora_" in k for k in changed) and any(
        "score.modules_to_save" in k for k in changed
    )
    assert all(".lora_" in k or "score.modules_to_save" in k for k in changed)


def test_a_rollout_holding_the_base_generates_as_the_actor_after_an_adapter_sync(tiny_lm):
    config, dirs = lora_config(tiny_lm)
    batch = make_batch(config, dirs)
    actor = LMActor(SOLO, config, dirs.actor)
    batch["old_log_probs"] = actor.compute_log_probs(batch)
    actor.update(batch)
    engine = HFEngine(config, dirs.actor, CPU)  # not fused: its own base and adapters
    targets = engine.weights()
    assert set(targets) == set(actor.weight_tensors())  # adapters only, the same names
    sent = 0
    for bucket in buckets(actor, 4096):
        copy_into(targets, bucket)
        sent += sum(t.numel() for t in bucket.values())
    assert sent == sum(p.numel() for n, p in actor.model.named_parameters() if ".lora_" in n)
    assert sent < sum(p.numel() for p in actor.model.parameters()) / 5  # rank 4 of a tiny model
    ids = batch["input_ids"][:2]
    with torch.no_grad():
        mine = actor.model(input_ids=ids).logits
        theirs = engine.model(input_ids=ids).logits
    assert torch.allclose(mine, theirs, atol=1e-6)
