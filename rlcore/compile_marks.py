"""tensordict without torch's compiler at import: the compiler marks it sets are kept and applied
the moment ``torch._dynamo`` loads.

At import, ``tensordict`` marks some of its functions for ``torch.compile`` through
``torch.compiler.allow_in_graph`` and ``torch.compiler.assume_constant_result``; both import
``torch._dynamo`` to do so, about 1 CPU-second in every process that unpickles a batch (each Ray
component, each spawned rank, each CLI run), although rlcore never compiles. While ``tensordict``
imports, these two functions record what they are given instead; the records are applied, in
order, by an import hook right after ``torch._dynamo`` is first imported (by ``torch.compile`` or
anything else), so a compiled program sees every mark, as if nothing had been deferred. Where
``torch._dynamo`` is already loaded when ``tensordict`` imports, nothing is deferred.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

_MARKS = ("allow_in_graph", "assume_constant_result")
_deferred: list[tuple[str, Any]] = []


def install() -> None:
    """Put the two import hooks in front of ``sys.meta_path`` (once per process)."""
    if not any(isinstance(f, _Hooks) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hooks())


def deferred_marks() -> list[tuple[str, Any]]:
    """The marks recorded and not yet applied (empty once ``torch._dynamo`` has loaded)."""
    return list(_deferred)


def _recorder(mark: str, real: Callable[[Any], Any]) -> Callable[[Any], Any]:
    # tensordict may bind the recorder by name (``from torch.compiler import ...``) and call it
    # later: once ``torch._dynamo`` is loaded, the mark is applied at once.
    def record(fn: Any) -> Any:
        if "torch._dynamo" in sys.modules:
            return real(fn)
        _deferred.append((mark, fn))
        return fn

    return record


def _apply_deferred() -> None:
    import torch.compiler

    while _deferred:
        mark, fn = _deferred.pop(0)
        getattr(torch.compiler, mark)(fn)


class _Hooks(importlib.abc.MetaPathFinder):
    """Wraps the loading of ``tensordict`` (marks recorded) and ``torch._dynamo`` (marks
    applied); every other import passes through untouched."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in ("tensordict", "torch._dynamo"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _Wrapped(spec.loader, fullname)
        return spec


class _Wrapped(importlib.abc.Loader):
    def __init__(self, loader: Any, fullname: str) -> None:
        self.loader = loader
        self.fullname = fullname

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if self.fullname == "torch._dynamo":
            self.loader.exec_module(module)
            _apply_deferred()
            return
        if "torch._dynamo" in sys.modules:
            self.loader.exec_module(module)
            return
        import torch.compiler

        saved = {mark: getattr(torch.compiler, mark) for mark in _MARKS}
        for mark in _MARKS:
            setattr(torch.compiler, mark, _recorder(mark, saved[mark]))
        try:
            self.loader.exec_module(module)
        finally:
            for mark, fn in saved.items():
                setattr(torch.compiler, mark, fn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
