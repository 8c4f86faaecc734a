"""What a placement must give the run besides slots: batches that split evenly over each
component's ranks, and env ranks paired with rollout ranks.

These run in ``plan_for_config``, so ``runner.dry_run=true``, ``rlcore placement`` and a real
start refuse the same layouts, before any process starts.
"""

from __future__ import annotations

from rlcore.config.batch_sizes import name_values, valid_mini_batches
from rlcore.config.schema import EmbodiedConfig, ReasoningConfig, RLCoreConfig, UpdateConfig
from rlcore.placement.grammar import KEY_PREFIX, PlacementError
from rlcore.placement.plan import PlacementPlan


def check_plan(config: RLCoreConfig, plan: PlacementPlan) -> None:
    """Raise ``PlacementError`` listing every problem of running ``config`` on ``plan``."""
    if isinstance(config, EmbodiedConfig):
        problems = _embodied(config, plan)
    else:
        problems = _reasoning(config, plan)
    problems += _offload(config, plan) + _spans(plan, config) + _megatron(config, plan)
    if problems:
        raise PlacementError("\n".join(problems))


def _update_split(
    section: str, update: UpdateConfig, per_mini: int, ranks: int, valid: list[int] | None = None
) -> list[str]:
    """A mini-batch of ``per_mini`` samples shared by ``ranks``, in micro-batches on each;
    ``valid``, the mini-batches that would fit, where the mini-batch counts samples."""
    if per_mini % ranks:
        fits = f" that divides the batch: {name_values(valid, per_mini)}" if valid else ""
        return [
            f"{section}.ppo_mini_batch_size: a mini-batch of {per_mini} samples cannot be shared "
            f"by {ranks} {section} ranks; use a multiple of {ranks}{fits}"
        ]
    micro, per_rank = update.ppo_micro_batch_size, per_mini // ranks
    # A micro-batch at least as large as a rank's share is simply the whole share.
    if micro is not None and micro < per_rank and per_rank % micro:
        return [
            f"{section}.ppo_micro_batch_size: {micro} does not divide the {per_rank} samples "
            f"each of the {ranks} {section} ranks holds of a mini-batch; pick a divisor of "
            f"{per_rank}"
        ]
    return []


def _asynchronous(config: RLCoreConfig, plan: PlacementPlan, layout: str, work: str) -> list[str]:
    """An asynchronous run (``runner.max_staleness``) needs the rollout apart from the actor."""
    stale = config.runner.max_staleness
    shared = next((g for g in plan.fused if "actor" in g and "rollout" in g), None)
    if not stale or shared is None:
        return []
    return [
        f"runner.max_staleness: {stale}, but the rollout shares a process with the actor "
        f"({', '.join(shared)}), so it cannot {work} while the actor trains; place the rollout "
        f"apart, e.g. cluster.devices_per_node=2 cluster.component_placement={layout}, or set "
        "runner.max_staleness=0"
    ]


def _embodied(config: EmbodiedConfig, plan: PlacementPlan) -> list[str]:
    envs, rollouts, actors = (plan.world_size(n) for n in ("env", "rollout", "actor"))
    num_envs = config.env.num_envs
    problems = []
    if envs != rollouts:
        problems.append(
            f"{KEY_PREFIX}: env has {envs} rank(s) and rollout {rollouts}; rollout rank r steps "
            "the envs of env rank r, so give them as many ranks"
        )
    for name, ranks in (("env", envs), ("actor", actors)):
        if num_envs % ranks:
            problems.append(
                f"env.num_envs: {num_envs} envs cannot be shared by {ranks} {name} ranks; use a "
                f"multiple of {ranks}"
            )
    group = config.algorithm.group_size
    if group > 1 and num_envs % envs == 0 and (num_envs // envs) % group:
        problems.append(
            f"env.num_envs: {num_envs} envs over {envs} env ranks give each {num_envs // envs}, "
            f"not whole groups of algorithm.group_size={group} (a group resets on one rank); "
            f"use a multiple of {group * envs}"
        )
    problems += _asynchronous(config, plan, "{env:0,rollout:0,actor:1}", "collect")
    problems += _stages(config, plan, envs)
    return problems + _embodied_mini_batch(config, actors)


def _embodied_mini_batch(config: EmbodiedConfig, actors: int) -> list[str]:
    """The mini-batch divides the batch and splits over the actor ranks; the refusal names the
    sizes that would (a mini-batch the user did not write follows the batch: batch_sizes.py)."""
    steps, num_envs = config.runner.rollout_steps, config.env.num_envs
    batch, mini = steps * num_envs, config.actor.ppo_mini_batch_size
    valid = valid_mini_batches(batch, actors)
    if batch % mini:
        ranks = f" that {actors} actor ranks share" if actors > 1 else ""
        return [
            f"actor.ppo_mini_batch_size: {mini} does not divide the batch of {batch} "
            f"(runner.rollout_steps {steps} x env.num_envs {num_envs}); pick a divisor of "
            f"{batch}{ranks}: {name_values(valid, mini) if valid else 'none (env.num_envs)'}"
        ]
    return _update_split("actor", config.actor, mini, actors, valid)


def _stages(config: EmbodiedConfig, plan: PlacementPlan, envs: int) -> list[str]:
    """``rollout.pipeline_stage_num`` > 1: the env apart from the rollout (in one process the
    stages would only take turns), and each env rank's envs in equal stages of whole groups."""
    stages = config.rollout.pipeline_stage_num
    if stages == 1:
        return []
    key = f"rollout.pipeline_stage_num: {stages}"
    if any("env" in group and "rollout" in group for group in plan.fused):
        return [
            f"{key}, but the env shares a process with the rollout, so a stage's envs cannot "
            "step while the rollout acts on another; place them apart, e.g. "
            "cluster.devices_per_node=2 cluster.component_placement={env:0,rollout:1,actor:1} "
            "cluster.fuse_collocated=false, or set rollout.pipeline_stage_num=1"
        ]
    num_envs, group = config.env.num_envs, config.algorithm.group_size
    if num_envs % envs:
        return []  # (reported above)
    per_rank = num_envs // envs
    if per_rank % (stages * group):
        whole = f" of whole groups of algorithm.group_size={group}" if group > 1 else ""
        return [
            f"{key}: each env rank's {per_rank} envs cannot form {stages} equal stages{whole}; "
            f"use an env.num_envs that is a multiple of {envs * stages * group}"
        ]
    return []


def _reasoning(config: ReasoningConfig, plan: PlacementPlan) -> list[str]:
    group = config.algorithm.group_size
    responses = config.data.train_batch_size * group
    problems = []
    for name in plan.components:
        ranks = plan.world_size(name)
        if responses % ranks:
            problems.append(
                f"{KEY_PREFIX}: {name} has {ranks} ranks, which cannot share the {responses} "
                "responses of an iteration (data.train_batch_size x group_size)"
            )
    problems += _asynchronous(
        config, plan, "{actor:0,ref:0,critic:1,rollout:1,reward:1}", "generate"
    )
    actor = config.actor
    actor_problems = _update_split(
        "actor", actor, actor.ppo_mini_batch_size * group, plan.world_size("actor")
    )
    problems += actor_problems
    if "critic" in plan.components:
        update = config.derived.critic_update
        critic_problems = _update_split(
            "critic", update, update.ppo_mini_batch_size * group, plan.world_size("critic")
        )
        # A size the critic inherits from the actor is reported once, under actor.
        reported = {p.split(":")[0].removeprefix("actor.") for p in actor_problems}
        problems += [
            p
            for p in critic_problems
            if not (
                getattr(config.critic, key := p.split(":")[0].removeprefix("critic.")) is None
                and key in reported
            )
        ]
    return problems


def _offload(config: RLCoreConfig, plan: PlacementPlan) -> list[str]:
    """FSDP2's CPU offload moves a GPU model's shards to the CPU: on CPU slots it has nothing to
    do, and a run that promises less GPU memory by it must have GPUs."""
    if plan.device == "cuda":
        return []
    trained = {"actor": config.actor, "critic": getattr(config, "critic", None)}
    return [
        f"{name}.fsdp.offload: true, but the plan's devices are CPUs (cluster.device "
        f"{config.cluster.device}), so there is nothing to offload; remove it"
        for name, section in trained.items()
        if section is not None and name in plan.components and section.fsdp.offload
    ]


def _spans(plan: PlacementPlan, config: RLCoreConfig) -> list[str]:
    """A process given several GPUs: trainers and the hf rollout run a process on one device, so
    the others would sit idle; an sglang rollout is tensor parallel over exactly
    ``rollout.tensor_parallel_size`` GPUs, which must be what each of its processes gets."""
    sglang = isinstance(config, ReasoningConfig) and config.rollout.backend == "sglang"
    judge = isinstance(config, ReasoningConfig) and config.reward.judge.backend == "sglang"
    if plan.device != "cuda":
        cpus = f"the plan's devices are CPUs (cluster.device {config.cluster.device})"
        return [
            f"{key}: sglang runs on GPUs only, and {cpus}; use {key}=hf"
            for key, asked in (("rollout.backend", sglang), ("reward.judge.backend", judge))
            if asked
        ]
    problems = []
    for name, ranks in plan.components.items():
        if name == "rollout" and sglang:
            tp = config.rollout.tensor_parallel_size
            odd = [r for r in ranks if len(r.devices) != tp]
            if odd:
                problems.append(
                    f"rollout.tensor_parallel_size: {tp}, but rollout process {odd[0].rank} "
                    f"gets {len(odd[0].devices)} GPU(s) {list(odd[0].devices)} in "
                    f"{KEY_PREFIX}; give each rollout process {tp} (DEVICES:PROCESSES, e.g. "
                    f"rollout: 0-{2 * tp - 1}:0-1 for 2 engines) or set the size to match"
                )
            continue
        wide = [r for r in ranks if len(r.devices) > 1]
        if wide:
            problems.append(
                f"{KEY_PREFIX}: {name} process {wide[0].rank} spans GPUs "
                f"{list(wide[0].devices)}, but a {name} process uses one GPU (only an sglang "
                "rollout engine and the Megatron backend span several), so the rest would sit "
                "idle; give each process one "
                f"GPU: as many ranks as GPUs (e.g. {name}: "
                f"{_one_each(ranks)})"
            )
    return problems


def _megatron(config: RLCoreConfig, plan: PlacementPlan) -> list[str]:
    """Megatron's model runs on CUDA devices, one per process, tensor parallel over
    ``megatron.tensor_parallel_size`` of the component's processes and pipeline parallel over
    ``megatron.pipeline_parallel_size`` groups of those."""
    if not isinstance(config, ReasoningConfig):
        return []  # refused in embodied mode by the config check
    problems = []
    for name in ("actor", "critic"):
        section = getattr(config, name)
        if section.training_backend != "megatron" or name not in plan.components:
            continue
        if plan.device != "cuda":
            problems.append(
                f"{name}.training_backend: megatron runs on GPUs only (Megatron-core's model "
                f"calls CUDA), and the plan's devices are CPUs (cluster.device "
                f"{config.cluster.device}); use training_backend torch or fsdp2"
            )
            continue
        tp, ranks = section.megatron.tensor_parallel_size, plan.world_size(name)
        pp = section.megatron.pipeline_parallel_size
        if ranks % tp:
            problems.append(
                f"{name}.megatron.tensor_parallel_size: {tp} does not divide the {ranks} {name} "
                f"process(es) in {KEY_PREFIX}; give {name} a multiple of {tp} processes (one GPU "
                "each), or pick a divisor"
            )
        elif ranks % (tp * pp):
            problems.append(
                f"{name}.megatron.pipeline_parallel_size: {pp} stages of "
                f"{name}.megatron.tensor_parallel_size {tp} rank(s) each ({tp * pp}) do not "
                f"divide the {ranks} {name} process(es) in {KEY_PREFIX}; give {name} a multiple "
                f"of {tp * pp} processes (one GPU each), or pick smaller sizes"
            )
    return problems


def _one_each(ranks: list) -> str:
    devices = sorted(d for r in ranks for d in r.global_devices)
    return f"{devices[0]}-{devices[-1]}" if len(devices) > 1 else str(devices[0])
