"""Finding tool calls in a model's turn: the Hermes / Qwen format of chat templates that have
one (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``), or ``rollout.tool_call_regex``
(named groups ``name`` and ``arguments``, the arguments a JSON object) for other models.

A call that cannot be read (broken JSON, no name, arguments that are not an object, an opening
tag never closed, a tag inside a tag) is a ``Call`` with ``error`` set: the model is told what
was wrong, as a tool answer, and the run counts it as a malformed call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # set for a call that could not be read


def _call_from(name: Any, arguments: Any, raw: str) -> Call:
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return Call("", error=f"arguments are not JSON: {raw[:200]!r}")
    if not isinstance(name, str) or not name:
        return Call("", error=f"a tool call needs a 'name' string: {raw[:200]!r}")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return Call(name, error=f"'arguments' must be a JSON object: {raw[:200]!r}")
    return Call(name, arguments)


def hermes_calls(text: str) -> list[Call]:
    """Every ``<tool_call>...</tool_call>`` of ``text`` in order (see the module docstring)."""
    calls: list[Call] = []
    position = 0
    while True:
        start = text.find(OPEN, position)
        if start < 0:
            break
        end = text.find(CLOSE, start + len(OPEN))
        body = text[start + len(OPEN) : end if end >= 0 else len(text)]
        if end < 0:
            calls.append(Call("", error=f"{OPEN} is never closed by {CLOSE}"))
            break
        position = end + len(CLOSE)
        if OPEN in body:
            calls.append(Call("", error=f"a {OPEN} inside another one"))
            continue
        raw = body.strip()
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as error:
            calls.append(Call("", error=f"not JSON ({error.msg}): {raw[:200]!r}"))
            continue
        if not isinstance(data, dict):
            calls.append(Call("", error=f"a tool call must be a JSON object: {raw[:200]!r}"))
            continue
        calls.append(_call_from(data.get("name"), data.get("arguments"), raw))
    return calls


class CallParser:
    """``parse(text)`` -> the calls of one model turn, by the Hermes format or a regex."""

    def __init__(self, regex: str | None = None) -> None:
        self.regex = re.compile(regex, re.DOTALL) if regex else None

    def parse(self, text: str) -> list[Call]:
        if self.regex is None:
            return hermes_calls(text)
        calls = []
        for match in self.regex.finditer(text):
            raw = match.group(0)
            try:
                arguments = json.loads(match.group("arguments") or "{}")
            except json.JSONDecodeError as error:
                calls.append(Call("", error=f"arguments are not JSON ({error.msg}): {raw[:200]!r}"))
                continue
            calls.append(_call_from(match.group("name"), arguments, raw))
        return calls
