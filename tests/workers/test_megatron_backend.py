"""training_backend: megatron for the reasoning actor and critic (megatron-core 0.16.1 on the
CPU through the test-only shim in tests/megatron_shim.py; on a run the placement refuses CPU
slots): the same log-probs, values and updates as the torch backend, on one rank, on 2
tensor-parallel ranks, on 2 data-parallel ranks and on 2 pipeline stages (the tiny model with 2
layers, tied embeddings)."""

import os
import warnings

import pytest
import torch
import torch.distributed as dist

from rlcore.config import replace_keys
from rlcore.scheduler.weight_buckets import buckets
from rlcore.workers.reasoning.lm_actor import LMActor, LMCritic
from tests.lm_fixtures import SOLO, tiny_config, unchecked
from tests.megatron_shim import megatron_on_cpu
from tests.rank_pool import rank_pool
from tests.workers.test_lm_actor import gloo_rank, make_batch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def on_megatron(config, tp=1, pp=1):
    changes = {}
    for section in ("actor", "critic"):
        changes[f"{section}.training_backend"] = "megatron"
        changes[f"{section}.megatron.tensor_parallel_size"] = tp
        changes[f"{section}.megatron.pipeline_parallel_size"] = pp
    return replace_keys(config, changes)


# The layouts of 2 ranks: (tensor parallel, pipeline parallel) sizes; the rest is data parallel.
LAYOUTS = {"tensor-parallel-2": (2, 1), "data-parallel-2": (1, 1), "pipeline-parallel-2": (1, 2)}
# (the layout that wrote a checkpoint, the one that resumes it)
MOVES = [("pipeline-parallel-2", "tensor-parallel-2"), ("tensor-parallel-2", "data-parallel-2")]


@pytest.fixture(scope="module")
def two_layer_lm(tmp_path_factory):
    """``(config, model_dirs)``: the tiny model with 2 layers (2 pipeline stages of one)."""
    from rlcore.prepare import prepare_models

    root = tmp_path_factory.mktemp("two_layer_lm")
    config = tiny_config(root / "cache", root / "outputs", "actor.model.tiny.num_layers=2")
    return config, prepare_models(config)


@pytest.fixture
def megatron_solo():
    """Megatron's model-parallel state on a process group of this process alone, torn down
    after the test (it is global to the process)."""
    from megatron.core import parallel_state

    with megatron_on_cpu():
        yield
    parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


# Weights after an update, Megatron's against the torch backend's: AdamW divides each gradient
# by its own running scale, so where one is near 0, sums taken in another order (Megatron's
# fused layers, the ranks' reductions) move its step by a sliver of the lr (1e-3 here): 1.05e-5
# was seen on one element of 2048, on one rank and at data-parallel size 2.
UPDATED_ATOL = 2e-5


def training_config(dirs):
    config = tiny_config(
        dirs.actor.parent,
        dirs.actor.parent,
        "actor.model.tiny.num_layers=2",
        "actor.ppo_mini_batch_size=8",
        "actor.ppo_epochs=2",
        "actor.ppo_micro_batch_size=2",
        "actor.optim.lr=1e-3",
        "critic.optim.lr=1e-3",
    )
    return config


def scored_batch(config, dirs):
    batch = make_batch(config, dirs)
    batch["old_log_probs"] = LMActor(SOLO, config, dirs.actor).compute_log_probs(batch) + 0.05
    batch["values"] = LMCritic(SOLO, config, dirs.actor).compute_values(batch) + 0.3
    return batch


def updated(component_cls, ctx, config, dirs, batch):
    """The whole weights (transformers names) after one update; what a sync streams equals
    them."""
    component = component_cls(ctx, config, dirs.actor)
    component.update(batch)
    whole = {k: v.detach().clone() for k, v in component.weights().items()}
    streamed = {k: v.clone() for b in buckets(component, 4096) for k, v in b.items()}
    assert streamed.keys() == whole.keys()
    assert all(torch.equal(streamed[k], v) for k, v in whole.items())
    return whole


def test_one_rank_computes_and_updates_as_the_torch_backend(two_layer_lm, megatron_solo):
    """The converted model's log-probs and values equal the transformers model's, and one update
    (2 epochs of micro-batches, gradient clipping, AdamW) ends at the same weights."""
    config, dirs = two_layer_lm
    config = training_config(dirs)
    batch = scored_batch(config, dirs)
    mega = on_megatron(config)
    valid = batch["response_mask"].bool()
    want = LMActor(SOLO, config, dirs.actor).compute_log_probs(batch)
    got = LMActor(SOLO, mega, dirs.actor).compute_log_probs(batch)
    assert torch.allclose(got[valid], want[valid], atol=1e-5)
    want = LMCritic(SOLO, config, dirs.actor).compute_values(batch)
    got = LMCritic(SOLO, mega, dirs.actor).compute_values(batch)
    assert torch.allclose(got[valid], want[valid], atol=1e-5)
    for component_cls in (LMActor, LMCritic):
        start = component_cls(SOLO, config, dirs.actor).weights()
        want = updated(component_cls, SOLO, config, dirs, batch)
        got = updated(component_cls, SOLO, mega, dirs, batch)
        assert got.keys() == want.keys()
        assert any(not torch.equal(v, start[k]) for k, v in want.items())  # it did update
        for name, value in want.items():
            assert torch.allclose(got[name], value, atol=UPDATED_ATOL), (component_cls, name)


def test_a_checkpoint_resumes_under_its_own_backend_only(two_layer_lm, megatron_solo, tmp_path):
    """The weights are in the transformers layout either way, but the optimiser state is
    Megatron's shards under megatron and whole elsewhere: resuming across is refused, naming
    the backend to resume with."""
    config, dirs = two_layer_lm
    config = training_config(dirs)
    batch = scored_batch(config, dirs)
    for writer, reader, backend in (
        (on_megatron(config), config, "megatron"),
        (config, on_megatron(config), "other than megatron"),
    ):
        actor = LMActor(SOLO, writer, dirs.actor)
        actor.update(batch)
        actor.save_checkpoint(str(tmp_path / backend))
        with pytest.raises(ValueError, match=f"written by .*{backend}"):
            LMActor(SOLO, reader, dirs.actor).load_checkpoint(str(tmp_path / backend))


def computed(ctx, config, dirs, shard):
    """On this rank's ``shard``: values, both components' weights after an update, the actor's
    log-probs before and after its update (after: through the last stage's copy of a tied
    embedding), and the tied embedding as this rank holds it."""
    result = {"values": LMCritic(ctx, config, dirs.actor).compute_values(shard)}
    for component_cls in (LMActor, LMCritic):
        result[component_cls.__name__] = updated(component_cls, ctx, config, dirs, shard)
    actor = LMActor(ctx, config, dirs.actor)
    result["log_probs"] = actor.compute_log_probs(shard)
    actor.update(shard)
    result["log_probs_after"] = actor.compute_log_probs(shard)
    result["tied"] = actor.model.gpt.shared_embedding_or_output_weight().detach().clone()
    return result


def check_computed(config, dirs, batch, ranks, label):
    """``ranks``' ``computed`` (each on its share of ``batch``, in order) against the torch
    backend's on the whole batch in one process."""
    valid = batch["response_mask"].bool()
    actor = LMActor(SOLO, config, dirs.actor)
    want = {
        "log_probs": actor.compute_log_probs(batch),
        "values": LMCritic(SOLO, config, dirs.actor).compute_values(batch),
    }
    actor.update(batch)
    want["log_probs_after"] = actor.compute_log_probs(batch)
    for key, value in want.items():
        got = torch.cat([rank[key] for rank in ranks])
        assert torch.allclose(got[valid], value[valid], atol=1e-5), (label, key)
    for component_cls in (LMActor, LMCritic):
        want = updated(component_cls, SOLO, config, dirs, batch)
        for rank in ranks:
            got = rank[component_cls.__name__]
            assert got.keys() == want.keys()
            for name, value in want.items():
                assert torch.allclose(got[name], value, atol=UPDATED_ATOL), (
                    label,
                    component_cls,
                    name,
                )


def rank_main(rank, out, config, dirs, batch, ids):
    """One task for every 2-rank check: the converted models at tensor-parallel size 2 (the
    conversion's own test), then the components in each of ``LAYOUTS``."""
    warnings.filterwarnings("ignore")
    from megatron.core import parallel_state

    from tests.models.test_megatron import conversion_step

    ctx, shard = gloo_rank(rank, batch)
    with megatron_on_cpu():
        results = {"conversion": {}}
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
        for kind in ("tied", "untied", "value"):
            results["conversion"][kind] = conversion_step(kind, ids, rank, 2)
        parallel_state.destroy_model_parallel()
        for layout, (tp, pp) in LAYOUTS.items():
            mega = on_megatron(config, tp, pp)
            result = computed(ctx, mega, dirs, shard)
            # a checkpoint (transformers-layout weights, each rank's optimiser shard) resumes
            checkpoint = os.path.join(out, f"checkpoint-{layout}")
            unbroken = LMActor(ctx, mega, dirs.actor)
            unbroken.update(shard)
            unbroken.save_checkpoint(checkpoint)
            resumed = LMActor(ctx, mega, dirs.actor)
            resumed.load_checkpoint(checkpoint)
            unbroken.update(shard)
            resumed.update(shard)
            result["resume"] = (unbroken.weights(), resumed.weights())
            results[layout] = result
            parallel_state.destroy_model_parallel()
        for written, resumed_as in MOVES:  # a checkpoint resumed on another layout
            moved = LMActor(ctx, on_megatron(config, *LAYOUTS[resumed_as]), dirs.actor)
            moved.load_checkpoint(os.path.join(out, f"checkpoint-{written}"))
            moved.update(shard)
            results[written, resumed_as] = moved.weights()
            parallel_state.destroy_model_parallel()
        torch.save(results, os.path.join(out, f"rank{rank}.pt"))


@pytest.fixture(scope="module")
def two_ranks(two_layer_lm, tmp_path_factory):
    """``(config, batch, ids, [rank 0's, rank 1's] results)`` of ``rank_main``."""
    config, dirs = two_layer_lm
    config = training_config(dirs)
    batch = scored_batch(config, dirs)
    ids = torch.randint(0, 67, (3, 9), generator=torch.Generator().manual_seed(1))
    out = tmp_path_factory.mktemp("megatron")
    rank_pool(2).run(rank_main, str(out), config, dirs, batch, ids)
    return config, batch, ids, [torch.load(out / f"rank{r}.pt") for r in (0, 1)]


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_two_ranks_update_like_the_torch_backend_on_one(two_layer_lm, two_ranks, layout):
    """2 gloo ranks, each given half the batch: tensor parallel (each weight split in two, both
    ranks computing on the whole batch), data parallel (each its half, gradients summed) or
    pipeline parallel (a layer each; Megatron's 1F1B schedule runs the micro-batches through
    both, the tied embedding's two copies summing their gradients). Each ends where the torch
    backend does on the whole batch in one process; each rank's log-probs and values are those
    of its own rows, before and after a step; and a checkpoint resumes bit-exact."""
    _, dirs = two_layer_lm
    config, batch, _, results = two_ranks
    assert batch["response_mask"][:4].sum() != batch["response_mask"][4:].sum()  # uneven halves
    ranks = [r[layout] for r in results]
    check_computed(config, dirs, batch, ranks, layout)
    for rank in ranks:
        unbroken, resumed = rank["resume"]
        assert all(torch.equal(resumed[k], v) for k, v in unbroken.items()), layout
    if layout == "pipeline-parallel-2":  # the embedding (stage 0) and its copy (stage 1)
        assert torch.equal(ranks[0]["tied"], ranks[1]["tied"])


def four_rank_main(rank, out, config, dirs, batch):
    """Tensor parallel 2 x pipeline parallel 2 on 4 gloo ranks, each given a quarter of the
    batch: log-probs, values, both updates, log-probs after a step."""
    warnings.filterwarnings("ignore")
    from megatron.core import parallel_state

    ctx, shard = gloo_rank(rank, batch, size=4)
    with megatron_on_cpu():
        result = computed(ctx, on_megatron(config, tp=2, pp=2), dirs, shard)
        parallel_state.destroy_model_parallel()
    torch.save(result, os.path.join(out, f"rank{rank}.pt"))


def test_tensor_and_pipeline_parallel_2x2_update_like_the_torch_backend(two_layer_lm, tmp_path):
    """4 ranks: 2 stages of a layer each, each stage's weights split over 2 ranks. Each rank's
    log-probs and values (before and after a step) are those of its own rows, and both updates
    end at the torch backend's weights on the whole batch in one process."""
    _, dirs = two_layer_lm
    config = training_config(dirs)
    batch = scored_batch(config, dirs)
    rank_pool(4).run(four_rank_main, str(tmp_path), config, dirs, batch)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(4)]
    check_computed(config, dirs, batch, ranks, "2x2")
    # the embedding's tensor-parallel halves on stage 0 (ranks 0, 1) and their copies on stage 1
    assert torch.equal(ranks[0]["tied"], ranks[2]["tied"])
    assert torch.equal(ranks[1]["tied"], ranks[3]["tied"])


@pytest.mark.parametrize("move", MOVES, ids=[f"{a}-to-{b}" for a, b in MOVES])
def test_a_checkpoint_resumes_on_another_layout(two_ranks, move):
    """The optimiser's moments, written as Megatron's distributed checkpoint by one layout, load
    onto another: the resumed run's next update ends where the writing layout's does (to float
    tolerance: the sums run in another order). Starting the moments afresh instead moves the
    weights by about a learning rate."""
    written, _ = move
    _, _, _, results = two_ranks
    for rank in results:
        unbroken, _ = rank[written]["resume"]
        got = rank[move]
        assert got.keys() == unbroken.keys()
        for name, value in unbroken.items():
            assert torch.allclose(got[name], value, atol=1e-5), (move, name)


def test_tensor_parallel_2_computes_differentiates_and_steps_like_one_process(two_ranks):
    """The conversion on 2 gloo ranks, each holding half of every split weight (whole query
    groups, halves of the gate and up projections, half the padded vocabulary): the gathered
    outputs, the gradients and the weights after one AdamW step, converted back, equal one
    process's on the Hugging Face model. Megatron's optimiser needs CUDA; torch's AdamW steps
    each rank's shards."""
    from tests.models.test_megatron import check_against_one_process

    _, _, ids, results = two_ranks
    for kind in ("tied", "untied", "value"):
        check_against_one_process(kind, ids, [r["conversion"][kind] for r in results])


def test_the_placement_refuses_megatron_where_it_cannot_run():
    """On CPU slots (Megatron's model calls CUDA), and with a tensor-parallel size (or tensor x
    pipeline size) that does not divide the component's processes (8 on 8 GPUs, one each)."""
    from rlcore.config import load_config
    from rlcore.placement import PlacementError, plan_for_config

    arith = "reasoning/tiny_arith_ppo"
    with pytest.raises(PlacementError, match=r"^actor.training_backend: megatron runs on GPUs"):
        plan_for_config(load_config(arith, ["actor.training_backend=megatron"]))

    def on_gpus(tp, pp=1):
        config = load_config(
            arith,
            [
                "cluster=gpu_1x8",
                "actor.training_backend=megatron",
                f"actor.megatron.tensor_parallel_size={tp}",
                f"actor.megatron.pipeline_parallel_size={pp}",
            ],
        )
        return replace_keys(
            config, {"cluster.component_placement": {"actor,critic,rollout,reward": "0-7"}}
        )

    with pytest.raises(
        PlacementError,
        match=r"^actor.megatron.tensor_parallel_size: 3 does not "
        r"divide the 8 actor process\(es\)",
    ):
        plan_for_config(on_gpus(3), gpus=lambda: 0)
    with pytest.raises(
        PlacementError,
        match=r"^actor.megatron.pipeline_parallel_size: 4 stages "
        r"of actor.megatron.tensor_parallel_size 4 rank\(s\) each \(16\) do not "
        r"divide the 8 actor process\(es\)",
    ):
        plan_for_config(on_gpus(4, 4), gpus=lambda: 0)
    assert plan_for_config(on_gpus(4), gpus=lambda: 0).world_size("actor") == 8
    assert plan_for_config(on_gpus(2, 4), gpus=lambda: 0).world_size("actor") == 8


def test_the_preflight_refuses_a_model_megatron_cannot_split_or_convert(tiny_lm, tmp_path):
    """Read from the model folder (or the tiny model's shape) before anything starts: the
    tensor-parallel size must divide the key/value heads, the pipeline-parallel size the layers,
    and the architecture be converted."""
    import json

    from rlcore.config import ConfigError
    from rlcore.runners.preflight import _check_megatron_models

    config, _ = tiny_lm  # the tiny model: 2 key/value heads
    mega = on_megatron(config, 2)
    _check_megatron_models(mega)  # 2 divides 2
    with pytest.raises(
        ConfigError,
        match=r"^actor.megatron.tensor_parallel_size: 4 does not "
        r"divide the model's 2 key/value heads",
    ):
        _check_megatron_models(on_megatron(config, 4))
    with pytest.raises(
        ConfigError,
        match=r"^actor.megatron.pipeline_parallel_size: 2 does not "
        r"divide the model's 1 layers",
    ):
        _check_megatron_models(on_megatron(config, 1, 2))
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    # (a folder the preflight's model check would refuse first: only its config is read here)
    mega = unchecked(mega, {"actor.model.path": str(gpt2), "warmup.steps": 0})
    with pytest.raises(
        ConfigError,
        match=r"^actor.training_backend: megatron trains qwen2 and "
        r"llama models; this one is 'gpt2'",
    ):
        _check_megatron_models(mega)
