"""The embodied-mode schema: policies acting in simulators (gymnasium, MuJoCo, ManiSkill)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rlcore.config.derived import Derived, derived_section
from rlcore.config.fields import REQUIRED, key, section
from rlcore.config.schema_reasoning import LoraConfig, TinyLMConfig
from rlcore.config.sections import (
    EMBODIED_OPTIM,
    ActorKeys,
    AlgorithmConfig,
    ClusterConfig,
    GroupKeys,
    LoggerConfig,
    OptimConfig,
    RunnerConfig,
    SyncConfig,
    UpdateConfig,
)


@dataclass(kw_only=True, frozen=True)
class TinyVisionConfig:
    image_size: int | None = key(
        None,
        doc="the square side, in pixels, the env's image is resized to before the tiny vision "
        "tower; null = the image's larger side",
        range=">= 1",
    )
    patch_size: int = key(
        4,
        doc="the tiny vision tower's square patch (it must divide image_size): (image_size / "
        "patch_size)^2 image tokens enter the LM",
        range=">= 1",
    )


@dataclass(kw_only=True, frozen=True)
class EmbodiedLMConfig:
    path: str | None = key(
        None,
        doc="a local Hugging Face causal-LM folder (or a hub id, as actor.model.path in "
        "reasoning) whose backbone becomes the policy; null = a tiny Qwen2-architecture LM "
        "built here (actor.model.lm.tiny) with a character-level tokenizer",
        path=True,
    )
    action_bins: int = key(
        32,
        doc="action tokens per action dimension, the vocabulary's last ones (RT-2/OpenVLA): a "
        "Discrete space's actions (at most this many), or a Box dimension's bins over [low, "
        "high], decoded to the bins' centres",
        range=">= 2",
    )
    tiny: TinyLMConfig = section(
        TinyLMConfig,
        doc="the tiny LM built when path is null",
        defaults={"hidden_size": 64, "intermediate_size": 256},
    )
    vision: TinyVisionConfig = section(
        TinyVisionConfig,
        doc="the tiny vision tower (CLIP architecture, the tiny LM's width, heads and layers, "
        "LLaVA-style projection) built when path is null and the env observes an image; a "
        "model folder brings its own vision encoder",
    )
    lora: LoraConfig = section(
        LoraConfig,
        doc="LoRA adapters (peft) on the LM's layers: with rank > 0 the LM's own weights stay "
        "frozen and the adapters, the state projection and the value head train",
    )


@dataclass(kw_only=True, frozen=True)
class ActorModelConfig:
    type: Literal["actor_critic", "lm"] = key(
        "actor_critic",
        doc="actor_critic: the built-in MLP/CNN actor-critic (or actor.model.cls); lm: a causal "
        "LM policy (actor.model.lm) that reads the env's instruction and state and emits action "
        "tokens, with a value head on its last hidden state (docs/embodied.md)",
    )
    hidden_sizes: list[int] = key(
        factory=lambda: [64, 64], doc="widths of the MLP trunk", range=">= 1"
    )
    activation: Literal["tanh", "relu"] = key("tanh", doc="activation of the MLP trunk")
    shared_backbone: bool = key(
        True, doc="policy and value heads share one trunk; false gives each its own"
    )
    ortho_init: bool = key(True, doc="orthogonal init (gain sqrt 2; 0.01 policy, 1 value head)")
    log_std_init: float = key(
        0.0, doc="initial log-std of Gaussian policies (Box actions)", range="any"
    )
    cls: str | None = key(
        None,
        doc="a policy class of your own, 'module:Class' or 'path/to/file.py:Class': a "
        "torch.nn.Module built as cls(observation_space, action_space) whose forward(obs) "
        "returns (a torch.distributions.Distribution over the actions, [B] values) "
        "(docs/embodied.md); null = the built-in MLP/CNN actor-critic above",
    )
    lm: EmbodiedLMConfig = section(EmbodiedLMConfig, doc="the LM policy (type: lm)")


@dataclass(kw_only=True, frozen=True)
class EmbodiedActorConfig(UpdateConfig, ActorKeys):
    model: ActorModelConfig = section(ActorModelConfig, doc="the policy network")
    optim: OptimConfig = section(
        OptimConfig, doc="the optimiser and its schedule", defaults=EMBODIED_OPTIM
    )


@dataclass(kw_only=True, frozen=True)
class EmbodiedRolloutConfig(GroupKeys):
    micro_batch_size: int | None = key(
        None,
        doc="observations per policy forward while acting, on one rank (RLinf's "
        "rollout_micro_batch_size); null = all of the rank's envs at once",
        range=">= 1",
    )
    pipeline_stage_num: int = key(
        1,
        doc="split each env rank's envs into this many stages, stepped in turn, so that the "
        "env process steps one stage while the rollout acts on the next (RLinf's pipelining; "
        "env and rollout must be in different processes); 1 = all envs step together",
        range=">= 1",
    )


@dataclass(kw_only=True, frozen=True)
class EnvConfig(GroupKeys):
    id: str = key(
        REQUIRED,
        doc="gymnasium id ('CartPole-v1'), a name from rlcore.envs.register_env, "
        "'module.path:ClassName' (importable: on PYTHONPATH), 'module.path:Id-v0' (an id the "
        "module registers with gymnasium.register, as gym.make reads it), or "
        "'path/to/file.py:ClassName' (relative to where the run starts)",
    )
    kwargs: dict[str, Any] = key(
        factory=dict,
        doc="arguments of the env's constructor: gym.make(id, **kwargs) for a gymnasium id "
        "(with gym.make's own max_episode_steps), Class(**kwargs) otherwise; e.g. "
        "{max_episode_steps: 200}, or ManiSkill's {obs_mode: state, control_mode: "
        "pd_ee_delta_pos, sim_backend: cpu}. Each name is checked against the constructor's "
        "signature where it has one (not **kwargs), before anything starts",
    )
    num_envs: int = key(8, doc="environments stepped in parallel", range=">= 1")
    vector_mode: Literal["auto", "native", "sync", "async"] = key(
        "auto",
        doc="native vector env if the env has one (auto), in-process copies, or subprocesses",
    )
    solved_threshold: float | Literal["env"] | None = key(
        "env",
        doc="eval return counted as solved (time_to_threshold_s, runner.stop_at_threshold): a "
        "number; env = the env's own spec.reward_threshold (a gymnasium id that declares one, "
        "such as CartPole-v1's 475), none for an env without; null = none",
        range="any",
    )
    normalize_obs: bool = key(False, doc="feed the policy running-normalised observations")
    normalize_reward: bool = key(
        False, doc="train on rewards divided by the running std of the discounted return"
    )
    clip_obs: float = key(10.0, doc="normalised observations are clipped to ± this", range="> 0")
    clip_reward: float = key(10.0, doc="scaled rewards are clipped to ± this", range="> 0")
    step_timeout_s: float | None = key(
        None,
        doc="seconds one vector step may take; past it the run ends with an error naming the "
        "env and the step, instead of hanging on an env that blocks; null = no limit for envs "
        "in the driver's process, 300 for envs in their own processes (placed apart, or "
        "vector_mode async). A step stuck in C code that holds the GIL (which the timer "
        "cannot interrupt) ends its process by a watchdog once the limit plus max(5 s, the "
        "limit) has passed: the driver names it in one line (in the driver's own process too: a "
        "watcher process says it once the process ends)",
        range="> 0",
    )
    checkpoint_state: Literal["reseed", "pickle"] = key(
        "reseed",
        doc="what a checkpoint keeps of the envs: reseed = nothing that runs code on load (a "
        "resumed run resets its envs with a new seed and starts fresh episodes, so it is not "
        "bit-exact); pickle = the envs themselves (bit-exact resume, but loading runs pickled "
        "code: only load such a checkpoint from a trusted source)",
    )


@dataclass(kw_only=True, frozen=True)
class EmbodiedConfig:
    mode: Literal["embodied"] = key(REQUIRED, doc="embodied: policies acting in simulators")
    algorithm: AlgorithmConfig = section(AlgorithmConfig, doc="RL algorithm (both modes)")
    actor: EmbodiedActorConfig = section(EmbodiedActorConfig, doc="policy training")
    rollout: EmbodiedRolloutConfig = section(EmbodiedRolloutConfig, doc="acting in the envs")
    env: EnvConfig = section(EnvConfig, doc="the environment")
    runner: RunnerConfig = section(RunnerConfig, doc="the training loop")
    logger: LoggerConfig = section(LoggerConfig, doc="where metrics go")
    cluster: ClusterConfig = section(ClusterConfig, doc="machines and component placement")
    sync: SyncConfig = section(SyncConfig, doc="weight sync from the actor to the rollout")
    derived: Derived | None = derived_section()
