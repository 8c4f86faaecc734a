"""The rollout component: generates responses to prompts. A backend interface with an ``hf``
engine (transformers ``generate``), shaped so an SGLang engine fits next: prompts go in as token
ids, responses come out as token ids with their mask; the sampler's log-probs are not returned,
because the loss uses the actor's recomputed ones (``old_log_probs``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch

from rlcore.config.schema import ReasoningConfig
from rlcore.models.lm import load_causal_lm, load_tokenizer
from rlcore.workers.lm_batch import Batch, micro_batches, position_ids, response_mask


class RolloutBackend(Protocol):
    """What the runner needs of a generation engine."""

    def generate(self, prompts: Batch, *, greedy: bool) -> Batch:
        """``prompts`` holds ``input_ids`` / ``attention_mask`` ``[B, P]`` (left-padded); the
        result is a full batch (see ``lm_batch``) with responses padded to
        ``data.max_response_length``."""
        ...

    def weights(self) -> dict[str, torch.Tensor]:
        """The tensors the actor's weights are synced into, by name."""
        ...


class HFRollout:
    """``generate`` from transformers on the component's device.

    ``model``: when given (rollout fused with the actor in one process), the actor's own module
    is used, so there is nothing to sync.
    """

    def __init__(
        self, ctx: Any, config: ReasoningConfig, model_dir: Path, model: Any = None
    ) -> None:
        self.config = config
        self.device = ctx.torch_device if ctx is not None else torch.device("cpu")
        if ctx is not None:  # its own process: its own sampling seed
            torch.set_num_threads(config.runner.torch_threads)
            torch.manual_seed(config.runner.seed + 7919 * (ctx.rank + 1))
        self.tokenizer = load_tokenizer(model_dir)
        self.model = (
            model if model is not None else load_causal_lm(model_dir, config.actor.model.dtype)
        )
        self.model.to(self.device)
        eos = self.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id not in eos:
            eos.append(self.tokenizer.eos_token_id)
        self.eos_ids = eos

    def weights(self) -> dict[str, torch.Tensor]:
        return dict(self.model.state_dict())

    def rng_state(self) -> torch.Tensor:
        """The sampler's RNG state, for checkpoints of runs where the rollout has a process."""
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor) -> None:
        torch.set_rng_state(state)

    def _generation_config(self, greedy: bool) -> Any:
        from transformers import GenerationConfig

        r = self.config.rollout
        options: dict[str, Any] = {"do_sample": False}
        if not greedy:
            options = {"do_sample": True, "temperature": r.temperature, "top_p": r.top_p,
                       "top_k": r.top_k or None}  # fmt: skip
        return GenerationConfig(
            max_new_tokens=self.config.data.max_response_length,
            eos_token_id=self.eos_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            use_cache=True,
            **options,
        )

    @torch.no_grad()
    def generate(self, prompts: Batch, *, greedy: bool) -> Batch:
        size = self.config.rollout.micro_batch_size or len(prompts["input_ids"])
        was_training = self.model.training
        self.model.eval()
        try:
            parts = [self._generate(part, greedy) for part in micro_batches(prompts, size)]
        finally:
            self.model.train(was_training)
        return {name: torch.cat([p[name] for p in parts]) for name in parts[0]}

    def _generate(self, prompts: Batch, greedy: bool) -> Batch:
        ids = prompts["input_ids"].to(self.device)
        mask = prompts["attention_mask"].to(self.device)
        out = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=self._generation_config(greedy),
        )
        width = self.config.data.max_response_length
        responses = out[:, ids.shape[1] :]
        if responses.shape[1] < width:  # every row ended early: pad to the fixed width
            pad = responses.new_full(
                (len(responses), width - responses.shape[1]), self.tokenizer.pad_token_id
            )
            responses = torch.cat([responses, pad], dim=1)
        resp_mask = response_mask(responses, self.eos_ids)
        responses = torch.where(resp_mask.bool(), responses, self.tokenizer.pad_token_id)
        attention = torch.cat([mask, resp_mask], dim=1)
        return {
            "input_ids": torch.cat([ids, responses], dim=1).cpu(),
            "attention_mask": attention.cpu(),
            "position_ids": position_ids(attention).cpu(),
            "responses": responses.cpu(),
            "response_mask": resp_mask.cpu(),
        }


def make_rollout(ctx: Any, config: ReasoningConfig, model_dir: Path, model: Any = None) -> Any:
    """The engine ``rollout.backend`` names."""
    if config.rollout.backend == "hf":
        return HFRollout(ctx, config, model_dir, model)
    raise NotImplementedError(
        "rollout.backend: sglang is not built yet (a later issue adds it); use hf"
    )
