"""Checks of the run as a whole: the runner's folder and resume keys, the cluster's network
keys, the embodied loop's sizes, and the mini-batch against the batch (reasoning; an embodied
mini-batch is checked by the placement, against the actor ranks too: placement/checks.py)."""

from __future__ import annotations

from typing import Any

from rlcore.algorithms import ADVANTAGES
from rlcore.config.schema import EmbodiedConfig, RLCoreConfig, UpdateConfig
from rlcore.config.sections import RolloutCorrectionConfig

# the longest file name of the usual file systems (ext4, xfs, btrfs, APFS), in bytes
NAME_MAX = 255


def check_runner(config: RLCoreConfig) -> list[str]:
    run = config.runner
    problems = []
    name = run.run_name
    if name is not None and (name in ("", ".", "..") or "/" in name or "\\" in name):
        problems.append(
            f"runner.run_name: {name!r} must be one folder name (no '/', not '.' or '..'): the "
            "run is written to OUTPUT_DIR/RUN_NAME and nowhere else"
        )
    elif name is not None and "\0" in name:
        problems.append(
            f"runner.run_name: {name.replace(chr(0), '<NUL>')!r} holds a NUL character, which no "
            "folder name can; remove it"
        )
    elif name is not None and len(name.encode()) > NAME_MAX:
        problems.append(
            f"runner.run_name: '{name[:24]}...' is {len(name.encode())} bytes long; a folder "
            f"name has at most {NAME_MAX}: pick a shorter one"
        )
    if run.resume == "auto" and run.run_name is None:
        problems.append(
            "runner.resume: auto continues the run folder OUTPUT_DIR/RUN_NAME, so it needs a "
            "fixed runner.run_name (the default name has a timestamp)"
        )
    if run.resume == "auto" and run.resume_dir is not None:
        problems.append(
            "runner.resume_dir: set together with runner.resume=auto; keep one (resume_dir names "
            "the checkpoint, auto finds the run folder's newest)"
        )
    return problems


def check_cluster(config: RLCoreConfig) -> list[str]:
    cluster = config.cluster
    if cluster.network_interface is None or cluster.address is not None:
        return []
    return [
        f"cluster.network_interface: {cluster.network_interface!r} applies to a cluster run "
        "(cluster.address set); a local run binds Ray, the torch.distributed stores, gloo and "
        "NCCL to 127.0.0.1 only; remove the key, or set cluster.address"
    ]


def check_update_sizes(
    section: str, update: UpdateConfig, batch: int, batch_desc: str
) -> list[str]:
    """The mini-batch divides the batch. How a mini-batch splits over ranks and micro-batches is
    the placement's check (``rlcore/placement/checks.py``): it depends on the ranks."""
    mini = update.ppo_mini_batch_size
    if batch % mini:
        return [
            f"{section}.ppo_mini_batch_size: {mini} does not divide the batch of {batch} "
            f"({batch_desc}); pick a divisor of {batch}"
        ]
    return []


# the built-in actor-critic's shape, which a user's class (actor.model.cls) does not read
ARCHITECTURE_KEYS = ("hidden_sizes", "activation", "shared_backbone", "ortho_init", "log_std_init")


def _check_lm_policy(model: Any) -> list[str]:
    """``actor.model.type: lm`` builds its own architecture; its section is read only then."""
    defaults = type(model)()
    if model.type != "lm":
        return (
            [
                "actor.model.lm: set, but actor.model.type is actor_critic, which does not read "
                "it; set actor.model.type=lm for an LM policy, or leave the section out"
            ]
            if model.lm != defaults.lm
            else []
        )
    problems = [
        f"actor.model.{name}: set, but actor.model.type=lm builds the policy from a language "
        "model; leave this key out"
        for name in ARCHITECTURE_KEYS
        if getattr(model, name) != getattr(defaults, name)
    ]
    if model.cls is not None:
        problems.append(
            f"actor.model.cls: {model.cls} and actor.model.type=lm both name the policy; keep one"
        )
    if model.lm.path is not None:
        problems += [
            f"actor.model.lm.{name}: set, but actor.model.lm.path gives the model, whose own "
            "shape it keeps; leave this section out"
            for name in ("tiny", "vision")
            if getattr(model.lm, name) != getattr(defaults.lm, name)
        ]
    return problems


def episode_estimators() -> list[str]:
    """The estimators embodied GRPO can run (``algorithm.group_size`` > 1): those that compare
    whole rows of a group by their summed rewards and read nothing else (no values, no other
    input such as ReMax's greedy baselines)."""
    return [
        name
        for name in ADVANTAGES.names()
        if (traits := ADVANTAGES.entry(name).traits).get("needs_groups")
        and not traits.get("needs_values")
        and not traits.get("inputs")
        and name != "gdpo"  # (its reward components are a reasoning reward's)
    ]


def _check_embodied_estimator(config: EmbodiedConfig) -> list[str]:
    alg = config.algorithm
    if alg.adv_type not in ADVANTAGES:
        return []  # named by the algorithm check
    if alg.group_size == 1:
        if ADVANTAGES.entry(alg.adv_type).traits.get("episodic"):
            return []
        episodic = [n for n in ADVANTAGES.names() if ADVANTAGES.entry(n).traits.get("episodic")]
        hint = (
            f", or set algorithm.group_size > 1 for embodied GRPO ({alg.adv_type} compares the "
            "episodes of envs reset alike)"
            if alg.adv_type in episode_estimators()
            else ""
        )
        return [
            f"algorithm.adv_type: {alg.adv_type} cannot run in embodied mode with group_size 1: "
            f"it does not take episodes that end inside a rollout; use one that does "
            f"({', '.join(episodic)}){hint}"
        ]
    fits = episode_estimators()
    problems = []
    if alg.adv_type not in fits:
        problems.append(
            f"algorithm.adv_type: {alg.adv_type} does not fit embodied groups "
            f"(algorithm.group_size={alg.group_size}): each env's episode is scored by its "
            "return and compared within its group, which needs an estimator that reads only "
            f"the rows' summed rewards ({', '.join(fits)}); or set group_size 1"
        )
    if alg.value_coef:
        problems.append(
            f"algorithm.value_coef: {alg.value_coef}, and a group baseline "
            f"(group_size={alg.group_size}) trains no value head; set algorithm.value_coef=0"
        )
    if alg.bootstrap_type != "standard":
        problems.append(
            f"algorithm.bootstrap_type: {alg.bootstrap_type}, and a group baseline "
            f"(group_size={alg.group_size}) scores each episode by its rewards, with no value "
            "to bootstrap from; leave bootstrap_type out"
        )
    if config.env.num_envs % alg.group_size:
        problems.append(
            f"env.num_envs: {config.env.num_envs} envs do not make whole groups of "
            f"algorithm.group_size={alg.group_size}; use a multiple of {alg.group_size}"
        )
    return problems


def _check_embodied_rollout_correction(corr: RolloutCorrectionConfig) -> list[str]:
    """The ``algorithm.rollout_correction`` keys embodied mode does not read."""
    where, problems = "algorithm.rollout_correction", []
    for name, value, why in (
        ("rollout_is", corr.rollout_is == "sequence", "an env row's steps are no sequence"),
        ("rollout_rs", corr.rollout_rs is not None, "rejection is built for reasoning only"),
        (
            "bypass_mode",
            corr.bypass_mode,
            "an embodied batch trains against the log-probs it was collected with already "
            "(unless actor.log_prob_micro_batch_size recomputes them)",
        ),
        ("loss_type", corr.loss_type != "ppo_clip", "not built"),
    ):
        if value:
            problems.append(
                f"{where}.{name}: not in embodied mode ({why}); embodied reads rollout_is: "
                "token, rollout_is_threshold and rollout_is_batch_normalize"
            )
    return problems


def check_embodied(config: EmbodiedConfig) -> list[str]:
    alg, actor = config.algorithm, config.actor
    problems: list[str] = []
    if actor.model.cls is not None:  # the user's class decides its architecture
        defaults = type(actor.model)()
        problems += [
            f"actor.model.{name}: set, but actor.model.cls={actor.model.cls} builds the policy; "
            "give your class its architecture, or leave this key out"
            for name in ARCHITECTURE_KEYS
            if getattr(actor.model, name) != getattr(defaults, name)
        ]
    problems += _check_lm_policy(actor.model)
    problems += _check_embodied_rollout_correction(alg.rollout_correction)
    problems += _check_embodied_estimator(config)
    env = config.env
    rendering = env.id.startswith("maniskill/") and env.kwargs.get("obs_mode") == "rgb"
    if rendering and env.vector_mode == "async":
        problems.append(
            "env.vector_mode: async copies of a ManiSkill env rendering camera images "
            "(obs_mode rgb) hang in SAPIEN's renderer in forked subprocesses; use sync or "
            "auto (in-process copies on the CPU, the batched scene on a GPU)"
        )
    if alg.loss_agg_func != "token-mean":
        problems.append(
            f"algorithm.loss_agg_func: {alg.loss_agg_func} is the same loss as token-mean for "
            "embodied transitions (each is a one-step sequence); leave it at token-mean"
        )
    pickled = config.env.checkpoint_state == "pickle"
    if (
        pickled
        and config.env.vector_mode == "async"
        and (config.runner.checkpoint_every or config.runner.resume_dir)
    ):
        problems.append(
            "env.checkpoint_state: pickle saves the envs, which subprocess envs "
            "(env.vector_mode=async) cannot be; use env.checkpoint_state=reseed, vector_mode "
            "sync or native, or runner.checkpoint_every=0"
        )
    if not actor.model.hidden_sizes:
        problems.append("actor.model.hidden_sizes: give at least one layer width, e.g. [64, 64]")
    batch = config.runner.rollout_steps * config.env.num_envs
    if config.runner.total_env_steps < batch:
        problems.append(
            f"runner.total_env_steps: {config.runner.total_env_steps} is less than one iteration "
            f"(runner.rollout_steps x env.num_envs = {batch} steps); raise it to at least {batch}"
        )
    # (the mini-batch against the batch: the placement's check, which knows the actor ranks)
    return problems
