"""Package exports imported on first use, for packages whose submodules must load lightly (a
worker process importing ``rlcore.scheduler.worker``, a scoring process importing
``rlcore.rewards.verdicts``): importing a submodule runs its package's ``__init__`` first."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: each name in ``where`` is imported from its
    module the first time it is asked for."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        return getattr(importlib.import_module(where[name]), name)

    return __getattr__
