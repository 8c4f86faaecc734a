"""Turn a plain dict (what Hydra composed) into a typed config, or say exactly what is wrong.

Problems are collected, not raised one by one, so a user fixes a bad config in one go; each
problem is one line that names the full key path.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from rlcore.config.derived import is_derived
from rlcore.config.errors import ConfigError
from rlcore.config.fields import REQUIRED, default_of, frozen
from rlcore.config.foreign.near_misses import FOREIGN_KEYS
from rlcore.config.foreign.unmapped import FOREIGN_KEY_SECTIONS, in_foreign_section, no_counterpart
from rlcore.config.schema import SCHEMAS
from rlcore.did_you_mean import closest


class _Invalid(Exception):
    """A value that cannot be used; the message is the problem."""


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, evaluated once per schema class (a config's validation
    asked it of every section, each time: a fifth of a load's CPU). Not to be changed."""
    return typing.get_type_hints(cls)


def schema_paths(cls: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """Every key of ``cls`` as ``(dotted path, field, type)``, sections included, depth first
    (the ``derived`` section is not keys: nothing sets it)."""
    hints = _hints(cls)
    for field in dataclasses.fields(cls):
        if is_derived(field):
            continue
        path = f"{prefix}{field.name}"
        tp = hints[field.name]
        yield path, field, tp
        if dataclasses.is_dataclass(tp):
            yield from schema_paths(tp, prefix=f"{path}.")


def schema_defaults(cls: type) -> dict[str, Any]:
    """Every key's default in ``cls`` by dotted path, as a config holds it, each section's own
    defaults applied (``section(defaults=)``); required keys are left out."""
    return dict(_schema_defaults(cls))  # (the values are frozen: the copy is the caller's)


@functools.cache
def _schema_defaults(cls: type) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def visit(section: type, prefix: str, defaults: dict[str, Any]) -> None:
        hints = _hints(section)
        for field in dataclasses.fields(section):
            if is_derived(field):
                continue
            path, tp = f"{prefix}{field.name}", hints[field.name]
            if dataclasses.is_dataclass(tp):
                visit(tp, f"{path}.", field.metadata.get("defaults", {}))
                continue
            value = default_of(field, defaults)
            if value is not REQUIRED:
                found[path] = frozen(value)

    visit(cls, "", {})
    return found


def build_config(raw: Mapping[str, Any]) -> Any:
    """Validate ``raw`` against the schema its ``mode`` names; the typed, frozen config, all
    defaults in (its ``derived`` section not yet: ``derive_keys``).

    Raises ``ConfigError`` listing every unknown, missing or mistyped key.
    """
    mode = raw.get("mode")
    if mode not in SCHEMAS:
        hint = "" if mode is None else f" (got {mode!r})"
        raise ConfigError(f"mode: must be one of {', '.join(SCHEMAS)}{hint}")
    schema = SCHEMAS[mode]
    problems: list[str] = []
    config = _build(schema, raw, "", _Context(schema, mode, problems))
    if problems:
        raise ConfigError("\n".join(problems))
    return config


@dataclasses.dataclass
class _Context:
    schema: type
    mode: str
    problems: list[str]

    def unknown_key(self, path: str, value: Any) -> list[str]:
        """One problem per unknown leaf under a foreign section, else one for ``path``."""
        foreign_leaf = in_foreign_section(path)
        if foreign_leaf is not None:
            if isinstance(value, Mapping) and value:
                return [
                    p
                    for name, item in value.items()
                    for p in self.unknown_key(f"{path}.{name}", item)
                ]
            return [foreign_leaf]
        valid = [p for p, _, _ in schema_paths(self.schema)]
        if path in FOREIGN_KEYS:
            return [f"{path}: unknown key; rlcore calls it '{FOREIGN_KEYS[path]}'"]
        other_modes = [m for m, s in SCHEMAS.items() if m != self.mode]
        for other in other_modes:
            if path in {p for p, _, _ in schema_paths(SCHEMAS[other])}:
                return [f"{path}: unknown key in mode {self.mode} (it belongs to mode {other})"]
        foreign = path in FOREIGN_KEY_SECTIONS and path not in valid
        if foreign and isinstance(value, Mapping) and value:
            return [
                p for name, item in value.items() for p in self.unknown_key(f"{path}.{name}", item)
            ]
        unmapped = no_counterpart(path)
        if unmapped is not None:
            return [unmapped]
        match = closest(path, valid)
        hint = f"; did you mean '{match[0]}'?" if match else ""
        return [f"{path}: unknown key{hint}"]


def _build(
    cls: type, data: Any, prefix: str, ctx: _Context, defaults: Mapping[str, Any] | None = None
) -> Any:
    """The frozen section ``cls`` from ``data``, every key converted and range-checked, each
    missing one at its default here (``defaults``: the section's own, ``section(defaults=)``)."""
    where = prefix[:-1] or "the config"
    if not isinstance(data, Mapping):
        ctx.problems.append(f"{where}: expected a section of keys, got {data!r}")
        return None
    problems_before = len(ctx.problems)
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not is_derived(f)}
    derived = {f.name for f in dataclasses.fields(cls) if is_derived(f)}
    for name in data:
        if name in derived:
            if data[name] is not None:  # (a config's dict, its derived values left out: None)
                ctx.problems.append(
                    f"{prefix}{name}: values that follow from the keys, computed when a config is "
                    "validated (rlcore config prints them); remove the section"
                )
        elif name not in fields:
            ctx.problems += ctx.unknown_key(f"{prefix}{name}", data[name])
    values: dict[str, Any] = {}
    for name, field in fields.items():
        path, tp = f"{prefix}{name}", hints[name]
        if dataclasses.is_dataclass(tp):
            own = field.metadata.get("defaults")
            values[name] = _build(tp, data.get(name, {}), f"{path}.", ctx, own)
            continue
        default = default_of(field, defaults)
        if name not in data:
            if default is REQUIRED:
                doc = field.metadata.get("doc", "")
                ctx.problems.append(f"{path}: missing required key ({doc})")
            else:
                values[name] = frozen(default)
            continue
        try:
            values[name] = frozen(
                _expand_user(field, _convert(tp, _one_path(field, tp, data[name])))
            )
            _check_range(field, values[name], tp)
        except _Invalid as problem:
            ctx.problems.append(f"{path}: {problem}")
            continue
        _check_read_in_mode(field, values[name], frozen(default), path, ctx)
    if len(ctx.problems) > problems_before:
        return None  # the caller raises with every problem recorded
    built = cls(**values)
    for name, field in fields.items():  # sections set in a mode that does not read them
        if dataclasses.is_dataclass(hints[name]) and "modes" in field.metadata:
            default = default_of(field, defaults)
            _check_read_in_mode(field, values[name], default, f"{prefix}{name}", ctx)
    return built


def _check_read_in_mode(
    field: dataclasses.Field, value: Any, default: Any, path: str, ctx: _Context
) -> None:
    """A key that this mode does not read must keep its default: set, it would promise what
    nothing does."""
    modes = field.metadata.get("modes")
    if modes is None or ctx.mode in modes or value == default:
        return
    shown = "its defaults" if dataclasses.is_dataclass(default) else _as_yaml(default)
    ctx.problems.append(
        f"{path}: not read in {ctx.mode} mode (only in {', '.join(modes)} mode); remove it "
        f"or leave it at {shown}"
    )


def _as_yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, tuple):
        return "[" + ", ".join(_as_yaml(item) for item in value) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _check_range(field: dataclasses.Field, value: Any, tp: Any) -> None:
    """A number (each item of a list of numbers) must lie in the key's declared range."""
    accepted = field.metadata.get("range")
    if accepted is None or value is None:
        return
    nullable = type(None) in typing.get_args(tp)
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(item, str):  # (a number key's named choice: solved_threshold's env)
            continue
        if item not in accepted:
            what = "every item" if isinstance(value, (list, tuple)) else "it"
            null = ", or null" if nullable else ""
            raise _Invalid(f"{item!r} is out of range: {what} must be {accepted.text()}{null}")


def describe_type(tp: Any) -> str:
    """A schema type in words, as error messages and the key reference show it."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        parts = [describe_type(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is dict:
        return f"a mapping of names to {describe_type(typing.get_args(tp)[1])}"
    if origin is list:
        item = describe_type(typing.get_args(tp)[0]).removeprefix("an ").removeprefix("a ")
        return f"a list of {item}s"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return {**names, Any: "any value"}.get(tp, getattr(tp, "__name__", str(tp)))


def _one_path(field: dataclasses.Field, tp: Any, value: Any) -> Any:
    """A list-of-paths key given one path (``data.train_files=train.parquet``, as verl's command
    lines write it): a list of that one."""
    if field.metadata.get("path") and typing.get_origin(tp) is list and isinstance(value, str):
        return [value]
    return value


def _expand_user(field: dataclasses.Field, value: Any) -> Any:
    """A path key's value (or list of them) with a leading ``~`` expanded (``key(path=True)``)."""
    if not field.metadata.get("path"):
        return value
    if isinstance(value, list | tuple):
        return [os.path.expanduser(v) if isinstance(v, str) else v for v in value]
    return os.path.expanduser(value) if isinstance(value, str) else value


def _convert_union(tp: Any, value: Any) -> Any:
    """``value`` as the first alternative of the union ``tp`` that takes it."""
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    alternatives = [arg for arg in args if arg is not type(None)]
    if len(alternatives) == 1 and typing.get_origin(alternatives[0]) in (dict, Literal):
        return _convert(alternatives[0], value)  # its message names the entry, or the choice
    for arg in alternatives:
        try:
            return _convert(arg, value)
        except _Invalid:
            pass
    raise _Invalid(f"expected {describe_type(tp)}, got {value!r}")


def _convert_dict(tp: Any, value: Any) -> dict:
    """``value`` as the mapping ``tp``, each entry converted (a problem names its key)."""
    key_type, value_type = typing.get_args(tp)
    if not isinstance(value, Mapping):
        raise _Invalid(f"expected {describe_type(tp)}, got {value!r}")
    converted = {}
    for name, item in value.items():
        if not isinstance(name, key_type):
            raise _Invalid(f"key {name!r} must be {describe_type(key_type)}")
        try:
            converted[name] = _convert(value_type, item)
        except _Invalid as problem:
            raise _Invalid(f"{name}: {problem}") from None
    return converted


def _convert_list(tp: Any, value: Any) -> list:
    """``value`` as the list ``tp``, each item converted (a problem names its index)."""
    if not isinstance(value, (list, tuple)):
        raise _Invalid(f"expected {describe_type(tp)}, got {value!r}")
    (item_type,) = typing.get_args(tp)
    items = []
    for i, item in enumerate(value):
        try:
            items.append(_convert(item_type, item))
        except _Invalid as problem:
            raise _Invalid(f"item {i}: {problem}") from None
    return items


def _convert(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _convert_union(tp, value)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value in choices and type(value) is type(choices[0]):
            return value
        near = closest(str(value), [str(c) for c in choices])
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        raise _Invalid(f"{value!r} is not {describe_type(tp)}{hint}")
    if origin is dict:
        return _convert_dict(tp, value)
    if origin is list:
        return _convert_list(tp, value)
    if tp is Any:  # (plain data as YAML and Hydra give it: any value is taken as it is)
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        raise TypeError(f"schema type {tp!r} is not supported by the validator")
    raise _Invalid(f"expected {describe_type(tp)}, got {value!r} ({type(value).__name__})")
