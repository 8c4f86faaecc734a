"""Cross-field checks: combinations of individually valid keys that cannot work together, by
concern: the algorithm (``algorithm.py``), backends and engines (``backends.py``), the reasoning
features (``reasoning.py``), the run and its sizes (``run.py``).

Each check returns problems as one-line strings that name the keys and the fix; they run after
the per-key validation and the derived values (``rlcore/config/derived.py``), before any process
starts.
"""

from __future__ import annotations

from rlcore.config.checks.algorithm import check_algorithm
from rlcore.config.checks.backends import check_backends, component_sections
from rlcore.config.checks.reasoning import check_reasoning
from rlcore.config.checks.run import check_cluster, check_embodied, check_runner
from rlcore.config.derived import derive_keys
from rlcore.config.errors import ConfigError
from rlcore.config.schema import EmbodiedConfig, RLCoreConfig

__all__ = ["check_config", "component_sections"]


def check_config(config: RLCoreConfig) -> RLCoreConfig:
    """``config`` with its derived values (``derive_keys``); ``ConfigError`` listing every
    cross-field problem."""
    config, problems = derive_keys(config)
    problems += check_algorithm(config.algorithm, config.mode)
    problems += check_backends(config)
    problems += check_runner(config)
    problems += check_cluster(config)
    if isinstance(config, EmbodiedConfig):
        problems += check_embodied(config)
    else:
        problems += check_reasoning(config)
    if problems:
        raise ConfigError("\n".join(problems))
    return config
