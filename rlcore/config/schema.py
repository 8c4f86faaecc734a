"""The config schema: every key rlcore reads, declared once, with its type, default and doc.

The top level is one of ``EmbodiedConfig`` / ``ReasoningConfig``, picked by ``mode``. Both share
the sections of ``sections.py``: ``AlgorithmConfig`` (RLinf's names, ``adv_type``,
``clip_ratio_*``, with verl's KL options), one ``runner`` and one ``optim`` section with each
use's defaults, the cluster, sync and loggers. Each top level ends with ``derived``, the values
that follow from the keys (``derived.py``). docs/config.md maps every verl and RLinf seed option
onto these keys. This module gathers every schema class in one namespace.
"""

from __future__ import annotations

from rlcore.config.derived import Derived
from rlcore.config.schema_embodied import (
    ActorModelConfig,
    EmbodiedActorConfig,
    EmbodiedConfig,
    EnvConfig,
)
from rlcore.config.schema_reasoning import ReasoningConfig
from rlcore.config.sections import (
    AlgorithmConfig,
    ClusterConfig,
    KLCtrlConfig,
    LoggerConfig,
    OptimConfig,
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
    "Derived",
    "EmbodiedActorConfig",
    "EmbodiedConfig",
    "EnvConfig",
    "KLCtrlConfig",
    "LoggerConfig",
    "OptimConfig",
    "RLCoreConfig",
    "ReasoningConfig",
    "RunnerConfig",
    "UpdateConfig",
]
