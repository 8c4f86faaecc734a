"""training_backend: megatron for the reasoning actor and critic (megatron-core 0.16.1 on the
CPU through the test-only shim in tests/megatron_shim.py; on a run the placement refuses CPU
slots): the same log-probs, values and updates as the torch backend, on one rank, on 2
tensor-parallel ranks and on 2 data-parallel ranks."""

import copy
import os
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rlcore.scheduler.weight_buckets import buckets
from rlcore.workers.lm_actor import LMActor, LMCritic
from tests.lm_fixtures import SOLO, tiny_config
from tests.megatron_shim import megatron_on_cpu
from tests.workers.test_lm_actor import free_port, gloo_rank, make_batch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


def on_megatron(config, tp=1):
    config = copy.deepcopy(config)
    for section in (config.actor, config.critic):
        section.training_backend = "megatron"
        section.megatron.tensor_parallel_size = tp
    return config


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


def training_config(dirs):
    config = tiny_config(dirs.actor.parent, dirs.actor.parent, "actor.ppo_mini_batch_size=8",
                         "actor.ppo_epochs=2", "actor.ppo_micro_batch_size=2",
                         "actor.optim.lr=1e-3", "critic.optim.lr=1e-3")  # fmt: skip
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


def test_one_rank_computes_and_updates_as_the_torch_backend(tiny_lm, megatron_solo):
    """The converted model's log-probs and values equal the transformers model's, and one update
    (2 epochs of micro-batches, gradient clipping, AdamW) ends at the same weights."""
    config, dirs = tiny_lm
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
            assert torch.allclose(got[name], value, atol=1e-5), (component_cls, name)


def rank_main(rank, port, out, config, dirs, batch, ids):
    """One spawn for every 2-rank check: the converted models at tensor-parallel size 2 (the
    conversion's own test), then the components at size 2 and at size 1 (data parallel)."""
    warnings.filterwarnings("ignore")
    from megatron.core import parallel_state

    from tests.models.test_megatron import conversion_step

    with gloo_rank(rank, port, batch) as (ctx, shard), megatron_on_cpu():
        results = {"conversion": {}}
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
        for kind in ("tied", "untied", "value"):
            results["conversion"][kind] = conversion_step(kind, ids, rank, 2)
        parallel_state.destroy_model_parallel()
        for tp in (2, 1):
            mega = on_megatron(config, tp)
            result = {}
            for component_cls in (LMActor, LMCritic):
                result[component_cls.__name__] = updated(component_cls, ctx, mega, dirs, shard)
            result["log_probs"] = LMActor(ctx, mega, dirs.actor).compute_log_probs(shard)
            # a checkpoint (transformers-layout weights, each rank's optimiser shard) resumes
            checkpoint = os.path.join(out, f"checkpoint-tp{tp}")
            unbroken = LMActor(ctx, mega, dirs.actor)
            unbroken.update(shard)
            unbroken.save_checkpoint(checkpoint)
            resumed = LMActor(ctx, mega, dirs.actor)
            resumed.load_checkpoint(checkpoint)
            unbroken.update(shard)
            resumed.update(shard)
            result["resume"] = (unbroken.weights(), resumed.weights())
            results[tp] = result
            parallel_state.destroy_model_parallel()
        torch.save(results, os.path.join(out, f"rank{rank}.pt"))


@pytest.fixture(scope="module")
def two_ranks(tiny_lm, tmp_path_factory):
    """``(config, batch, ids, [rank 0's, rank 1's] results)`` of ``rank_main``."""
    config, dirs = tiny_lm
    config = training_config(dirs)
    batch = scored_batch(config, dirs)
    ids = torch.randint(0, 67, (3, 9), generator=torch.Generator().manual_seed(1))
    out = tmp_path_factory.mktemp("megatron")
    mp.spawn(rank_main, args=(free_port(), str(out), config, dirs, batch, ids), nprocs=2,
             join=True)  # fmt: skip
    return config, batch, ids, [torch.load(out / f"rank{r}.pt") for r in (0, 1)]


@pytest.mark.parametrize("tp", [2, 1], ids=["tensor-parallel-2", "data-parallel-2"])
def test_two_ranks_update_like_the_torch_backend_on_one(tiny_lm, two_ranks, tp):
    """2 gloo ranks, each given half the batch: tensor parallel (each weight split in two, both
    ranks computing on the whole batch) or data parallel (each its half, gradients summed);
    both end where the torch backend does on the whole batch in one process, each rank's
    log-probs are those of its own rows, and a checkpoint resumes bit-exact."""
    _, dirs = tiny_lm
    config, batch, _, results = two_ranks
    assert batch["response_mask"][:4].sum() != batch["response_mask"][4:].sum()  # uneven halves
    ranks = [r[tp] for r in results]
    for component_cls in (LMActor, LMCritic):
        want = updated(component_cls, SOLO, config, dirs, batch)
        for rank in ranks:
            got = rank[component_cls.__name__]
            assert got.keys() == want.keys()
            for name, value in want.items():
                assert torch.allclose(got[name], value, atol=1e-5), (tp, component_cls, name)
    for rank in ranks:
        unbroken, resumed = rank["resume"]
        assert all(torch.equal(resumed[k], v) for k, v in unbroken.items()), tp
    log_probs = LMActor(SOLO, config, dirs.actor).compute_log_probs(batch)
    valid = batch["response_mask"].bool()
    both = torch.cat([ranks[0]["log_probs"], ranks[1]["log_probs"]])
    assert torch.allclose(both[valid], log_probs[valid], atol=1e-5)


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
    """On CPU slots (Megatron's model calls CUDA), and with a tensor-parallel size that does not
    divide the component's processes (8 on 8 GPUs, one each)."""
    from rlcore.config import load_config
    from rlcore.placement import PlacementError, plan_for_config

    arith = "reasoning/tiny_arith_ppo"
    with pytest.raises(PlacementError, match=r"^actor.training_backend: megatron runs on GPUs"):
        plan_for_config(load_config(arith, ["actor.training_backend=megatron"]))

    def on_gpus(tp):
        config = load_config(arith, ["cluster=gpu_1x8", "actor.training_backend=megatron",
                                     f"actor.megatron.tensor_parallel_size={tp}"])  # fmt: skip
        config.cluster.component_placement = {"actor,critic,rollout,reward": "0-7"}
        return config

    with pytest.raises(PlacementError, match=r"^actor.megatron.tensor_parallel_size: 3 does not "
                       r"divide the 8 actor process\(es\)"):  # fmt: skip
        plan_for_config(on_gpus(3), gpus=lambda: 0)
    assert plan_for_config(on_gpus(4), gpus=lambda: 0).world_size("actor") == 8


def test_the_preflight_refuses_a_model_megatron_cannot_split_or_convert(tiny_lm, tmp_path):
    """Read from the model folder (or the tiny model's shape) before anything starts: the
    tensor-parallel size must divide the key/value heads, and the architecture be converted."""
    import json

    from rlcore.config import ConfigError
    from rlcore.runners.preflight import _check_megatron_models

    config, _ = tiny_lm  # the tiny model: 2 key/value heads
    mega = on_megatron(config, 2)
    _check_megatron_models(mega)  # 2 divides 2
    with pytest.raises(ConfigError, match=r"^actor.megatron.tensor_parallel_size: 4 does not "
                       r"divide the model's 2 key/value heads"):  # fmt: skip
        _check_megatron_models(on_megatron(config, 4))
    gpt2 = tmp_path / "gpt2"
    gpt2.mkdir()
    (gpt2 / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    mega.actor.model.path = str(gpt2)
    with pytest.raises(ConfigError, match=r"^actor.training_backend: megatron trains qwen2 and "
                       r"llama models; this one is 'gpt2'"):  # fmt: skip
        _check_megatron_models(mega)
