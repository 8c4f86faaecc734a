"""The agent loop of a multi-turn rollout (``rollout.tools``, ``rollout.interaction``;
docs/agents.md), run by the rollout's engine (hf or sglang) for every batch it generates.

All trajectories of a batch advance together, one batched generation per turn: each model turn
runs to the model's end-of-turn token (or the response budget); the turn's tool calls
(``rlcore.tools.calls``) run in the tool processes, all of the batch's at once
(``rlcore.tools.pool``), and their answers are appended as tool messages rendered by the chat
template (``TurnRenderer``); a turn without a call ends the trajectory, unless an interaction
replies as the user. A trajectory also ends at ``rollout.max_turns`` model turns or when its
response reaches ``data.max_response_length`` tokens.

The response of a trajectory is every token after the prompt: model turns and tool (or user)
messages. ``response_mask`` covers all of them, ``loss_mask`` the model's own tokens only: the
losses, log-probs, values, KL, advantages and their metrics read ``loss_mask``; tool tokens are
context. The engine gives ``sample`` (``HFEngine._turn``, ``SGLangEngine.turn``); on hf each
turn is a new prefill of the whole context (transformers' ``generate`` keeps no cache across
calls with different padding), on sglang the radix cache keeps the shared prefix.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.columns import ANSWERS, ATTENTION_MASK, INPUT_IDS, TRAJECTORIES
from rlcore.data.sequences import joined_layout
from rlcore.tools.calls import CallParser
from rlcore.tools.pool import ToolPool

# sample(contexts, max_new_tokens) -> per context: the new tokens (up to and including the
# first end-of-turn token) and, when recorded, their log-probs
Sampler = Callable[[list[list[int]], int], tuple[list[list[int]], list[list[float]] | None]]

# what the renderer puts the new messages after: a user turn and a model turn
BASE = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]


class TurnRenderer:
    """The tokens that follow a model turn for tool answers or a user reply, rendered by the
    tokenizer's chat template: what the template writes after ``[user, assistant]`` for the new
    messages (and the generation prompt), with whatever it puts after the model's end-of-turn
    token (Qwen's newline). Tool answers go in as role ``tool`` where the template renders that
    role, else as one user message of ``<tool_response>`` blocks; without a template, as text."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.template = getattr(tokenizer, "chat_template", None) is not None
        self.tool_role = False
        if self.template:
            self.base = tokenizer.apply_chat_template(BASE, tokenize=False)
            # a template renders the tool role when the probe shows, not as an assistant turn
            probe = "\x00probe"
            as_tool = self._render([{"role": "tool", "content": probe}], safe=True)
            as_model = self._render([{"role": "assistant", "content": probe}], safe=True)
            self.tool_role = probe in as_tool and as_tool != as_model

    def _render(self, messages: list[dict[str, str]], safe: bool = False) -> str:
        """What the template writes after ``BASE`` for ``messages`` and the generation prompt
        (``safe``: "" where it cannot)."""
        try:
            full = self.tokenizer.apply_chat_template(
                BASE + messages, tokenize=False, add_generation_prompt=True
            )
        except Exception:  # a template that raises on a role it does not know
            if safe:
                return ""
            raise
        if not full.startswith(self.base):
            if safe:
                return ""
            raise ValueError(
                "the chat template writes the earlier turns differently once "
                f"{[m['role'] for m in messages]} messages follow them, so the new messages "
                "cannot be appended to a trajectory"
            )
        return full[len(self.base) :]

    def tokens(self, messages: list[dict[str, str]], end_token: int) -> list[int]:
        """``messages`` (role ``tool`` or ``user``) after a turn that ended with ``end_token``."""
        if any(m["role"] == "tool" for m in messages) and not self.tool_role:
            blocks = "\n".join(
                f"<tool_response>\n{m['content']}\n</tool_response>" for m in messages
            )
            messages = [{"role": "user", "content": blocks}]
        if not self.template:
            text = "\n" + "\n".join(m["content"] for m in messages) + "\n"
        else:
            end = self.tokenizer.decode([end_token])
            glue = self.base[self.base.rfind(end) + len(end) :] if end and end in self.base else ""
            text = glue + self._render(messages)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


class AgentLoop:
    """See the module docstring."""

    def __init__(self, config: Any, tokenizer: Any, eos_ids: list[int]) -> None:
        rollout = config.rollout
        self.tokenizer, self.eos_ids = tokenizer, set(eos_ids)
        self.max_turns, self.width = rollout.max_turns, config.data.max_response_length
        self.parser = CallParser(rollout.tool_call_regex)
        self.render = TurnRenderer(tokenizer)
        self.interactive = rollout.interaction is not None
        self.pool = ToolPool(
            tuple(rollout.tools),
            rollout.interaction,
            rollout.tool_processes,
            rollout.tool_timeout_s,
        )

    def close(self) -> None:
        self.pool.close()

    def run(self, prompts: TensorDict, sample: Sampler, log_probs: bool) -> TensorDict:
        """``prompts`` (left-padded ``input_ids`` / ``attention_mask``, ``answers``) -> the
        batch ``RolloutBackend.generate`` describes, with ``loss_mask`` and ``trajectories``
        (one dict per row: turns, calls, errors, how it stopped, the messages)."""
        ids, mask = prompts[INPUT_IDS], prompts[ATTENTION_MASK]
        heads = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
        answers = prompts[ANSWERS].tolist() if ANSWERS in prompts else [""] * len(heads)
        rows = [_Trajectory() for _ in heads]
        for _ in range(self.max_turns):
            active = [i for i, row in enumerate(rows) if row.stop is None]
            if not active:
                break
            budget = max(self.width - len(rows[i].tokens) for i in active)
            new, logps = sample([heads[i] + rows[i].tokens for i in active], budget)
            calls_of: dict[int, list] = {}
            replies: list[int] = []
            for k, i in enumerate(active):
                row = rows[i]
                room = self.width - len(row.tokens)
                turn = new[k][:room]
                row.add(turn, logps[k][:room] if logps is not None else None, trained=True)
                row.turns += 1
                if not turn or turn[-1] not in self.eos_ids:  # the budget ended the turn
                    row.stop = "token_limit"
                    continue
                text = self.tokenizer.decode(turn[:-1], skip_special_tokens=False)
                row.messages.append({"role": "assistant", "content": text})
                calls = self.parser.parse(text)
                if not calls:
                    if self.interactive and row.turns < self.max_turns:
                        replies.append(i)
                    else:
                        row.stop = "answer"
                    continue
                row.record_calls(calls)
                if row.turns >= self.max_turns:
                    row.stop = "turn_limit"  # (the last turn's calls are not run)
                    continue
                calls_of[i] = calls
            self._run_calls(rows, calls_of)
            self._ask_interaction(rows, replies, answers)
        for row in rows:
            if row.stop is None:
                row.stop = "turn_limit"
        return self._batch(prompts, rows, log_probs)

    def _run_calls(self, rows: list[_Trajectory], calls_of: dict[int, list]) -> None:
        if not calls_of:
            return
        flat = [(i, call) for i, calls in calls_of.items() for call in calls]
        start = time.perf_counter()
        results = self.pool.call([call for _, call in flat])
        share = (time.perf_counter() - start) / len(calls_of)
        by_row: dict[int, list] = {i: [] for i in calls_of}
        for (i, call), result in zip(flat, results, strict=True):
            by_row[i].append((call, result))
        for i, answered in by_row.items():
            row = rows[i]
            row.tool_s += share
            for call, result in answered:
                row.record_result(call, result)
            messages = [
                {"role": "tool", "name": call.name or "error", "content": result.text}
                for call, result in answered
            ]
            row.messages += messages
            self._append_context(row, messages)

    def _ask_interaction(self, rows: list[_Trajectory], at: list[int], answers: list) -> None:
        if not at:
            return
        replies = self.pool.respond([(rows[i].messages, str(answers[i])) for i in at])
        for i, reply in zip(at, replies, strict=True):
            row = rows[i]
            if reply is None:
                row.stop = "answer"
                continue
            message = {"role": "user", "content": reply}
            row.messages.append(message)
            row.interactions += 1
            self._append_context(row, [message])

    def _append_context(self, row: _Trajectory, messages: list[dict[str, str]]) -> None:
        """Tool or user tokens after the row's last turn, cut at the budget (which then ends
        the trajectory)."""
        tokens = self.render.tokens(messages, row.tokens[-1])
        room = self.width - len(row.tokens)
        row.add(tokens[:room], None, trained=False)
        if len(tokens) >= room:
            row.stop = "token_limit"

    def _batch(self, prompts: TensorDict, rows: list[_Trajectory], log_probs: bool) -> TensorDict:
        pad = self.tokenizer.pad_token_id
        size = len(rows)
        responses = torch.full((size, self.width), pad, dtype=torch.long)
        response_mask = torch.zeros((size, self.width), dtype=torch.long)
        loss_mask = torch.zeros((size, self.width), dtype=torch.long)
        logp = torch.zeros((size, self.width))
        for i, row in enumerate(rows):
            n = len(row.tokens)
            responses[i, :n] = torch.tensor(row.tokens, dtype=torch.long)
            response_mask[i, :n] = 1
            loss_mask[i, :n] = torch.tensor(row.trained, dtype=torch.long)
            logp[i, :n] = torch.tensor(row.logps)
        out = joined_layout(
            prompts[INPUT_IDS],
            prompts[ATTENTION_MASK],
            responses,
            response_mask,
            loss_mask,
            logp if log_probs else None,
        )
        batch = TensorDict(out, batch_size=[size])
        batch[TRAJECTORIES] = NonTensorStack(*[row.summary() for row in rows])
        return batch


class _Trajectory:
    """One row's response so far and what happened in it."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.trained: list[int] = []  # 1: the model's token
        self.logps: list[float] = []
        self.messages: list[dict[str, str]] = []
        self.calls: list[dict[str, Any]] = []
        self.turns = self.interactions = 0
        self.malformed = self.errors = self.timeouts = 0
        self.tool_s = 0.0
        self.stop: str | None = None

    def add(self, tokens: list[int], logps: list[float] | None, trained: bool) -> None:
        self.tokens += tokens
        self.trained += [int(trained)] * len(tokens)
        self.logps += logps if logps is not None else [0.0] * len(tokens)

    def record_calls(self, calls: list) -> None:
        self.malformed += sum(call.error is not None for call in calls)

    def record_result(self, call: Any, result: Any) -> None:
        self.errors += result.error and call.error is None
        self.timeouts += result.timed_out
        self.calls.append(
            {
                "name": call.name,
                "arguments": json.loads(json.dumps(call.arguments, default=str)),
                "malformed": call.error is not None,
                "error": result.error,
                "timed_out": result.timed_out,
            }
        )

    def summary(self) -> dict[str, Any]:
        return {
            "turns": self.turns,
            "calls": self.calls,
            "malformed_calls": self.malformed,
            "tool_errors": self.errors,
            "tool_timeouts": self.timeouts,
            "interactions": self.interactions,
            "stop": self.stop,
            "tool_s": self.tool_s,
            "messages": self.messages,
        }
