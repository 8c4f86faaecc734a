"""Checks of the mixture-of-experts keys (issue 53): routing replay where the rollout can record
the routings and the training passes can replay them, the tiny model's experts."""

from __future__ import annotations

from rlcore.config.schema import ReasoningConfig


def check_moe(config: ReasoningConfig) -> list[str]:
    problems = []
    tiny = config.actor.model.tiny
    if config.actor.model.path is None and tiny.experts_per_token > tiny.num_experts > 0:
        problems.append(
            f"actor.model.tiny.experts_per_token: {tiny.experts_per_token}, more than "
            f"actor.model.tiny.num_experts {tiny.num_experts}; route to at most that many"
        )
    if tiny.num_experts and config.actor.model.path is None:
        for who, section in (("actor", config.actor), ("critic", config.critic)):
            if section.training_backend == "megatron":
                problems.append(
                    f"{who}.training_backend: megatron converts dense Qwen2/Llama models only; "
                    "the tiny mixture-of-experts model (actor.model.tiny.num_experts) trains on "
                    "the torch or fsdp2 backend"
                )
    if not config.rollout.routing_replay:
        return problems
    if config.actor.model.path is None and not tiny.num_experts:
        problems.append(
            "rollout.routing_replay: the tiny model is dense (actor.model.tiny.num_experts 0): "
            "there are no routings to replay; set actor.model.tiny.num_experts, or "
            "rollout.routing_replay=false"
        )
    rollout, actor = config.rollout, config.actor
    refused = (
        ("rollout.backend", rollout.backend != "hf", f"{rollout.backend} (records no routings)"),
        ("rollout.hf.static_cache", rollout.hf.static_cache, "true (its decode loop records none)"),
        ("rollout.tools / rollout.interaction", rollout.multi_turn, "multi-turn trajectories"),
        ("rollout.partial_rollout", rollout.partial_rollout, "true (segments not recorded)"),
        (
            "actor.model.gradient_checkpointing",
            actor.model.gradient_checkpointing,
            "true (the backward pass would recompute each layer with the router's own choice)",
        ),
        (
            "actor.training_backend",
            actor.training_backend == "megatron",
            "megatron (its MoE layers have routers of their own)",
        ),
    )
    for key, on, what in refused:
        if on:
            problems.append(
                f"rollout.routing_replay: not built with {key} {what}; set "
                "rollout.routing_replay=false, or change that key"
            )
    return problems


def check_sequence_parallel(config: ReasoningConfig) -> list[str]:
    """Ulysses sequence parallelism where it is built: packed passes on the torch and fsdp2
    backends, none of the passes that compute otherwise."""
    problems = []
    model, rollout = config.actor.model, config.rollout
    for who, section in (("actor", config.actor), ("critic", config.critic)):
        size = section.ulysses_sequence_parallel_size
        if size == 1:
            continue
        key = f"{who}.ulysses_sequence_parallel_size"
        refused = (
            (
                "actor.model.use_remove_padding",
                not model.use_remove_padding,
                "false (it splits packed rows)",
            ),
            (
                f"{who}.training_backend",
                section.training_backend == "megatron",
                "megatron (its own context parallelism is not mapped)",
            ),
            ("actor.model.use_fused_kernels", model.use_fused_kernels, "true"),
            ("actor.model.share_group_prompts", model.share_group_prompts, "true"),
            ("actor.model.gradient_checkpointing", model.gradient_checkpointing, "true"),
            ("rollout.routing_replay", rollout.routing_replay, "true"),
            (
                "actor.model.tiny.num_experts",
                model.path is None and model.tiny.num_experts > 0,
                f"{model.tiny.num_experts} (a mixture of experts' load-balancing loss is not "
                "split)",
            ),
            (
                "algorithm.adv_type",
                config.algorithm.adv_type.endswith("optimal_token_baseline"),
                f"{config.algorithm.adv_type} (its sum of squared probabilities is not split)",
            ),
        )
        problems += [
            f"{key}: {size}, not built with {name} {what}; set {key}=1, or change that key"
            for name, on, what in refused
            if on
        ]
    return problems
