"""A Python file of the user's, named by a key (``reward.custom_fn``, ``env.id``), imported as a
module; what goes wrong is a ``ConfigError`` naming the key and the file, in one line."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from rlcore.config.errors import ConfigError


def import_user_file(
    file: Path,
    module_name: str,
    key: str,
    shown: str | Path,
    keep: bool = False,
    error: type[ConfigError] = ConfigError,
) -> ModuleType:
    """``file`` run as the module ``module_name``; ``keep``: registered in ``sys.modules`` (its
    objects pickle by reference) and, once imported, reused. Errors (``error``) read
    ``KEY: SHOWN cannot be ...``."""
    if keep and module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise error(f"{key}: {shown} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    if keep:
        sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a syntax error, a failing import: the user's file, not rlcore
        if keep:
            del sys.modules[module_name]
        line = getattr(exc, "lineno", None)
        at = f" (line {line})" if line else ""
        what = f"{type(exc).__name__}: {getattr(exc, 'msg', exc)}{at}"
        raise error(f"{key}: {shown} cannot be loaded: {what}") from None
    return module
