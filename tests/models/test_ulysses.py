"""Ulysses sequence parallelism (issue 53): a packed batch of unequal lengths split over 2 and
4 gloo ranks gives the log-probs, entropies and gradients of one rank."""

import os

import pytest
import torch
import torch.distributed as dist
from tensordict import TensorDict

from rlcore.data.sequences import position_ids
from rlcore.models import ulysses
from rlcore.models.forward import response_log_probs
from rlcore.models.fused_head import TokenStats
from tests.rank_pool import rank_pool


def tiny_model(seed=0, lora=False):
    """A tiny Qwen2 model; with ``lora``, under peft's adapters (their B matrices drawn, so
    every adapter weight has a gradient)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    model = Qwen2ForCausalLM(config).eval()
    if not lora:
        return model
    from types import SimpleNamespace

    from rlcore.models.lm import with_lora

    targets = ("q_proj", "k_proj", "v_proj", "o_proj")
    model = with_lora(model, SimpleNamespace(rank=4, alpha=8.0, target_modules=targets))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return model


def packed_batch(seed=0):
    """6 rows: left-padded prompts of 2-7 tokens, responses of 1-5 of 5 columns."""
    gen = torch.Generator().manual_seed(seed)
    prompts, responses = [2, 7, 4, 3, 6, 5], [5, 1, 3, 4, 2, 5]
    width_p, width_r = max(prompts), 5
    ids = torch.randint(1, 64, (6, width_p + width_r), generator=gen)
    mask = torch.zeros(6, width_p + width_r, dtype=torch.long)
    response_mask = torch.zeros(6, width_r, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        mask[i, width_p - p : width_p + r] = 1
        response_mask[i, :r] = 1
    ids = ids * mask
    return TensorDict(
        {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": position_ids(mask),
            "responses": ids[:, width_p:],
            "response_mask": response_mask,
        },
        batch_size=[6],
    )


def weighted_loss(logp, entropy, batch):
    weights = torch.linspace(-1, 1, logp.numel()).reshape(logp.shape)
    mask = batch["response_mask"]
    return (logp * weights * mask).sum() + 0.1 * (entropy * mask).sum()


def reference(lora=False):
    model, batch = tiny_model(lora=lora), packed_batch()
    stats = TokenStats(temperature=0.7, chunk_size=None, entropy=True)
    logp, entropy, _ = response_log_probs(model, batch, stats, packed=True)
    weighted_loss(logp, entropy, batch).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), entropy.detach(), grads


def split_main(rank, out, size, lora=False):
    """This rank's part of the split pass, its gradients summed over the group."""
    group = dist.group.WORLD
    model, batch = tiny_model(lora=lora), packed_batch()
    logp, entropy = ulysses.packed_log_probs(model, batch, group, temperature=0.7)
    weighted_loss(logp, entropy, batch).backward()
    grads = {}
    for name, p in model.named_parameters():  # each rank's gradient is its own tokens' part
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            grads[name] = p.grad
    torch.save((logp.detach(), entropy.detach(), grads), os.path.join(out, f"rank{rank}.pt"))


@pytest.mark.parametrize(("size", "lora"), [(2, False), (4, False), (2, True)])
def test_a_split_pass_computes_what_one_rank_does(tmp_path, size, lora):
    logp, entropy, grads = reference(lora)
    rank_pool(size).run(split_main, str(tmp_path), size, lora)
    for rank in range(size):
        got_logp, got_entropy, got_grads = torch.load(tmp_path / f"rank{rank}.pt")
        valid = packed_batch()["response_mask"].bool()
        assert torch.allclose(got_logp[valid], logp[valid], atol=1e-5), rank
        assert torch.allclose(got_entropy[valid], entropy[valid], atol=1e-5), rank
        assert got_grads.keys() == grads.keys()
        assert not lora or all("lora_" in name for name in grads)  # (the base is frozen)
        for name, grad in grads.items():
            assert torch.allclose(got_grads[name], grad, atol=1e-5), (rank, name)


def test_each_packed_sequence_and_each_run_of_padding_is_attended_apart():
    """Sequences start at a real token of position 0 (two 1-token sequences stay two); the
    padding after them is one span."""
    positions = torch.tensor([[0, 1, 2, 0, 0, 0, 0, 0], [0, 1, 2, 3, 4, 5, 0, 0]])
    valid = torch.tensor([[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    assert ulysses.segments(positions, valid) == [
        [(0, 3), (3, 4), (4, 5), (5, 8)],
        [(0, 6), (6, 8)],
    ]


def sp_update_main(rank, out, config, dirs, batch):
    """Both components' updates on this rank's half of the batch, the two ranks one Ulysses
    group (tests/workers/test_lm_actor.py's rank_main)."""
    from rlcore.workers.reasoning.lm_actor import LMActor, LMCritic
    from tests.workers.test_lm_actor import gloo_rank

    calls, trade = [], ulysses._heads_for_sequence  # (counted: the split really runs)
    ulysses._heads_for_sequence = lambda t, sp: calls.append(sp.size) or trade(t, sp)
    ctx, shard = gloo_rank(rank, batch)
    try:
        result = {c.__name__: updated(c, ctx, config, dirs, shard) for c in (LMActor, LMCritic)}
    finally:
        ulysses._heads_for_sequence = trade
    torch.save((result, calls), os.path.join(out, f"rank{rank}.pt"))


def updated(component_cls, ctx, config, dirs, batch):
    """The component's whole weights after one update on ``batch`` (LoRA's adapters drawn
    from one seed in every process)."""
    torch.manual_seed(0)
    component = component_cls(ctx, config, dirs.actor)
    component.update(batch)
    return {k: v.detach().clone() for k, v in component.weights().items()}


@pytest.mark.parametrize(("backend", "lora"), [("torch", False), ("fsdp2", False), ("torch", True)])
def test_two_ranks_of_one_sequence_group_update_like_one_rank(tiny_lm, tmp_path, backend, lora):
    """actor and critic with ulysses_sequence_parallel_size 2 on 2 gloo ranks (one group: both
    compute on the whole batch, each on half of every packed row), over 2 epochs of micro-batches,
    end where one process does on the whole batch, packed, without the split: under DDP, under
    FSDP2 (each rank holding half the weights), and with LoRA (the adapters train)."""
    from rlcore.config import replace_keys
    from rlcore.workers.reasoning.lm_actor import LMActor, LMCritic
    from tests.lm_fixtures import SOLO
    from tests.workers.test_lm_actor import TWO_EPOCHS, make_batch

    _, dirs = tiny_lm
    from tests.lm_fixtures import tiny_config

    adapters = ["actor.model.lora.rank=4", "actor.model.lora.alpha=8"] if lora else []
    base = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        *TWO_EPOCHS,
        "actor.model.use_remove_padding=true",
        *adapters,
    )
    changes = {f"{c}.ulysses_sequence_parallel_size": 2 for c in ("actor", "critic")}
    changes |= {f"{c}.training_backend": backend for c in ("actor", "critic")}
    split = replace_keys(base, changes)
    batch = make_batch(base, dirs)
    batch["old_log_probs"] = LMActor(SOLO, base, dirs.actor).compute_log_probs(batch)
    batch["values"] = LMCritic(SOLO, base, dirs.actor).compute_values(batch) + 0.3
    rank_pool(2).run(sp_update_main, str(tmp_path), split, dirs, batch)
    results, calls = zip(*(torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)), strict=True)
    assert calls[0] and set(calls[0]) == {2} and len(calls[0]) == len(calls[1])
    for component_cls in (LMActor, LMCritic):
        single = updated(component_cls, SOLO, base, dirs, batch)
        ranks = [r[component_cls.__name__] for r in results]
        torch.manual_seed(0)  # (as `updated` draws the adapters)
        start = component_cls(SOLO, base, dirs.actor).weights()
        assert any(not torch.equal(v, start[k]) for k, v in single.items())  # it did update
        for name, value in single.items():
            assert torch.equal(ranks[0][name], ranks[1][name]), f"ranks disagree on {name}"
            assert torch.allclose(ranks[0][name], value, atol=1e-6), f"{name} differs"


def test_a_split_is_refused_where_it_would_change_what_is_computed(tmp_path):
    """A mixture-of-experts model (its load-balancing loss is not split), unpacked passes."""
    from rlcore.config.errors import ConfigError
    from tests.lm_fixtures import tiny_config

    split = ["actor.ulysses_sequence_parallel_size=2", "actor.model.use_remove_padding=true"]
    with pytest.raises(ConfigError, match=r"not built with actor\.model\.tiny\.num_experts 4"):
        tiny_config(tmp_path, tmp_path, *split, "actor.model.tiny.num_experts=4")
    with pytest.raises(ConfigError, match=r"not built with actor\.model\.use_remove_padding"):
        tiny_config(tmp_path, tmp_path, "actor.ulysses_sequence_parallel_size=2")
