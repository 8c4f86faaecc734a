"""The config schema: every key rlcore reads, declared once, with its type, default and doc.

The top level is one of ``EmbodiedConfig`` / ``ReasoningConfig``, picked by ``mode``. Both share
the sections of ``sections.py`` (``AlgorithmConfig``, whose names follow RLinf (``adv_type``,
``loss_type``, ``clip_ratio_*``) with verl's KL options); docs/config.md maps every verl and RLinf
seed option onto these keys. This module gathers every schema class in one namespace.
"""

from __future__ import annotations

from rlcore.config.schema_embodied import (
    ActorModelConfig,
    EmbodiedActorConfig,
    EmbodiedConfig,
    EmbodiedRunnerConfig,
    EnvConfig,
    OptimConfig,
)
from rlcore.config.schema_reasoning import ReasoningConfig
from rlcore.config.sections import (
    AlgorithmConfig,
    ClusterConfig,
    KLCtrlConfig,
    LoggerConfig,
    RunnerConfig,
    UpdateConfig,
)

RLCoreConfig = EmbodiedConfig | ReasoningConfig
SCHEMAS: dict[str, type] = {"embodied": EmbodiedConfig, "reasoning": ReasoningConfig}

__all__ = [
    "SCHEMAS",
    "ActorModelConfig",
    "AlgorithmConfig",
    "ClusterConfig",
    "EmbodiedActorConfig",
    "EmbodiedConfig",
    "EmbodiedRunnerConfig",
    "EnvConfig",
    "KLCtrlConfig",
    "LoggerConfig",
    "OptimConfig",
    "RLCoreConfig",
    "ReasoningConfig",
    "RunnerConfig",
    "UpdateConfig",
]
