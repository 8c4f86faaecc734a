"""Package exports imported on first use, for packages whose submodules must load lightly (a
worker process importing ``rlcore.scheduler.worker``, a scoring process importing
``rlcore.rewards.verdicts``): importing a submodule runs its package's ``__init__`` first."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, names: Mapping[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], list[str]]:
    """The module ``__getattr__`` and ``__all__`` of ``package``, which exports ``names``
    (``{submodule: (name, ...)}``, the submodule relative to ``package``): each name is imported
    from its submodule the first time it is asked for."""
    where = {name: f"{package}.{module}" for module, exported in names.items() for name in exported}

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        return getattr(importlib.import_module(where[name]), name)

    return __getattr__, sorted(where)
