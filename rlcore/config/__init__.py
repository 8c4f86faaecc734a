"""rlcore.config: the typed, validated config (schema, per-key and cross-field checks, loading)."""

from rlcore.config.errors import ConfigError
from rlcore.config.load import CONFIG_DIR, compose_raw, config_names, load_config, validate_config
from rlcore.config.schema import (
    AlgorithmConfig,
    EmbodiedConfig,
    KLCtrlConfig,
    ReasoningConfig,
    RLCoreConfig,
    UpdateConfig,
)
from rlcore.config.validate import build_config, schema_paths

__all__ = [
    "CONFIG_DIR",
    "AlgorithmConfig",
    "ConfigError",
    "EmbodiedConfig",
    "KLCtrlConfig",
    "RLCoreConfig",
    "ReasoningConfig",
    "UpdateConfig",
    "build_config",
    "compose_raw",
    "config_names",
    "load_config",
    "schema_paths",
    "validate_config",
]
