"""Checks of where and how components compute: group names, training backends and their
sections (FSDP2, Megatron-core), the generation engine, and what each does not do yet. Their GPU
side (CUDA devices, parallel sizes against the processes) is checked with the placement plan
(rlcore/placement/checks.py)."""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any

from rlcore.config.schema import EmbodiedConfig, ReasoningConfig, RLCoreConfig
from rlcore.config.schema_reasoning import MEGATRON_VERSION, SGLANG_VERSION


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


def check_backends(config: RLCoreConfig) -> list[str]:
    """Group names (RLinf's ``group_name``) and training backends of the component sections;
    in reasoning mode, the Megatron backend, LoRA's backends and the generation engine."""
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
    if isinstance(config, ReasoningConfig):
        problems += _megatron(config) + _lora(config) + _rollout_engine(config)
        problems += _judge_engine(config)
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
    name, problems = users[0], []
    have = _unless_installed("megatron-core", MEGATRON_VERSION)
    if have:
        problems.append(
            f"{name}.training_backend: megatron needs megatron-core=={MEGATRON_VERSION} (pip "
            f"install -e '.[megatron]'), and it {have}; or use training_backend torch or fsdp2"
        )
    for key_path, on, what in _not_built_under_megatron(config):
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


def _not_built_under_megatron(config: ReasoningConfig) -> list[tuple[str, bool, str]]:
    """``(key, whether it is set, the feature)`` of each feature the Megatron backend does not
    do yet."""
    model = config.actor.model
    return [
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
        (
            "actor.model.use_fused_kernels",  # the actor's passes only
            model.use_fused_kernels and config.actor.training_backend == "megatron",
            "log-probs from the last hidden states and the LM head",
        ),
        (
            "actor.use_torch_compile",
            config.actor.use_torch_compile and config.actor.training_backend == "megatron",
            "compiling transformers' decoder layers (Megatron's model is its own)",
        ),
        (
            "critic.use_torch_compile",
            config.critic.use_torch_compile and config.critic.training_backend == "megatron",
            "compiling transformers' decoder layers (Megatron's model is its own)",
        ),
    ]


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


def _judge_engine(config: ReasoningConfig) -> list[str]:
    """``reward.judge.backend: sglang`` needs sglang installed (its GPU side is checked with the
    plan)."""
    if config.reward.judge.backend != "sglang":
        return []
    have = _unless_installed("sglang", SGLANG_VERSION)
    if not have:
        return []
    return [
        f"reward.judge.backend: sglang needs sglang=={SGLANG_VERSION} (the gpu extra: pip "
        f"install -e '.[gpu]' on a GPU machine), and it {have}; or use reward.judge.backend=hf"
    ]


def _lora(config: ReasoningConfig) -> list[str]:
    lora = config.actor.model.lora
    sharded = [
        name
        for name, sect in (("actor", config.actor), ("critic", config.critic))
        if sect.training_backend == "fsdp2"
    ]
    if not lora.rank or not sharded:
        return []
    return [
        f"actor.model.lora.rank: {lora.rank}, but {sharded[0]}.training_backend is fsdp2, and "
        "LoRA under FSDP2 is not built yet; use training_backend torch with LoRA (the frozen "
        "base needs no sharded optimiser state), or lora.rank 0"
    ]
