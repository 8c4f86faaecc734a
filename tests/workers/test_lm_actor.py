"""The LM actor and critic: log-probs line up with what the sampler drew, micro-batching and
data-parallel ranks do not change a mini-batch's gradient."""

import json
import os
import shutil
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from tensordict import TensorDict

from rlcore.algorithms import AGG_MODES
from rlcore.config import replace_keys
from rlcore.config.errors import ConfigError
from rlcore.data.sequences import left_pad, position_ids, token_budget_split, trim_padding
from rlcore.models.forward import inner_model, response_logits, token_log_probs
from rlcore.scheduler.weight_buckets import buckets
from rlcore.workers.reasoning.lm_actor import LMActor, LMCritic
from rlcore.workers.reasoning.rollout import HFEngine, RolloutWorker
from rlcore.workers.training.trainer import UpdateSizes
from tests.lm_fixtures import SOLO, tiny_config
from tests.rank_pool import rank_pool

CPU = torch.device("cpu")


def prompts_td(ids, mask):
    return TensorDict({"input_ids": ids, "attention_mask": mask}, batch_size=[len(ids)])


def make_batch(config, dirs, n=8, seed=0):
    """Sampled responses to ``n`` prompts of different lengths, with made-up advantages."""
    torch.manual_seed(seed)
    engine = HFEngine(config, dirs.actor, CPU)
    prompts = [engine.tokenizer(f"What is {i} + {3 * i}?")["input_ids"] for i in range(n)]
    ids, mask = left_pad([p[: 4 + i % 5] for i, p in enumerate(prompts)], 0)
    batch = engine.generate(prompts_td(ids, mask), greedy=False)
    # Responses of uneven lengths, as if they had ended at different steps.
    width = batch["responses"].shape[1]
    ends = torch.tensor([width, 3, 5, 2, 7, width, 1, 4])[:n, None]
    batch["response_mask"] = (torch.arange(width) < ends).long()
    batch["loss_mask"] = batch["response_mask"].clone()  # one turn: all trained
    # no stop or padding token inside a response, as the rollout masks them (a row that stopped
    # early carries them where it is now made to go on): one stands in for it
    stop = torch.isin(
        batch["responses"], torch.tensor([*engine.eos_ids, engine.tokenizer.pad_token_id])
    )
    batch["responses"] = batch["responses"].masked_fill(stop & batch["response_mask"].bool(), 7)
    batch["input_ids"][:, -width:] = batch["responses"]
    batch["attention_mask"][:, -width:] = batch["response_mask"]
    batch["position_ids"] = position_ids(batch["attention_mask"])  # as the rollout counts them
    gen = torch.Generator().manual_seed(seed)
    shape = batch["responses"].shape
    batch["advantages"] = torch.randn(shape, generator=gen) * batch["response_mask"]
    batch["returns"] = torch.randn(shape, generator=gen) * batch["response_mask"]
    return batch


def test_recomputed_log_probs_match_the_generators_scores(tiny_lm):
    """Teacher-forced log-probs over the padded batch equal the ones generate() computed token
    by token with its KV cache: prompts, padding and positions line up."""
    config, dirs = tiny_lm
    engine = HFEngine(config, dirs.actor, CPU)
    prompts = [engine.tokenizer(t)["input_ids"] for t in ("What is 1 + 2?", "Sum 3 4", "7")]
    ids, mask = left_pad(prompts, engine.tokenizer.pad_token_id)
    out = engine.model.generate(
        input_ids=ids,
        attention_mask=mask,
        output_scores=True,
        return_dict_in_generate=True,
        generation_config=engine.generation_config(greedy=True),
    )
    batch = engine.generate(prompts_td(ids, mask), greedy=True)
    steps = len(out.scores)
    chosen = out.sequences[:, ids.shape[1] :]
    expected = torch.stack(
        [
            torch.log_softmax(s.float(), -1).gather(-1, chosen[:, t, None])[:, 0]
            for t, s in enumerate(out.scores)
        ],
        dim=1,
    )
    actor = LMActor(SOLO, config, dirs.actor)
    got = actor.compute_log_probs(batch)[:, :steps]
    valid = batch["response_mask"][:, :steps].bool()
    assert torch.allclose(got[valid], expected[valid], atol=1e-4)
    # the optimal token baselines' sum of squared probabilities, from the same forward pass
    both = actor.compute_log_probs_and_sum_pi_squared(batch)
    spread = torch.stack([torch.softmax(s.float(), -1).square().sum(-1) for s in out.scores], 1)
    assert torch.equal(both["old_log_probs"][:, :steps], got)
    assert torch.allclose(both["sum_pi_squared"][:, :steps][valid], spread[valid], atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_the_log_probs_recorded_while_sampling_are_the_actors_old_log_probs(tiny_lm, temperature):
    """What the rollout records per sampled token (at the temperature, over the whole
    vocabulary) equals the actor's teacher-forced recomputation: the pass it replaces."""
    config, dirs = tiny_lm
    config = tiny_config(dirs.actor.parent, dirs.actor.parent, f"rollout.temperature={temperature}")
    actor = LMActor(SOLO, config, dirs.actor)
    engine = HFEngine(config, dirs.actor, CPU, model=actor.model)  # fused: the actor's module
    prompts = [
        engine.tokenizer(f"What is {i} + {7 * i}?")["input_ids"][: 3 + i % 4] for i in range(6)
    ]
    ids, mask = left_pad(prompts, engine.tokenizer.pad_token_id)
    torch.manual_seed(1)
    batch = engine.generate(prompts_td(ids, mask), greedy=False, log_probs=True)
    valid = batch["response_mask"].bool()
    assert valid.sum() > len(prompts)  # more than the stop tokens
    recomputed = actor.compute_log_probs(batch)
    assert torch.allclose(batch["rollout_log_probs"][valid], recomputed[valid], atol=1e-5)
    assert (batch["rollout_log_probs"][~valid] == 0).all()
    # sampling draws the same tokens whether or not the log-probs are recorded
    torch.manual_seed(1)
    again = engine.generate(prompts_td(ids, mask), greedy=False)
    assert torch.equal(again["responses"], batch["responses"])


def gradients(component, batch, micro):
    """The gradient of one optimiser step over the whole ``batch`` in micro-batches of ``micro``."""
    trainer = component.trainer
    trainer.sizes = UpdateSizes(epochs=1, mini_batch_size=len(batch), micro_batch_size=micro)
    component.update(batch)  # one mini-batch, one step: .grad holds its gradient
    return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batch_size_does_not_change_the_gradient(tiny_lm, mode):
    """Micro-batches of 2 rows, or of at most 30 tokens (rows of like lengths, each cut of its
    padding: sizes 1 to 3 here), give the whole mini-batch's gradient, and the forward passes
    give the same log-probs and values."""
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        f"algorithm.loss_agg_func={mode}",
        "algorithm.use_kl_loss=true",
        "algorithm.entropy_bonus=0.01",
    )
    budgeted = replace_keys(
        config, {"actor.ppo_micro_batch_size": None, "actor.max_tokens_per_micro_batch": 30}
    )
    batch = make_batch(config, dirs)
    actor = LMActor(SOLO, config, dirs.actor)
    batch["old_log_probs"] = actor.compute_log_probs(batch) + 0.05  # ratios != 1: clipping acts
    batch["ref_log_probs"] = batch["old_log_probs"] - 0.1
    batch["values"] = LMCritic(SOLO, config, dirs.critic).compute_values(batch) + 0.3
    sizes = [len(p) for p in token_budget_split(batch, 30)]
    assert 1 < len(sizes) < len(batch) and max(sizes) > 1, sizes
    valid = batch["response_mask"].bool()  # a cut micro-batch has no padding columns to fill
    by_budget = LMActor(SOLO, budgeted, dirs.actor).compute_log_probs(batch) + 0.05
    assert torch.allclose(by_budget[valid], batch["old_log_probs"][valid], atol=1e-5)
    values = LMCritic(SOLO, budgeted, dirs.critic).compute_values(batch)
    assert torch.allclose(values + 0.3, batch["values"], atol=1e-5)
    for trainer_cls in (LMActor, LMCritic):
        whole = gradients(trainer_cls(SOLO, config, dirs.actor), batch, micro=None)
        split = gradients(trainer_cls(SOLO, config, dirs.actor), batch, micro=2)
        by_tokens = gradients(trainer_cls(SOLO, budgeted, dirs.actor), batch, micro=None)
        assert whole.keys() == split.keys() == by_tokens.keys() and whole
        for name, grad in whole.items():
            assert torch.allclose(split[name], grad, atol=1e-5, rtol=1e-4), (trainer_cls, name)
            assert torch.allclose(by_tokens[name], grad, atol=1e-5, rtol=1e-4), (trainer_cls, name)


def test_gradient_checkpointing_gives_the_same_gradient(tiny_lm):
    config, dirs = tiny_lm
    batch = make_batch(config, dirs)
    batch["old_log_probs"] = LMActor(SOLO, config, dirs.actor).compute_log_probs(batch) + 0.05
    batch["values"] = LMCritic(SOLO, config, dirs.critic).compute_values(batch) + 0.3
    recompute = tiny_config(
        dirs.actor.parent, dirs.actor.parent, "actor.model.gradient_checkpointing=true"
    )
    for component_cls in (LMActor, LMCritic):
        checkpointed = component_cls(SOLO, recompute, dirs.actor)
        model = checkpointed.model
        assert (
            getattr(model, "is_activation_checkpointing", None) or model.is_gradient_checkpointing
        )
        kept = gradients(component_cls(SOLO, config, dirs.actor), batch, micro=4)
        again = gradients(checkpointed, batch, micro=4)
        assert kept.keys() == again.keys() and kept
        for name, grad in kept.items():
            assert torch.allclose(again[name], grad, atol=1e-6, rtol=1e-5), (component_cls, name)


# -- 2 ranks vs 1 -------------------------------------------------------------------------------


def update_params(component_cls, ctx, config, dirs, batch):
    """The component's whole weights after one update (``weights()``: every rank calls it), and
    the share of the parameters this rank holds."""
    component = component_cls(ctx, config, dirs.actor)
    component.update(batch)
    params = list(component.trainer.model.parameters())
    local = sum(getattr(p, "_local_tensor", p).numel() for p in params)
    held = local / sum(p.numel() for p in params)
    whole = {k: v.detach().clone() for k, v in component.weights().items()}
    # What a weight sync sends: the same tensors gathered a few KiB at a time.
    streamed = {k: v.clone() for b in buckets(component, 4096) for k, v in b.items()}
    assert streamed.keys() == whole.keys()
    assert all(torch.equal(streamed[k], v) for k, v in whole.items())
    return whole, held


def gloo_rank(rank, batch, size=2):
    """Rank ``rank`` of a pool's gloo group (tests/rank_pool.py): its context and its part of
    ``batch``."""
    part = len(batch) // size
    ctx = SimpleNamespace(
        group=dist.group.WORLD, world_size=size, rank=rank, torch_device=torch.device("cpu")
    )
    return ctx, batch[rank * part : (rank + 1) * part]


def rank_main(rank, out, config, dirs, batch):
    """Both components' updates on this rank's half (one task per backend)."""
    ctx, shard = gloo_rank(rank, batch)
    result = {}
    for component_cls in (LMActor, LMCritic):
        weights, held = update_params(component_cls, ctx, config, dirs, shard)
        result[component_cls.__name__] = {"weights": weights, "held": held}
    torch.save(result, os.path.join(out, f"rank{rank}.pt"))


# the update the rank tests compare: one mini-batch of 8, micro-batches of 2, 2 epochs
TWO_EPOCHS = ("actor.ppo_mini_batch_size=8", "actor.ppo_epochs=2", "actor.ppo_micro_batch_size=2")


def backend_config(dirs, backend):
    config = tiny_config(dirs.actor.parent, dirs.actor.parent, *TWO_EPOCHS)
    changes = {"actor.training_backend": backend, "critic.training_backend": backend}
    if backend == "fsdp2-tokens":
        changes = {"actor.training_backend": "fsdp2", "critic.training_backend": "fsdp2"}
        changes |= {"actor.ppo_micro_batch_size": None, "actor.max_tokens_per_micro_batch": 30}
    if backend == "fsdp2-fused":  # the LM head's weight read where the root gathered it
        changes = {"actor.training_backend": "fsdp2", "critic.training_backend": "fsdp2"}
        changes |= {
            "actor.model.use_fused_kernels": True,
            "actor.entropy_from_logits_chunk_size": 5,
        }
    return replace_keys(config, changes)


@pytest.fixture(scope="module")
def two_rank_updates(tiny_lm, tmp_path_factory):
    """``backend -> (config, batch, [rank 0's, rank 1's] results)``: each backend's update on
    the pool's 2 ranks, once, on first use, for both components."""
    _, dirs = tiny_lm
    done = {}

    def run(backend):
        if backend not in done:
            config = backend_config(dirs, backend)
            batch = make_batch(config, dirs)
            batch["old_log_probs"] = LMActor(SOLO, config, dirs.actor).compute_log_probs(batch)
            batch["values"] = LMCritic(SOLO, config, dirs.actor).compute_values(batch) + 0.3
            out = tmp_path_factory.mktemp(backend)
            rank_pool(2).run(rank_main, str(out), config, dirs, batch)
            done[backend] = (config, batch, [torch.load(out / f"rank{r}.pt") for r in (0, 1)])
        return done[backend]

    return run


@pytest.mark.parametrize(
    ("backend", "component_cls"),
    [
        ("torch", LMActor),
        ("torch", LMCritic),
        ("fsdp2", LMActor),
        ("fsdp2", LMCritic),
        ("fsdp2-tokens", LMActor),
        ("fsdp2-tokens", LMCritic),
        ("fsdp2-fused", LMActor),
    ],
    ids=[
        "torch-actor",
        "torch-critic",
        "fsdp2-actor",
        "fsdp2-critic",
        "fsdp2-tokens-actor",
        "fsdp2-tokens-critic",
        "fsdp2-fused-actor",
    ],
)
def test_two_ranks_update_like_one_rank_on_the_global_batch(
    tiny_lm, two_rank_updates, backend, component_cls
):
    """DDP (torch) and FSDP2 on 2 gloo ranks, each holding half the batch, in micro-batches of
    2 over 2 epochs, end where one process does on the whole batch. fsdp2-tokens: micro-batches
    of at most 30 tokens, which the ranks need in different numbers: each takes as many as the
    other (FSDP2 gathers the weights for every pass, all ranks together). fsdp2-fused: with
    actor.model.use_fused_kernels."""
    _, dirs = tiny_lm
    config, batch, results = two_rank_updates(backend)
    saved = [r[component_cls.__name__] for r in results]
    # Uneven valid tokens per rank: a per-rank token mean would weigh them wrongly.
    assert batch["response_mask"][:4].sum() != batch["response_mask"][4:].sum()
    single, _ = update_params(component_cls, SOLO, config, dirs, batch)
    ranks = [r["weights"] for r in saved]
    # DDP ranks hold the whole model; FSDP2 ranks about half of it each.
    for r in saved:
        assert r["held"] == 1.0 if backend == "torch" else 0.4 < r["held"] < 0.6, r["held"]
    if config.actor.max_tokens_per_micro_batch:  # the two halves split into unequal numbers
        counts = [len(token_budget_split(batch[h * 4 : (h + 1) * 4], 30)) for h in (0, 1)]
        assert counts[0] != counts[1], counts
    start = component_cls(SOLO, config, dirs.actor).weights()
    assert any(not torch.equal(v, start[k]) for k, v in single.items())  # it did update
    assert ranks[0].keys() == single.keys()
    for name, value in single.items():
        assert torch.equal(ranks[0][name], ranks[1][name]), f"ranks disagree on {name}"
        # float32 sums in another order (2 ranks, a reduce-scatter): 1e-6 of weights ~0.1
        # (token micro-batches regroup the rows by length on each rank: 2e-6)
        tolerance = 2e-6 if config.actor.max_tokens_per_micro_batch else 1e-6
        assert torch.allclose(ranks[0][name], value, atol=tolerance), f"{name} differs"


def resume_main(rank, out, config, dirs, batch):
    """Update, checkpoint, and go on twice: unbroken and from the checkpoint."""
    ctx, shard = gloo_rank(rank, batch)
    unbroken = LMActor(ctx, config, dirs.actor)
    unbroken.update(shard)
    unbroken.save_checkpoint(os.path.join(out, "checkpoint"))
    resumed = LMActor(ctx, config, dirs.actor)
    resumed.load_checkpoint(os.path.join(out, "checkpoint"))
    unbroken.update(shard)
    resumed.update(shard)
    both = {"unbroken": unbroken.weights(), "resumed": resumed.weights()}
    torch.save(both, os.path.join(out, f"rank{rank}.pt"))


def test_fsdp2_checkpoints_resume_bit_exact_and_load_onto_one_rank(tiny_lm, tmp_path):
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "actor.ppo_mini_batch_size=8",
        "actor.ppo_micro_batch_size=2",
        "actor.optim.lr=0.01",
    )
    config = replace_keys(config, {"actor.training_backend": "fsdp2"})
    batch = make_batch(config, dirs)
    batch["old_log_probs"] = LMActor(SOLO, config, dirs.actor).compute_log_probs(batch)
    rank_pool(2).run(resume_main, str(tmp_path), config, dirs, batch)
    two = torch.load(tmp_path / "rank0.pt")
    for name, value in two["unbroken"].items():
        assert torch.equal(two["resumed"][name], value), f"{name}: the resumed run differs"
    # Each rank wrote its shards of the weights and optimiser state; nobody the whole model.
    written = sorted(p.name for p in (tmp_path / "checkpoint").rglob("*") if p.is_file())
    assert "model.safetensors" not in written and "__1_0.distcp" in written, written
    # The same checkpoint on one rank, FSDP2 or not: the shards are read back whole.
    for backend in ("fsdp2", "torch"):
        one = LMActor(SOLO, replace_keys(config, {"actor.training_backend": backend}), dirs.actor)
        one.load_checkpoint(str(tmp_path / "checkpoint"))
        one.update(batch)
        for name, value in one.weights().items():
            assert torch.allclose(value, two["unbroken"][name], atol=1e-6), (backend, name)


def test_fsdp2_on_one_rank_computes_like_torch_and_casts_with_mixed_precision(tiny_lm):
    """FSDP2 on one rank (a group of this process alone) gives torch's gradient; with
    fsdp.param_dtype bfloat16 the passes run in bf16 (the gradient moves by bf16 rounding, about
    5e-3 relative, measured) while the parameters the optimiser updates stay float32."""
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "actor.ppo_mini_batch_size=8",
        "actor.optim.max_grad_norm=null",
    )
    batch = make_batch(config, dirs)
    batch["old_log_probs"] = LMActor(SOLO, config, dirs.actor).compute_log_probs(batch)

    def gradient(backend, param_dtype=None):
        cfg = replace_keys(
            config, {"actor.training_backend": backend, "actor.fsdp.param_dtype": param_dtype}
        )
        actor = LMActor(SOLO, cfg, dirs.actor)
        actor.update(batch.clone())  # one optimiser step: .grad is the batch's gradient
        params = dict(actor.trainer.model.named_parameters())
        assert {p.dtype for p in params.values()} == {torch.float32}
        return {n: getattr(p.grad, "full_tensor", lambda g=p.grad: g)() for n, p in params.items()}

    def relative(a, b):
        diff = sum(float((a[k] - b[k]).norm()) ** 2 for k in a) ** 0.5
        return diff / sum(float(v.norm()) ** 2 for v in b.values()) ** 0.5

    torch_grad = gradient("torch")
    assert relative(gradient("fsdp2"), torch_grad) < 1e-5
    cast = relative(gradient("fsdp2", "bfloat16"), torch_grad)
    assert 1e-4 < cast < 2e-2, cast


# seq-mean-token-sum-norm divides by a constant length: the budget, not the cut width
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum-norm"])
def test_a_batch_cut_to_its_longest_response_gives_the_same_log_probs_and_update(tiny_lm, mode):
    """The columns after the longest response are padding in every row: cutting them changes
    neither the log-probs, the values nor the update (to float tolerance)."""
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "actor.ppo_mini_batch_size=8",
        "actor.ppo_micro_batch_size=4",
        f"algorithm.loss_agg_func={mode}",
    )
    batch = make_batch(config, dirs)
    width = batch["responses"].shape[1]
    mask = (torch.arange(width) < batch["response_mask"].sum(-1, keepdim=True).clamp(max=5)).long()
    batch["response_mask"], batch["attention_mask"][:, -width:] = mask, mask
    batch["loss_mask"] = batch["response_mask"].clone()  # one turn: all trained
    batch["advantages"] *= mask
    batch["returns"] *= mask
    cut = trim_padding(batch.exclude("advantages", "returns"))  # as generated
    cut["advantages"], cut["returns"] = batch["advantages"][:, :5], batch["returns"][:, :5]
    assert cut["responses"].shape[1] == 5 < width
    assert cut["input_ids"].shape[1] == batch["input_ids"].shape[1] - (width - 5)
    valid = mask[:, :5].bool()
    actor, critic = LMActor(SOLO, config, dirs.actor), LMCritic(SOLO, config, dirs.actor)
    padded_lp, cut_lp = actor.compute_log_probs(batch)[:, :5], actor.compute_log_probs(cut)
    assert torch.allclose(padded_lp[valid], cut_lp[valid], atol=1e-5)
    padded_v, cut_v = critic.compute_values(batch)[:, :5], critic.compute_values(cut)
    assert torch.allclose(padded_v[valid], cut_v[valid], atol=1e-5)
    batch["old_log_probs"] = actor.compute_log_probs(batch)
    cut["old_log_probs"] = batch["old_log_probs"][:, :5]

    def updated(b):
        fresh = LMActor(SOLO, config, dirs.actor)
        fresh.update(b)
        return fresh.weights()

    want, got = updated(batch), updated(cut)
    assert all(torch.allclose(got[k], want[k], atol=1e-6) for k in want)


def test_packed_passes_give_the_padded_log_probs_values_and_gradients(tiny_lm, monkeypatch):
    """use_remove_padding packs each micro-batch's sequences end to end: the log-probs, the
    values and both updates' gradients equal the padded passes' (by rows, in micro-batches of a
    token budget; and in one row, the layout flash attention reads)."""
    import rlcore.models.forward as forward

    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "algorithm.use_kl_loss=true",
        "algorithm.entropy_bonus=0.01",
    )
    packed = replace_keys(
        config,
        {
            "actor.model.use_remove_padding": True,
            "actor.ppo_micro_batch_size": None,
            "actor.max_tokens_per_micro_batch": 40,
        },
    )
    batch = make_batch(config, dirs)
    valid = batch["response_mask"].bool()
    actor = LMActor(SOLO, config, dirs.actor)
    batch["old_log_probs"] = actor.compute_log_probs(batch) + 0.05
    batch["ref_log_probs"] = batch["old_log_probs"] - 0.1
    batch["values"] = LMCritic(SOLO, config, dirs.critic).compute_values(batch) + 0.3
    got = LMActor(SOLO, packed, dirs.actor).compute_log_probs(batch) + 0.05
    assert torch.allclose(got[valid], batch["old_log_probs"][valid], atol=1e-5)
    values = LMCritic(SOLO, packed, dirs.critic).compute_values(batch) + 0.3
    assert torch.allclose(values[valid], batch["values"][valid], atol=1e-5)
    monkeypatch.setattr(forward, "one_row_kernel", lambda model: True)
    width = batch["responses"].shape[1]
    one_row = forward.response_logits(actor.model, batch, width, packed=True)
    padded = forward.response_logits(actor.model, batch, width)
    assert torch.allclose(one_row[valid], padded[valid], atol=1e-5)
    monkeypatch.undo()
    for trainer_cls in (LMActor, LMCritic):
        want = gradients(trainer_cls(SOLO, config, dirs.actor), batch, micro=None)
        have = gradients(trainer_cls(SOLO, packed, dirs.actor), batch, micro=None)
        assert want.keys() == have.keys() and want
        for name, grad in want.items():
            assert torch.allclose(have[name], grad, atol=1e-5, rtol=1e-4), (trainer_cls, name)


def test_a_model_that_mixes_packed_sequences_is_refused(tiny_lm, monkeypatch):
    """The load-time check: with transformers' detection of packed sequences switched off, the
    tiny model attends across them, and the actor refuses the key."""
    import transformers.masking_utils as masking

    config, dirs = tiny_lm
    packed = replace_keys(config, {"actor.model.use_remove_padding": True})
    LMActor(SOLO, packed, dirs.actor)  # keeps them apart
    monkeypatch.setattr(masking, "find_packed_sequence_indices", lambda position_ids: None)
    with pytest.raises(ConfigError, match=r"use_remove_padding: Qwen2ForCausalLM .* does not keep"):
        LMActor(SOLO, packed, dirs.actor)


def grouped_batch(config, dirs, prompts=4, group=3):
    """``prompts`` prompts of different lengths, ``group`` sampled responses to each in
    consecutive rows, the responses of uneven lengths, with made-up advantages."""
    torch.manual_seed(1)
    engine = HFEngine(config, dirs.actor, CPU)
    texts = [engine.tokenizer(f"What is {i} + {5 * i}?")["input_ids"] for i in range(prompts)]
    ids, mask = left_pad([t[: 3 + 2 * i] for i, t in enumerate(texts)], 0)
    batch = engine.generate(
        prompts_td(ids.repeat_interleave(group, 0), mask.repeat_interleave(group, 0)), greedy=False
    )
    width = batch["responses"].shape[1]
    ends = (torch.arange(prompts * group) * 5 % width + 1)[:, None]
    batch["response_mask"] = (torch.arange(width) < ends).long()
    batch["loss_mask"] = batch["response_mask"].clone()  # one turn: all trained
    batch["attention_mask"][:, -width:] = batch["response_mask"]
    gen = torch.Generator().manual_seed(1)
    batch["advantages"] = torch.randn(batch["responses"].shape, generator=gen)
    batch["advantages"] *= batch["response_mask"]
    return batch


def test_shared_group_prompts_give_the_full_rows_log_probs_and_gradients(tiny_lm):
    """share_group_prompts computes each distinct prompt of a micro-batch once and passes its
    responses on top of the prompt's keys and values: the actor's and the reference's log-probs
    and the actor's gradient (PPO, KL loss, entropy bonus; micro-batches of 4 rows, which split
    the groups of 3, or of a token budget) equal those of the full rows."""
    from rlcore.workers.reasoning.lm_actor import LMReference

    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "algorithm.adv_type=grpo",
        "algorithm.group_size=3",
        "actor.ppo_micro_batch_size=4",
        "algorithm.use_kl_loss=true",
        "algorithm.entropy_bonus=0.01",
    )
    shared = replace_keys(config, {"actor.model.share_group_prompts": True})
    budgeted = replace_keys(
        shared, {"actor.ppo_micro_batch_size": None, "actor.max_tokens_per_micro_batch": 60}
    )
    batch = grouped_batch(config, dirs)
    assert len(set(batch["attention_mask"][:, :-8].sum(-1).tolist())) > 1  # prompts differ
    valid = batch["response_mask"].bool()
    want = LMActor(SOLO, config, dirs.actor).compute_log_probs(batch)
    for cfg in (shared, budgeted):
        got = LMActor(SOLO, cfg, dirs.actor).compute_log_probs(batch)
        assert torch.allclose(got[valid], want[valid], atol=1e-5)
    ref = LMReference(SOLO, shared, dirs.actor).compute_log_probs(batch)
    assert torch.allclose(ref[valid], want[valid], atol=1e-5)
    batch["old_log_probs"] = want + 0.05
    batch["ref_log_probs"] = want - 0.1
    full = gradients(LMActor(SOLO, config, dirs.actor), batch, micro=4)
    for cfg in (shared, budgeted):
        got = gradients(LMActor(SOLO, cfg, dirs.actor), batch, micro=cfg.actor.ppo_micro_batch_size)
        assert got.keys() == full.keys() and full
        for name, grad in full.items():
            assert torch.allclose(got[name], grad, atol=1e-5, rtol=1e-4), name


@pytest.mark.parametrize("shuffle", [True, False])
def test_shared_group_prompts_train_as_the_full_rows(tiny_lm, shuffle):
    """A whole update, 2 epochs of 2 mini-batches (shuffled, or consecutive whole groups) in
    micro-batches of 2 rows (some holding two responses to one prompt, some two prompts), ends
    at the full rows' weights."""
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "algorithm.adv_type=grpo",
        "algorithm.group_size=3",
        "actor.ppo_micro_batch_size=2",
        "actor.ppo_mini_batch_size=2",
        "actor.ppo_epochs=2",
        f"actor.shuffle={str(shuffle).lower()}",
    )
    shared = replace_keys(config, {"actor.model.share_group_prompts": True})
    batch = grouped_batch(config, dirs)
    batch["old_log_probs"] = LMActor(SOLO, config, dirs.actor).compute_log_probs(batch)
    weights = {}
    for name, cfg in (("full", config), ("shared", shared)):
        actor = LMActor(SOLO, cfg, dirs.actor)
        actor.update(batch)
        weights[name] = actor.weights()
    assert all(
        torch.allclose(weights["shared"][k], v, atol=1e-6) for k, v in weights["full"].items()
    )
    assert any(
        not torch.equal(v, LMActor(SOLO, config, dirs.actor).weights()[k])
        for k, v in weights["full"].items()
    )


INSTRUCT_SAMPLING = {
    "do_sample": True,
    "top_k": 3,
    "top_p": 0.5,
    "temperature": 0.1,
    "min_p": 0.2,
    "repetition_penalty": 1.3,
    "no_repeat_ngram_size": 1,
}


@pytest.mark.parametrize(
    ("folder_sampling", "overrides", "validation", "limit"),
    [
        (None, [], False, None),  # rollout.top_k 0: the whole vocabulary
        (INSTRUCT_SAMPLING, [], False, None),  # an instruct folder's sampling options: not applied
        (None, ["rollout.top_k=5"], False, 5),
        (None, ["rollout.top_k=5"], True, None),  # validation samples: val_top_k (0), not top_k
        (None, ["rollout.val_top_k=5"], True, 5),
        (None, ["rollout.val_top_k=5"], False, None),
    ],
)
def test_the_rollout_samples_as_its_keys_say_whatever_the_folder_says(
    tiny_lm, tmp_path, folder_sampling, overrides, validation, limit
):
    """rollout.top_k 0 samples from the whole vocabulary (transformers would otherwise apply its
    default top-k 50), sampling options in the model folder's generation_config.json do not
    apply, and validation samples take rollout.val_top_k (verl's val_kwargs) instead of top_k.
    The final norm is scaled down so that the next token is nearly uniform over the 279-token
    vocabulary: without a limit most draws lie beyond the 50 likeliest tokens (each draw's rank
    is read from the teacher-forced logits), with top-k 5 none beyond the 5th."""
    config, dirs = tiny_lm
    folder = tmp_path / "model"
    shutil.copytree(dirs.actor, folder)
    if folder_sampling is not None:
        described = json.loads((folder / "generation_config.json").read_text())
        (folder / "generation_config.json").write_text(json.dumps({**described, **folder_sampling}))
    config = tiny_config(
        dirs.actor.parent, dirs.actor.parent, *overrides, "data.max_response_length=16"
    )
    engine = HFEngine(config, folder, CPU)
    with torch.no_grad():
        inner_model(engine.model).model.norm.weight.mul_(0.05)
    ids, mask = left_pad([engine.tokenizer("What is 1 + 2?")["input_ids"]] * 64, 0)
    torch.manual_seed(0)
    batch = engine.generate(
        prompts_td(ids, mask), greedy=False, validation=validation, log_probs=True
    )
    valid = batch["response_mask"].bool()
    assert valid.sum() > 300
    with torch.no_grad():
        logits = response_logits(engine.model, batch, batch["responses"].shape[1])
    chosen = logits.gather(-1, batch["responses"][..., None])[..., 0]
    above = (logits > chosen[..., None] + 1e-5).sum(-1)[valid]  # tokens likelier than the draw
    if limit:
        assert int(above.max()) < limit
    else:
        assert float((above >= 50).float().mean()) > 0.5, above
    # the log-probs recorded are those of the whole distribution, as the actor computes them
    recomputed = token_log_probs(logits, batch["responses"])
    assert torch.allclose(batch["rollout_log_probs"][valid], recomputed[valid], atol=1e-5)
    assert (
        engine.model.generation_config.to_dict()
        == HFEngine(config, folder, CPU).model.generation_config.to_dict()
    )  # put back after the call


def test_the_rollout_prefills_each_groups_prompt_once_and_samples_the_same(tiny_lm):
    """With share_group_prompts, the hf engine computes each group's prompt once and generates
    from its keys and values repeated for the group: the same greedy responses, the same
    sampled ones from the same seed, the same recorded log-probs. Rows that are not groups of
    one prompt (validation prompts) get a full prefill."""
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent, dirs.actor.parent, "algorithm.adv_type=grpo", "algorithm.group_size=3"
    )
    shared = replace_keys(config, {"actor.model.share_group_prompts": True})
    full_engine, shared_engine = (
        HFEngine(config, dirs.actor, CPU),
        HFEngine(shared, dirs.actor, CPU),
    )
    texts = [full_engine.tokenizer(f"What is {i} + {5 * i}?")["input_ids"] for i in range(4)]
    ids, mask = left_pad([t[: 3 + 2 * i] for i, t in enumerate(texts)], 0)
    prompts = prompts_td(ids.repeat_interleave(3, 0), mask.repeat_interleave(3, 0))
    assert shared_engine._shared_prompts(prompts["input_ids"], prompts["attention_mask"])
    assert shared_engine._shared_prompts(ids, mask) == {}  # 4 distinct prompts: no groups
    for greedy in (True, False):
        torch.manual_seed(3)
        want = full_engine.generate(prompts, greedy=greedy, log_probs=True)
        torch.manual_seed(3)
        got = shared_engine.generate(prompts, greedy=greedy, log_probs=True)
        assert torch.equal(got["responses"], want["responses"]), greedy
        assert torch.allclose(got["rollout_log_probs"], want["rollout_log_probs"], atol=1e-5)


def test_rollout_micro_batches_keep_groups_whole_to_share_their_prompts(tiny_lm, monkeypatch):
    """rollout.micro_batch_size 5 with groups of 3 and share_group_prompts: generate calls of 3
    rows, each prefilling its group's prompt once (5 would split groups, which get a full
    prefill), and the same greedy responses as one call over the batch."""
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "algorithm.adv_type=grpo",
        "algorithm.group_size=3",
        "actor.model.share_group_prompts=true",
        "rollout.micro_batch_size=5",
    )
    worker = RolloutWorker(SOLO, config, dirs.actor)
    engine = worker.engine
    texts = [engine.tokenizer(f"What is {i} + {5 * i}?")["input_ids"] for i in range(4)]
    ids, mask = left_pad([t[: 3 + 2 * i] for i, t in enumerate(texts)], 0)
    prompts = prompts_td(ids.repeat_interleave(3, 0), mask.repeat_interleave(3, 0))
    calls = []
    shared = engine._shared_prompts
    monkeypatch.setattr(
        engine,
        "_shared_prompts",
        lambda i, m, *images: (
            calls.append((len(i), bool(shared(i, m, *images)))) or shared(i, m, *images)
        ),
    )
    got = worker._in_parts(prompts, greedy=True)
    assert calls == [(3, True)] * 4
    whole = HFEngine(config, dirs.actor, CPU).generate(prompts, greedy=True)
    assert torch.equal(got["responses"], whole["responses"])


def test_unshuffled_mini_batches_are_the_batch_in_order(tiny_lm):
    """actor.shuffle false: an update of 2 mini-batches steps on the first half, then the
    second, as two updates of one mini-batch each do."""
    config, dirs = tiny_lm
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "actor.ppo_mini_batch_size=4",
        "actor.ppo_micro_batch_size=2",
        "actor.shuffle=false",
    )
    batch = make_batch(config, dirs)
    batch["old_log_probs"] = LMActor(SOLO, config, dirs.actor).compute_log_probs(batch)
    whole = LMActor(SOLO, config, dirs.actor)
    whole.update(batch)
    halves = LMActor(SOLO, config, dirs.actor)
    for half in (batch[:4], batch[4:]):
        halves.update(half)
    want, got = halves.weights(), whole.weights()
    assert all(torch.allclose(got[k], v, atol=1e-6) for k, v in want.items())
    shuffled = replace_keys(config, {"actor.shuffle": True})
    other = LMActor(SOLO, shuffled, dirs.actor)
    other.update(batch)
    assert any(not torch.allclose(other.weights()[k], v, atol=1e-6) for k, v in want.items())


def test_chunked_and_checkpointed_log_probs_and_entropy_are_torchs_categorical():
    """log_probs_and_entropy in chunks of 4 positions, with its temporaries recomputed in the
    backward pass, or both: the log-probs and entropies of torch's Categorical at the
    temperature, and the same gradients as computing them all at once."""
    from rlcore.models.forward import log_probs_and_entropy

    torch.manual_seed(0)
    logits = torch.randn(3, 7, 50) * 3
    tokens = torch.randint(0, 50, (3, 7))
    weights = torch.randn(2, 3, 7)
    want = torch.distributions.Categorical(logits=logits / 0.7)
    grads = []
    for chunk, checkpoint in ((None, False), (4, False), (None, True), (4, True)):
        leaf = logits.clone().requires_grad_()
        logp, entropy = log_probs_and_entropy(leaf, tokens, 0.7, chunk, checkpoint)
        assert torch.allclose(logp, want.log_prob(tokens), atol=1e-5)
        assert torch.allclose(entropy, want.entropy(), atol=1e-5)
        ((logp * weights[0]).sum() + (entropy * weights[1]).sum()).backward()
        grads.append(leaf.grad)
    assert all(torch.allclose(g, grads[0], atol=1e-7) for g in grads[1:])


def test_the_entropy_memory_options_update_as_without_them(tiny_lm):
    """actor.entropy_from_logits_with_chunking (3 positions a chunk) and
    actor.entropy_checkpointing: the same old log-probs and the same update, to 1e-6."""
    config, dirs = tiny_lm
    batch = make_batch(config, dirs)
    saving = replace_keys(
        config,
        {
            "actor.entropy_from_logits_with_chunking": True,
            "actor.entropy_from_logits_chunk_size": 3,
            "actor.entropy_checkpointing": True,
        },
    )
    plain, chunked = LMActor(SOLO, config, dirs.actor), LMActor(SOLO, saving, dirs.actor)
    old = plain.compute_log_probs(batch)
    assert torch.allclose(chunked.compute_log_probs(batch), old, atol=1e-6)
    batch["old_log_probs"] = old
    want, got = plain.update(batch), chunked.update(batch)
    assert got["actor/entropy"] == pytest.approx(want["actor/entropy"], abs=1e-6)
    assert all(
        torch.allclose(chunked.weights()[k], v, atol=1e-6) for k, v in plain.weights().items()
    )
