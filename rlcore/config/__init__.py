"""rlcore.config: the typed, validated config (schema, per-key and cross-field checks, loading).

Worker processes import ``rlcore.config.errors`` (a component's bad input is a ``ConfigError``),
and importing a submodule runs this file first; so the exports below load on first use, keeping
Hydra, the schema and the algorithm library out of a worker that does not need them (1.2 s of
imports, measured, in a worker hosting a component that imports nothing of its own).
"""

from rlcore.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "composition": ("CONFIG_DIR", "config_names"),
        "schema": (
            "AlgorithmConfig",
            "EmbodiedConfig",
            "KLCtrlConfig",
            "RLCoreConfig",
            "ReasoningConfig",
            "UpdateConfig",
        ),
        "errors": ("ConfigError",),
        "validate": ("build_config", "schema_paths"),
        "load": ("compose_raw", "load_config", "replace_keys", "validate_config"),
    },
)
