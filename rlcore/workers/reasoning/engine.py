"""What the rollout worker needs of a generation engine (``RolloutBackend``), and the one
``generate`` both engines share: the hf engine (rlcore/workers/reasoning/rollout.py) and SGLang's
(rlcore/workers/reasoning/sglang_engine.py) subclass it and supply one turn's generation."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

import torch
from tensordict import TensorDict

from rlcore.columns import PIXEL_VALUES
from rlcore.workers.reasoning.agent_loop import AgentLoop, Sampler


class RolloutBackend(Protocol):
    """What the rollout needs of a generation engine. An engine subclasses it for ``generate``:
    a multi-turn rollout runs through the engine's ``agent``, which samples each turn with the
    engine's ``sampler``, and a one-turn one is the engine's ``generate_rows``; both inside its
    ``generating()``."""

    device: torch.device
    pushes_weights: bool  # its weights live outside this process: a sync pushes them (sglang)
    released: bool  # its memory is given back (release_memory) until resume_memory
    agent: AgentLoop | None  # rollout.tools / rollout.interaction: multi-turn trajectories

    @torch.no_grad()
    def generate(
        self,
        prompts: TensorDict,
        *,
        greedy: bool,
        validation: bool = False,
        log_probs: bool = False,
    ) -> TensorDict:
        """Sampled as ``rollout.temperature`` / ``top_p`` / ``top_k`` say (``validation``:
        ``rollout.val_temperature`` / ``val_top_p`` / ``val_top_k``), unless ``greedy``.
        ``prompts`` holds ``input_ids`` / ``attention_mask`` ``[B, P]`` (left-padded); the
        result holds ``input_ids`` / ``attention_mask`` / ``position_ids`` ``[B, P + R]`` and
        ``responses`` / ``response_mask`` ``[B, R]``, R = ``data.max_response_length``; with
        ``log_probs``, also ``rollout_log_probs`` ``[B, R]``: each sampled token's log-prob at
        the temperature, over the whole vocabulary (top-p/top-k not applied), as the actor
        computes old log-probs."""
        with self.generating():
            if self.agent is None:
                return self.generate_rows(prompts, greedy, validation, log_probs)
            if PIXEL_VALUES in prompts:  # (its turns pass token ids alone)
                raise NotImplementedError(
                    "rollout.tools / rollout.interaction: prompts with images"
                )
            return self.agent.run(prompts, self.sampler(greedy, validation, log_probs), log_probs)

    def generating(self) -> AbstractContextManager[None]:
        """Held around each ``generate``."""
        ...

    def generate_rows(
        self, prompts: TensorDict, greedy: bool, validation: bool, log_probs: bool
    ) -> TensorDict:
        """``generate`` without an agent loop: one response to each prompt."""
        ...

    def sampler(self, greedy: bool, validation: bool, log_probs: bool) -> Sampler:
        """The agent loop's ``sample`` at these settings: each context's new tokens (a prompt
        and the trajectory so far; up to a budget), up to and including its first end-of-turn
        token, and their log-probs when ``log_probs``."""
        ...

    def weights(self) -> dict[str, torch.Tensor]:
        """The tensors the actor's weights are synced into, by name (``hf``)."""
        ...

    def release_memory(self) -> None:
        """Give back GPU memory while the actor trains (a collocated engine that can)."""
        ...

    def resume_memory(self) -> None:
        """Take it back before the next sync (the engine's weights must then be synced)."""
        ...
