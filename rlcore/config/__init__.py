"""rlcore.config: the typed, validated config (schema, per-key and cross-field checks, loading).

Worker processes import ``rlcore.config.errors`` (a component's bad input is a ``ConfigError``),
and importing a submodule runs this file first; so the exports below load on first use, keeping
Hydra, the schema and the algorithm library out of a worker that does not need them (1.2 s of
imports, measured, in a worker hosting a component that imports nothing of its own).
"""

from rlcore.lazy import lazy_exports

_EXPORTS = {
    "CONFIG_DIR": "rlcore.config.composition",
    "AlgorithmConfig": "rlcore.config.schema",
    "ConfigError": "rlcore.config.errors",
    "EmbodiedConfig": "rlcore.config.schema",
    "KLCtrlConfig": "rlcore.config.schema",
    "RLCoreConfig": "rlcore.config.schema",
    "ReasoningConfig": "rlcore.config.schema",
    "UpdateConfig": "rlcore.config.schema",
    "build_config": "rlcore.config.validate",
    "compose_raw": "rlcore.config.load",
    "config_names": "rlcore.config.composition",
    "load_config": "rlcore.config.load",
    "replace_keys": "rlcore.config.load",
    "schema_paths": "rlcore.config.validate",
    "validate_config": "rlcore.config.load",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports("rlcore.config", _EXPORTS)
