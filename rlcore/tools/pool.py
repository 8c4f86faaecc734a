"""``ToolPool``: the rollout's tool calls (and an interaction's replies) run in
``rollout.tool_processes`` processes, each call under ``rollout.tool_timeout_s``
(``rlcore.procpool.DeadlinePool``, the reward scoring pool's mechanism): a call that raises, has
arguments its schema refuses, names no tool, runs past its deadline or kills its process
answers the model with an error text, and is counted; the run goes on.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.procpool import DeadlinePool, PoolFailed, serve_items
from rlcore.tools.calls import Call


@dataclass(frozen=True)
class ToolResult:
    """What the model reads back, and how the call ended."""

    text: str
    error: bool = False
    timed_out: bool = False


def serve(conn: Any, setup: tuple[tuple[str, ...], str | None]) -> None:
    """A tool process (``rlcore.procpool``'s protocol): ``(index, "call", name, arguments)`` or
    ``(index, "respond", messages, answer)`` in, ``(index, (ok, text))`` out."""
    entries, interaction_entry = setup

    def load() -> tuple[dict[str, Any], Any, dict[str, Any]]:
        import jsonschema

        from rlcore.tools.protocol import load_interaction, load_tools

        tools = load_tools(entries)
        interaction = load_interaction(interaction_entry) if interaction_entry else None
        validators = {n: jsonschema.Draft202012Validator(t.parameters) for n, t in tools.items()}
        return tools, interaction, validators

    serve_items(conn, load, _answer)


def _answer(loaded: tuple, index: int, item: tuple) -> tuple[bool, str | None]:
    tools, interaction, validators = loaded
    kind, first, second = item
    try:
        if kind == "respond":
            reply = interaction.respond(first, second)
            if reply is not None and not isinstance(reply, str):
                raise TypeError(f"respond returned {type(reply).__name__}, not str or None")
            return True, reply
        tool = tools.get(first)
        if tool is None:
            return False, f"unknown tool '{first}'; the tools are: {', '.join(sorted(tools))}"
        problem = next(iter(validators[first].iter_errors(second)), None)
        if problem is not None:
            return False, f"bad arguments for {first}: {problem.message}"
        text = tool.call(second)
        return True, text if isinstance(text, str) else str(text)
    except Exception as error:
        detail = f"{type(error).__name__}: {error}"
        if kind == "respond":
            detail += "\n" + traceback.format_exc(limit=-2)
        return False, detail


class ToolPool:
    """See the module docstring. ``interaction``: ``rollout.interaction``'s entry, or None."""

    def __init__(
        self, entries: tuple[str, ...], interaction: str | None, processes: int, timeout_s: float
    ) -> None:
        self.timeout_s = timeout_s
        self.pool = DeadlinePool(serve, (tuple(entries), interaction), processes, timeout_s)

    def _run(self, items: list[tuple]) -> list[Any]:
        try:
            return self.pool.run(items)
        except PoolFailed as error:
            raise ConfigError(f"rollout.tools: a tool process failed to start: {error}") from None

    def call(self, calls: list[Call]) -> list[ToolResult]:
        """One result per call, in order; malformed calls are answered without running."""
        todo = [i for i, call in enumerate(calls) if call.error is None]
        outcomes = self._run([("call", calls[i].name, calls[i].arguments) for i in todo])
        results = [
            ToolResult(f"error: malformed tool call: {call.error}", error=True) for call in calls
        ]
        for i, outcome in zip(todo, outcomes, strict=True):
            if outcome.kind == "timeout":
                text = f"error: {calls[i].name} took over {self.timeout_s:g} s and was stopped"
                results[i] = ToolResult(text, error=True, timed_out=True)
            elif outcome.kind == "died":
                results[i] = ToolResult(f"error: {calls[i].name} crashed ({outcome.result})", True)
            else:
                ok, text = outcome.result
                results[i] = ToolResult(text if ok else f"error: {text}", error=not ok)
        return results

    def respond(self, conversations: list[tuple[list[dict], str]]) -> list[str | None]:
        """The interaction's reply to each ``(messages, answer)``; ``ConfigError`` when it
        fails (a broken interaction is the user's code: the run stops naming it)."""
        outcomes = self._run([("respond", messages, answer) for messages, answer in conversations])
        replies = []
        for outcome in outcomes:
            if outcome.kind != "ok" or not outcome.result[0]:
                why = (
                    outcome.result[1]
                    if outcome.kind == "ok"
                    else f"{outcome.kind} ({outcome.result or f'over {self.timeout_s:g} s'})"
                )
                raise ConfigError(f"rollout.interaction: respond failed: {why}")
            replies.append(outcome.result[1])
        return replies

    def close(self) -> None:
        self.pool.close()
