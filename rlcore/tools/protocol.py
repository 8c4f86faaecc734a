"""The tool protocol users write against, and loading ``rollout.tools`` entries.

A tool is a class built with no arguments, with attributes ``name: str``, ``description: str``
and ``parameters: dict`` (a JSON schema of its arguments, ``{"type": "object", ...}``, as in
OpenAI-style function calling) and a method ``call(self, arguments: dict) -> str``. A call that
raises returns the error to the model as text and is counted as a tool error.

Entries are ``module:Class`` or ``path/to/file.py:Class`` (the forms of ``reward.rules.custom_fn``);
``calculator`` and ``python`` name the built-ins. An interaction (``rollout.interaction``, verl's
term) is a class built with no arguments with ``respond(self, messages: list[dict], answer: str)
-> str | None``: the user's next message after a model turn without a tool call, None to end.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rlcore.config.errors import ConfigError

BUILT_INS = {
    "calculator": "rlcore.tools.calculator:Calculator",
    "python": "rlcore.tools.python:PythonInterpreter",
}
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def load_class(entry: str, key: str) -> type:
    """``module:Class``, ``file.py:Class`` or a built-in's name -> the class; a ``ConfigError``
    naming ``key`` otherwise."""
    from rlcore.config.user_files import load_user_class

    kinds = f"'module:Class', one of {sorted(BUILT_INS)}"
    return load_user_class(BUILT_INS.get(entry, entry), key, kinds)


def build(entry: str, key: str) -> Any:
    """The instance of ``entry``'s class, built with no arguments."""
    cls = load_class(entry, key)
    try:
        return cls()
    except Exception as error:
        raise ConfigError(
            f"{key}: {entry} must be built with no arguments; {cls.__name__}() raised "
            f"{type(error).__name__}: {error}"
        ) from None


def check_tool(tool: Any, entry: str, key: str = "rollout.tools") -> None:
    """One line naming ``entry`` and what it lacks, when ``tool`` breaks the protocol."""
    where = f"{key}: {entry}"
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigError(
            f"{where}: 'name' must be a string of letters, digits, _ . - (got {name!r})"
        )
    if not isinstance(getattr(tool, "description", None), str):
        raise ConfigError(f"{where}: 'description' must be a string")
    parameters = getattr(tool, "parameters", None)
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise ConfigError(
            f'{where}: \'parameters\' must be a JSON schema dict with "type": "object"'
        )
    try:
        json.dumps(parameters)
        import jsonschema

        jsonschema.Draft202012Validator.check_schema(parameters)
    except Exception as error:
        message = str(error).splitlines()[0]
        raise ConfigError(f"{where}: 'parameters' is not a valid JSON schema: {message}") from None
    if not callable(getattr(tool, "call", None)):
        raise ConfigError(f"{where}: no method call(self, arguments: dict) -> str")


def load_tools(entries: list[str] | tuple[str, ...], key: str = "rollout.tools") -> dict[str, Any]:
    """The tools of ``entries`` by name, each checked; duplicate names refused."""
    tools: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for entry in entries:
        tool = build(entry, key)
        check_tool(tool, entry, key)
        if tool.name in tools:
            raise ConfigError(
                f"{key}: {entry} and {origin[tool.name]} are both named '{tool.name}'; tool "
                "names must differ"
            )
        tools[tool.name], origin[tool.name] = tool, entry
    return tools


def load_interaction(entry: str, key: str = "rollout.interaction") -> Any:
    """The interaction of ``entry``, checked."""
    interaction = build(entry, key)
    if not callable(getattr(interaction, "respond", None)):
        raise ConfigError(
            f"{key}: {entry} has no method respond(self, messages: list[dict], answer: str) "
            "-> str | None"
        )
    return interaction


def schema(tool: Any) -> dict[str, Any]:
    """The OpenAI-style function schema a chat template renders (``tools=[...]``)."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }
