"""Cross-field checks: combinations of individually valid keys that cannot work together.

Each check returns problems as one-line strings that name the keys and the fix; they run after
the per-key validation and before any process starts.
"""

from __future__ import annotations

import importlib.metadata
import math
import re
from typing import Any

from rlcore.algorithms import ADVANTAGES, POLICY_LOSSES
from rlcore.config.errors import ConfigError
from rlcore.config.schema import (
    AlgorithmConfig,
    EmbodiedConfig,
    ReasoningConfig,
    RLCoreConfig,
    UpdateConfig,
)
from rlcore.config.schema_reasoning import MEGATRON_VERSION, SGLANG_VERSION


def check_config(config: RLCoreConfig) -> None:
    """Fill in the derived keys, then raise ``ConfigError`` listing every cross-field problem."""
    problems = derive_keys(config)
    problems += check_algorithm(config.algorithm, config.mode)
    problems += check_components(config)
    problems += check_runner(config)
    problems += check_cluster(config)
    if isinstance(config, EmbodiedConfig):
        problems += check_embodied(config)
    else:
        problems += check_reasoning(config)
    if problems:
        raise ConfigError("\n".join(problems))


def derive_keys(config: RLCoreConfig) -> list[str]:
    """Set each derived key left at null from the key it follows, once, in place:

    - ``algorithm.loss_type``: the mode's (embodied: actor_critic; reasoning: actor);
    - ``actor.model.add_value_head`` (embodied): ``loss_type == actor_critic``;
    - ``critic.use_critic_model`` (reasoning): whether ``adv_type`` reads values.

    A derived key set by hand to the other value promises what the run will not do: refused.
    """
    alg = config.algorithm
    if alg.loss_type is None:
        alg.loss_type = "actor_critic" if config.mode == "embodied" else "actor"
    problems: list[str] = []
    if isinstance(config, EmbodiedConfig):
        model = config.actor.model
        head = alg.loss_type == "actor_critic"
        if model.add_value_head is None:
            model.add_value_head = head
        elif model.add_value_head != head:
            problems.append(
                f"actor.model.add_value_head: {str(model.add_value_head).lower()}, but "
                f"algorithm.loss_type {alg.loss_type} {'trains' if head else 'has no'} a value "
                "head; leave add_value_head out: it follows loss_type"
            )
        return problems
    critic = config.critic
    if alg.adv_type not in ADVANTAGES:
        return problems  # check_algorithm names the unknown estimator
    reads = _needs_values(alg)
    if critic.use_critic_model is None:
        critic.use_critic_model = reads
    elif critic.use_critic_model != reads:
        problems.append(
            f"critic.use_critic_model: {str(critic.use_critic_model).lower()}, but adv_type "
            f"{alg.adv_type} {'reads values from a critic' if reads else 'never reads values'}; "
            "leave use_critic_model out (it follows algorithm.adv_type)"
            + ("" if reads else ", or pick an estimator that reads values, such as gae")
        )
    return problems


def component_sections(config: RLCoreConfig) -> dict[str, Any]:
    """Each placed component's config section (the reference has none: it copies the actor)."""
    if isinstance(config, EmbodiedConfig):
        return {"actor": config.actor, "rollout": config.rollout, "env": config.env}
    return {
        "actor": config.actor,
        "critic": config.critic,
        "rollout": config.rollout,
        "reward": config.reward,
    }


def check_components(config: RLCoreConfig) -> list[str]:
    """Group names (RLinf's ``group_name``) and training backends of the component sections."""
    problems: list[str] = []
    named: dict[str, str] = {}
    for component, sect in component_sections(config).items():
        name = sect.group_name
        if name is not None:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                problems.append(
                    f"{component}.group_name: {name!r} must be letters, digits, '_', '-' or '.' "
                    "(it names processes)"
                )
            elif name in named:
                problems.append(
                    f"{component}.group_name: {name!r} already names the {named[name]} group; "
                    "give each component its own"
                )
            named[name] = component
        backend = getattr(sect, "training_backend", "torch")
        fsdp = getattr(sect, "fsdp", None)
        if fsdp is not None and backend != "fsdp2" and fsdp != type(fsdp)():
            problems.append(
                f"{component}.fsdp: set, but {component}.training_backend is {backend}, which "
                f"does not read it; set {component}.training_backend=fsdp2, or remove it"
            )
        elif fsdp is not None and fsdp.param_dtype is None and fsdp.reduce_dtype != "float32":
            problems.append(
                f"{component}.fsdp.reduce_dtype: {fsdp.reduce_dtype}, but param_dtype is null, "
                "so gradients are reduced in the parameters' dtype; set "
                f"{component}.fsdp.param_dtype too, or remove reduce_dtype"
            )
        megatron = getattr(sect, "megatron", None)
        if megatron is not None and backend != "megatron" and megatron != type(megatron)():
            problems.append(
                f"{component}.megatron: set, but {component}.training_backend is {backend}, "
                f"which does not read it; set {component}.training_backend=megatron, or remove it"
            )
        if backend == "megatron" and isinstance(config, EmbodiedConfig):
            problems.append(
                f"{component}.training_backend: megatron trains the reasoning actor and critic "
                "(transformers decoders converted to Megatron's GPT); embodied policies are MLPs "
                "and CNNs: use torch or fsdp2"
            )
    return problems


def check_runner(config: RLCoreConfig) -> list[str]:
    run = config.runner
    problems = []
    name = run.run_name
    if name is not None and (name in ("", ".", "..") or "/" in name or "\\" in name):
        problems.append(
            f"runner.run_name: {name!r} must be one folder name (no '/', not '.' or '..'): the "
            "run is written to OUTPUT_DIR/RUN_NAME and nowhere else"
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


def check_algorithm(alg: AlgorithmConfig, mode: str) -> list[str]:
    problems: list[str] = []
    for name, registry, value in (
        ("adv_type", ADVANTAGES, alg.adv_type),
        ("policy_loss", POLICY_LOSSES, alg.policy_loss),
    ):
        try:
            registry.entry(value)
        except KeyError as unknown:
            problems.append(f"algorithm.{name}: {unknown.args[0]}")
    if alg.policy_loss in POLICY_LOSSES:
        loss, name = POLICY_LOSSES.entry(alg.policy_loss), alg.policy_loss
        why_not = loss.traits.get("not_embodied")
        if mode == "embodied" and why_not:
            problems.append(f"algorithm.policy_loss: {name} cannot run in embodied mode: {why_not}")
        # An option is a loss's keyword-only parameter (Entry.extra_kwargs); the others are unread.
        options = alg.policy_loss_options
        defaults = vars(type(options)())
        for option, value in vars(options).items():
            if value == defaults[option] or option in loss.extra_kwargs:
                continue
            readers = [
                n for n in POLICY_LOSSES.names() if option in POLICY_LOSSES.entry(n).extra_kwargs
            ]
            problems.append(
                f"algorithm.policy_loss_options.{option}: {value}, but algorithm.policy_loss "
                f"{name} does not read it (read by {', '.join(readers) or 'no loss'}); remove it, "
                "or pick a loss that reads it"
            )
        if name == "dro" and options.dro_beta is None:
            problems.append(
                "algorithm.policy_loss_options.dro_beta: dro needs the weight of its log-ratio "
                "penalty (verl's has no default either); set it > 0, e.g. 0.05"
            )
        if name == "clip_cov" and options.clip_cov_lb >= options.clip_cov_ub:
            problems.append(
                f"algorithm.policy_loss_options.clip_cov_lb: {options.clip_cov_lb} is not below "
                f"clip_cov_ub {options.clip_cov_ub}, so clip_cov would cut no token; keep lb < ub"
            )
    if alg.use_kl_in_reward and alg.use_kl_loss:
        problems.append(
            "algorithm.use_kl_in_reward: true together with algorithm.use_kl_loss: the reference "
            "KL would be penalised twice; keep one"
        )
    if alg.kl_penalty == "full" and alg.use_kl_in_reward:
        problems.append(
            "algorithm.kl_penalty: 'full' needs the whole vocabulary distribution, not the "
            "sampled token's log-prob the reward sees; use kl, abs, mse or low_var_kl"
        )
    if alg.kl_loss_type == "full" and alg.use_kl_loss:
        problems.append(
            "algorithm.kl_loss_type: 'full' (the KL over the whole vocabulary) is not built; the "
            "actor's loss sees the sampled tokens' log-probs: use kl, abs, mse or low_var_kl"
        )
    if alg.adv_type in ADVANTAGES:
        traits = ADVANTAGES.entry(alg.adv_type).traits
        if traits.get("needs_groups") and alg.group_size < 2 and mode == "reasoning":
            problems.append(
                f"algorithm.group_size: adv_type {alg.adv_type} compares samples within a group, "
                f"but group_size is {alg.group_size}; set group_size >= 2"
            )
    return problems


def _needs_values(alg: AlgorithmConfig) -> bool:
    return alg.adv_type in ADVANTAGES and ADVANTAGES.entry(alg.adv_type).traits.get(
        "needs_values", False
    )


def _check_update_sizes(
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


def check_embodied(config: EmbodiedConfig) -> list[str]:
    alg, actor = config.algorithm, config.actor
    problems: list[str] = []
    if alg.adv_type in ADVANTAGES and not ADVANTAGES.entry(alg.adv_type).traits.get("episodic"):
        episodic = [n for n in ADVANTAGES.names() if ADVANTAGES.entry(n).traits.get("episodic")]
        problems.append(
            f"algorithm.adv_type: {alg.adv_type} cannot run in embodied mode: it does not take "
            f"episodes that end inside a rollout; use one that does ({', '.join(episodic)})"
        )
    if alg.loss_agg_func != "token-mean":
        problems.append(
            f"algorithm.loss_agg_func: {alg.loss_agg_func} is the same loss as token-mean for "
            "embodied transitions (each is a one-step sequence); leave it at token-mean"
        )
    if alg.loss_type == "actor":
        problems.append(
            "algorithm.loss_type: embodied mode trains the policy and its value head together "
            "(actor_critic); a policy without a value head is not built: leave loss_type out or "
            "set it to actor_critic"
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
    if problems:
        return problems
    desc = (
        f"runner.rollout_steps {config.runner.rollout_steps} x env.num_envs {config.env.num_envs}"
    )
    return problems + _check_update_sizes("actor", actor, batch, desc)


def check_reasoning(config: ReasoningConfig) -> list[str]:
    alg, actor, critic = config.algorithm, config.actor, config.critic
    problems: list[str] = []
    if alg.loss_type != "actor":
        problems.append(
            "algorithm.loss_type: reasoning mode trains a separate critic model, so the actor "
            "and critic cannot share one backward pass; use loss_type actor"
        )
    problems += _rollout_engine(config)
    reward = config.reward
    if reward.kind == "custom" and reward.custom_fn is None:
        problems.append(
            "reward.custom_fn: reward.kind is custom, so name the function: "
            "reward.custom_fn=path/to/file.py:function"
        )
    if config.algorithm.filter_groups.enable and config.algorithm.group_size < 2:
        problems.append(
            "algorithm.filter_groups.enable: dynamic sampling keeps groups whose responses "
            "differ, and a group of algorithm.group_size 1 never does; set group_size >= 2"
        )
    buffer, longest = reward.overlong_buffer, config.data.max_response_length
    if buffer.enable and not 0 < buffer.len <= longest:
        problems.append(
            f"reward.overlong_buffer.len: {buffer.len}, but the buffer must hold 1 to "
            f"data.max_response_length ({longest}) tokens when overlong shaping is enabled; "
            "DAPO's recipe holds 4096 of 20480"
        )
    if not buffer.enable and (buffer.len, buffer.penalty_factor) != (0, 1.0):
        problems.append(
            "reward.overlong_buffer: len or penalty_factor set, but enable is false, so nothing "
            "would use them; set reward.overlong_buffer.enable=true, or leave them out"
        )
    problems += _check_gdpo(config)
    if reward.kind != "custom" and reward.custom_fn is not None:
        problems.append(
            f"reward.custom_fn: set, but reward.kind is {reward.kind}; set reward.kind=custom"
        )
    for name, sect, counts in (
        ("actor", actor, ("ppo_micro_batch_size", "log_prob_micro_batch_size")),
        ("critic", critic, ("ppo_micro_batch_size",)),
    ):
        given = [c for c in counts if getattr(sect, c) is not None]
        if sect.max_tokens_per_micro_batch is not None and given:
            problems.append(
                f"{name}.max_tokens_per_micro_batch: set together with {name}.{given[0]}; "
                f"micro-batches are formed by tokens or by rows, not both: set {name}.{given[0]}"
                "=null, or remove the budget"
            )
    problems += _megatron(config)
    problems += _share_group_prompts(config)
    lora = config.actor.model.lora
    if lora.rank:
        sharded = [
            n
            for n, sect in (("actor", actor), ("critic", critic))
            if sect.training_backend == "fsdp2"
        ]
        if sharded:
            problems.append(
                f"actor.model.lora.rank: {lora.rank}, but {sharded[0]}.training_backend is "
                "fsdp2, and LoRA under FSDP2 is not built yet; use training_backend torch with "
                "LoRA (the frozen base needs no sharded optimiser state), or lora.rank 0"
            )
        if not lora.target_modules:
            problems.append(
                "actor.model.lora.target_modules: empty, so LoRA would train nothing; name the "
                "linear layers, e.g. [q_proj, v_proj], or set actor.model.lora.rank=0"
            )
    tiny = config.actor.model.tiny
    if config.actor.model.path is None and tiny.hidden_size % tiny.num_heads:
        problems.append(
            f"actor.model.tiny.num_heads: {tiny.num_heads} does not divide hidden_size "
            f"{tiny.hidden_size}; pick a divisor of {tiny.hidden_size}"
        )
    if config.warmup.steps and config.actor.model.path is not None:
        problems.append(
            "warmup.steps: the supervised warm-up trains the tiny model only; set it to 0 when "
            "actor.model.path is set"
        )
    batch = config.data.train_batch_size
    desc = "data.train_batch_size prompts"
    actor_problems = _check_update_sizes("actor", actor, batch, desc)
    problems += actor_problems
    if critic.use_critic_model:
        critic_problems = _check_update_sizes("critic", config.critic_update(), batch, desc)
        # A size the critic inherits from the actor was already reported under actor.
        problems += [
            p for p in critic_problems if p.replace("critic.", "actor.", 1) not in actor_problems
        ]
    return problems


BUILT_IN_COMPONENTS = ("score", "correct", "format")  # rlcore/rewards/judge.py's Verdict


def _check_gdpo(config: ReasoningConfig) -> list[str]:
    """GDPO's reward components: named when it runs, known to the reward, one weight each, and
    nothing else changing the reward that its components would leave out."""
    alg, reward = config.algorithm, config.reward
    keys, weights = alg.gdpo_reward_keys, alg.gdpo_reward_weights
    if alg.adv_type != "gdpo":
        given = [name for name, value in (("keys", keys), ("weights", weights)) if value]
        return [
            f"algorithm.gdpo_reward_{name}: set, but adv_type is {alg.adv_type}, and only gdpo "
            "reads it; remove it, or set algorithm.adv_type=gdpo"
            for name in given
        ]
    shaped = reward.overlong_buffer.enable
    known = [*BUILT_IN_COMPONENTS, *(["overlong_penalty"] if shaped else [])]
    if not keys:
        given = (
            "the numbers in the dict reward.custom_fn returns"
            if reward.kind == "custom"
            else ", ".join(known)
        )
        return [
            "algorithm.gdpo_reward_keys: adv_type gdpo normalises each component of the reward "
            f"apart; name them, e.g. [correct, format] (kind {reward.kind} gives {given})"
        ]
    problems = []
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        problems.append(
            f"algorithm.gdpo_reward_keys: {', '.join(repeated)} named twice; name "
            "each component once (gdpo_reward_weights weighs it)"
        )
    unknown = [k for k in keys if k not in known]
    if reward.kind != "custom" and unknown:
        problems.append(
            f"algorithm.gdpo_reward_keys: {', '.join(unknown)} not given by reward.kind "
            f"{reward.kind}, which gives {', '.join(known)}"
            + ("" if shaped else " (overlong_penalty with reward.overlong_buffer.enable)")
        )
    if weights is not None:
        if len(weights) != len(keys):
            problems.append(
                f"algorithm.gdpo_reward_weights: {len(weights)} weights for "
                f"{len(keys)} gdpo_reward_keys; give one per key, in the same order"
            )
        elif not all(math.isfinite(w) for w in weights):
            problems.append(f"algorithm.gdpo_reward_weights: {weights}: weights must be finite")
    if shaped and "overlong_penalty" not in keys:
        problems.append(
            "reward.overlong_buffer.enable: gdpo's advantage is made of the components in "
            "algorithm.gdpo_reward_keys only, so the overlong penalty would be ignored; add "
            "overlong_penalty to gdpo_reward_keys, or disable the buffer"
        )
    if alg.use_kl_in_reward:
        problems.append(
            "algorithm.use_kl_in_reward: gdpo's advantage is made of the reward components "
            "only, so an in-reward KL penalty would be ignored; use algorithm.use_kl_loss=true"
        )
    return problems


def _unless_installed(package: str, version: str) -> str | None:
    """None when ``package`` is installed at ``version``; else what is ("is not installed", "is
    X here") for the message that asks for it."""
    try:
        installed = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "is not installed"
    return None if installed == version else f"is {installed} here"


def _megatron(config: ReasoningConfig) -> list[str]:
    """What the Megatron backend does not do (yet), and whether it is installed. Its GPU side
    (CUDA devices; the tensor-parallel size against the processes) is checked with the plan."""
    users = [
        name
        for name, sect in (("actor", config.actor), ("critic", config.critic))
        if sect.training_backend == "megatron"
    ]
    if not users:
        return []
    name, model = users[0], config.actor.model
    problems = []
    have = _unless_installed("megatron-core", MEGATRON_VERSION)
    if have:
        problems.append(
            f"{name}.training_backend: megatron needs megatron-core=={MEGATRON_VERSION} (pip "
            f"install -e '.[megatron]'), and it {have}; or use training_backend torch or fsdp2"
        )
    unbuilt = [
        ("actor.model.lora.rank", model.lora.rank > 0, "LoRA adapters"),
        (
            "actor.model.use_remove_padding",
            model.use_remove_padding,
            "packed sequences (Megatron packs through Transformer Engine's THD format)",
        ),
        (
            "actor.model.gradient_checkpointing",
            model.gradient_checkpointing,
            "activation recomputation",
        ),
        (
            "actor.model.share_group_prompts",  # the actor's passes only: not the critic's
            model.share_group_prompts and config.actor.training_backend == "megatron",
            "a pass on top of kept keys and values",
        ),
    ]
    for key_path, on, what in unbuilt:
        if on:
            problems.append(
                f"{key_path}: set, but {name}.training_backend is megatron, and {what} under "
                f"Megatron is not built yet; use training_backend torch or fsdp2 for it, or "
                f"turn {key_path.rsplit('.', 1)[1]} off"
            )
    if len(users) == 2 and config.actor.megatron != config.critic.megatron:
        problems.append(
            "critic.megatron: its tensor_parallel_size / pipeline_parallel_size differ from the "
            "actor's; Megatron keeps one model-parallel layout per process, and actor and critic "
            "may share processes: give both the same sizes"
        )
    return problems


def _share_group_prompts(config: ReasoningConfig) -> list[str]:
    """``actor.model.share_group_prompts`` needs groups, keys and values kept across two passes
    (transformers keeps none under gradient checkpointing) and unpacked rows."""
    model, group = config.actor.model, config.algorithm.group_size
    if not model.share_group_prompts:
        return []
    key = "actor.model.share_group_prompts"
    problems = []
    if group == 1:
        problems.append(
            f"{key}: set, but algorithm.group_size is 1: each prompt has one "
            "response, so there is nothing to share; turn it off, or sample "
            "groups"
        )
    if model.use_remove_padding:
        problems.append(
            f"{key}: set together with actor.model.use_remove_padding; packing lays "
            "whole sequences end to end, sharing passes responses on top of their "
            "prompt: pick one"
        )
    if model.gradient_checkpointing:
        problems.append(
            f"{key}: set together with actor.model.gradient_checkpointing, under "
            "which transformers keeps no keys and values to pass the responses on "
            "top of; turn one off"
        )
    return problems


def _rollout_engine(config: ReasoningConfig) -> list[str]:
    """What the chosen generation engine can do, and whether it is installed. The GPU side
    (sglang needs CUDA; its tensor parallel size against the placement) is checked with the
    plan (rlcore/placement/checks.py)."""
    rollout = config.rollout
    if rollout.backend == "hf":
        problems = []
        if rollout.tensor_parallel_size > 1:
            problems.append(
                f"rollout.tensor_parallel_size: {rollout.tensor_parallel_size}, but the hf "
                "engine runs each rollout rank on one device; set it to 1 (more rollout ranks "
                "in cluster.component_placement give more throughput), or use "
                "rollout.backend=sglang"
            )
        if rollout.gpu_memory_utilization is not None:
            problems.append(
                "rollout.gpu_memory_utilization: only an sglang engine reserves a share of the "
                "GPU (the hf engine allocates as it goes); remove it or use "
                "rollout.backend=sglang"
            )
        return problems
    problems = []
    have = _unless_installed("sglang", SGLANG_VERSION)
    if have:
        problems.append(
            f"rollout.backend: sglang needs sglang=={SGLANG_VERSION} (the gpu extra: pip install "
            f"-e '.[gpu]' on a GPU machine), and it {have}; or use rollout.backend=hf. Note: "
            "this project has tested its SGLang adapter only against a fake engine with "
            f"sglang {SGLANG_VERSION}'s signatures, not on hardware"
        )
    if config.actor.model.lora.rank > 0:
        problems.append(
            "rollout.backend: sglang with actor.model.lora: the adapter syncs whole weights "
            "only; merge-free LoRA sync to sglang is not built; use rollout.backend=hf with LoRA"
        )
    return problems
