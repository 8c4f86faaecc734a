"""A Python file of the user's, named by a key (``reward.rules.custom_fn``, ``env.id``), imported as
a module, and a user's class named ``module:Class`` or ``path/to/file.py:Class`` (``rollout.tools``,
``actor.model.cls``); what goes wrong is a ``ConfigError`` naming the key and the file, in one
line."""

from __future__ import annotations

import importlib
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


def load_user_class(
    entry: str, key: str, kinds: str = "module:Class", base: type = object, what: str = "class"
) -> type:
    """``module:Class`` or ``path/to/file.py:Class`` -> the class it names, a subclass of
    ``base``; ``kinds``: how the error names the accepted forms, ``what``: the class wanted."""
    path, sep, name = entry.rpartition(":")
    if not sep or not path or not name:
        raise ConfigError(f"{key}: '{entry}' is not {kinds} or 'path/to/file.py:Class'")
    file = Path(path).expanduser()
    if path.endswith(".py") or file.is_file():
        if not file.is_file():
            raise ConfigError(f"{key}: {path} does not exist")
        module = import_user_file(file, f"rlcore_user_{file.stem}", key, path)
    else:
        try:
            module = importlib.import_module(path)
        except Exception as error:  # any import failure: name the entry
            raise ConfigError(
                f"{key}: cannot import {path}: {type(error).__name__}: {error}"
            ) from None
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{key}: {path} defines no {what} '{name}'")
    return cls
