"""``rollout.backend: sglang``: SGLang's offline ``Engine`` behind ``RolloutBackend``.

The engine is started inside the rollout worker on the worker's GPUs (tensor parallel over all
of them: ``tp_size`` is the number of GPUs the placement gives the process), from the actor's
model folder, without its tokenizer (prompts go in as token ids, responses come out as ids).
Each call generates every row of the batch (the runner has already repeated each prompt
``group_size`` times, which SGLang's prefix cache shares) with the rollout's sampling
parameters; asked for, each sampled token's log-prob comes back, which SGLang computes at the
temperature over the whole vocabulary before top-p/top-k (its default, without
``SGLANG_RETURN_ORIGINAL_LOGPROB``), as the actor computes old log-probs.

Prompts with images go in as SGLang takes a Hugging Face processor's output (its
``processor_output`` image format): each request's token ids, whose image placeholders are
already repeated as the model's processor repeats them, and one item of its pixels (and
Qwen2-VL's grids), which SGLang does not process again. A logit bias keeps the placeholder
from being sampled, as the hf engine's ``NoPlaceholder`` does; whether SGLang's returned
log-probs see that bias is its own (the placeholder's share of the probability, which the
training passes count, vanishes either way).

Weights are pushed, not copied in place: the engine's parameters live in its own scheduler
processes. Every weight sync hands the engine one bucket at a time
(``update_weights_from_tensor``, which passes CUDA tensors to those processes by IPC), whatever
way the bucket reached this worker (in-process, collective, IPC, object store), then flushes the
prefix cache once, when the driver names the new weight version. A rollout that shares its GPUs
with the actor (collocated) starts with SGLang's memory saver and releases its weights and KV
cache while the actor trains (``release_memory``), taking them back before the next sync
(``resume_memory``).

Pinned to sglang 0.5.21 (the ``gpu`` extra). This path has not been run on hardware by this
project: sglang has no CPU build, and its wheels cannot reach the lent GPU machine. It is tested
against a fake engine whose methods have the real 0.5.21 ``Engine``'s signatures, read from that
release's source (tests/workers/sglang_api.py).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rlcore.columns import ATTENTION_MASK, IMAGE_COLUMNS, INPUT_IDS, PIXEL_VALUES
from rlcore.config.schema import ReasoningConfig
from rlcore.config.schema_reasoning import SGLANG_VERSION
from rlcore.data.sequences import generated_layout
from rlcore.models.forward import batch_images
from rlcore.models.lm import load_tokenizer
from rlcore.scheduler.worker import rank_seed
from rlcore.workers.reasoning.agent_loop import AgentLoop, Sampler
from rlcore.workers.reasoning.engine import RolloutBackend
from rlcore.workers.reasoning.sampling import sampling

Layout = list[tuple[str, tuple[int, ...], str, int]]
__all__ = ["SGLANG_VERSION", "SGLangEngine", "start_engine"]


NEVER = -1e9  # a logit bias that no logit outweighs: the token is never sampled


def start_engine(**server_args: Any) -> Any:
    """``sglang.Engine(**server_args)``; tests replace this function with a fake engine."""
    import sglang

    return sglang.Engine(**server_args)


class SGLangEngine(RolloutBackend):
    """See the module docstring. ``tp_size``: the GPUs of this process; ``collocated``: whether
    the actor trains on the same GPUs (then memory is released around training)."""

    pushes_weights = True

    def __init__(
        self,
        config: ReasoningConfig,
        model_dir: Path,
        device: torch.device,
        *,
        rank: int,
        tp_size: int,
        collocated: bool,
    ) -> None:
        self.config, self.device = config, device
        self.tokenizer = load_tokenizer(model_dir)
        self.model_dir = Path(model_dir)
        self.collocated = collocated
        self.eos_ids = eos_ids(self.model_dir, self.tokenizer)
        self.released = False
        self._layout: Layout | None = None
        share = config.rollout.gpu_memory_utilization
        self.engine = start_engine(
            **({} if share is None else {"mem_fraction_static": share}),  # else SGLang's own
            model_path=str(model_dir),
            tp_size=tp_size,
            dtype=config.actor.model.dtype,  # as the actor's weights, so a sync needs no cast
            skip_tokenizer_init=True,
            random_seed=rank_seed(config.runner.seed, rank, "sampling"),
            enable_memory_saver=collocated,
            base_gpu_id=0,  # the first GPU this process sees (CUDA_VISIBLE_DEVICES holds its own)
            log_level="error",
        )
        # rollout.tools / rollout.interaction: multi-turn trajectories (agent_loop.py); each
        # turn's context starts with the last one's, which SGLang's radix cache keeps
        self.agent = (
            AgentLoop(config, self.tokenizer, self.eos_ids) if config.rollout.multi_turn else None
        )

    # generation --------------------------------------------------------------------------------

    def sampling_params(self, greedy: bool, validation: bool = False) -> dict[str, Any]:
        params: dict[str, Any] = {
            "max_new_tokens": self.config.data.max_response_length,
            "stop_token_ids": list(self.eos_ids),
            "skip_special_tokens": False,
        }
        if greedy:
            return {**params, "temperature": 0.0}
        # Every option that shapes the distribution is given, so none comes from elsewhere (the
        # model folder's generation_config.json, which SGLang may apply to unset options).
        temperature, top_p, top_k = sampling(self.config, validation)
        return {
            **params,
            "temperature": temperature,
            "top_p": top_p,
            "top_k": top_k or -1,
            "min_p": 0.0,
            "repetition_penalty": 1.0,
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
        }

    @contextmanager
    def generating(self) -> Iterator[None]:
        if self.released:
            raise RuntimeError("the sglang engine's memory is released: resume_memory() first")
        yield

    def generate_rows(
        self, prompts: TensorDict, greedy: bool, validation: bool, log_probs: bool
    ) -> TensorDict:
        ids, mask = prompts[INPUT_IDS].cpu(), prompts[ATTENTION_MASK].cpu()
        requests = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
        params, images = self.sampling_params(greedy, validation), {}
        if PIXEL_VALUES in prompts:
            images = {"image_data": self._image_data(prompts.cpu(), requests)}
            # the placeholder is never sampled (as the hf engine's NoPlaceholder)
            params["logit_bias"] = {str(self.image_token): NEVER}
        outputs = self.engine.generate(
            input_ids=requests, sampling_params=params, return_logprob=log_probs, **images
        )
        width, pad = self.config.data.max_response_length, self.tokenizer.pad_token_id
        responses = torch.full((len(requests), width), pad, dtype=ids.dtype)
        logp = torch.zeros((len(requests), width))
        for i, out in enumerate(outputs):
            tokens = list(out["output_ids"])[:width]
            responses[i, : len(tokens)] = torch.tensor(tokens, dtype=ids.dtype)
            if log_probs:
                # (log-prob, token id, text): one per generated token, in order
                values = [entry[0] for entry in out["meta_info"]["output_token_logprobs"]]
                logp[i, : len(tokens)] = torch.tensor(values[: len(tokens)])
        generated = generated_layout(
            ids, mask, responses, self.eos_ids, pad, logp if log_probs else None
        )
        for key in IMAGE_COLUMNS:  # (every later pass reads the images too)
            if key in prompts:
                generated[key] = prompts[key]
        return TensorDict(generated, batch_size=[len(requests)])

    def _image_data(self, prompts: TensorDict, requests: list[list[int]]) -> list[list[Any]]:
        """Each request's images as SGLang takes a Hugging Face processor's output (its
        ``processor_output`` format: the request's token ids, the placeholders already repeated
        as the processor repeats them, beside the pixels and, for Qwen2-VL, the grids), one item
        a request covering all its images: SGLang's own processor is not run on them again."""
        out = []
        for row, request in enumerate(requests):
            inputs = batch_images(prompts, torch.tensor([row]))
            item = {"format": "processor_output", "input_ids": torch.tensor([request]), **inputs}
            out.append([item])
        return out

    @functools.cached_property
    def image_token(self) -> int:
        """The model's image placeholder (its config, read once)."""
        import json

        config = json.loads((self.model_dir / "config.json").read_text())
        return int(config.get("image_token_id", config.get("image_token_index")))

    def sampler(self, greedy: bool, validation: bool, log_probs: bool) -> Sampler:
        return functools.partial(
            self.turn, greedy=greedy, validation=validation, log_probs=log_probs
        )

    def turn(
        self,
        contexts: list[list[int]],
        budget: int,
        greedy: bool,
        validation: bool,
        log_probs: bool,
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """One turn of the agent loop: each context's new tokens, up to and including its first
        end-of-turn token (SGLang's ``output_ids`` hold the stop token), and their log-probs."""
        params = {**self.sampling_params(greedy, validation), "max_new_tokens": budget}
        outputs = self.engine.generate(
            input_ids=contexts, sampling_params=params, return_logprob=log_probs
        )
        tokens: list[list[int]] = []
        logps: list[list[float]] = []
        for out in outputs:
            ids = list(out["output_ids"])[:budget]
            ends = [i for i, token in enumerate(ids) if token in self.eos_ids]
            n = ends[0] + 1 if ends else len(ids)
            tokens.append(ids[:n])
            if log_probs:
                logps.append([entry[0] for entry in out["meta_info"]["output_token_logprobs"]][:n])
        return tokens, logps if log_probs else None

    # weights -----------------------------------------------------------------------------------

    def weight_layout(self) -> Layout:
        """``(name, shape, dtype, bytes)`` of the tensors a sync pushes, in name order: those of
        the actor's model class built from the folder's config on the meta device (no memory),
        in the actor's dtype; worked out once (every received bucket reads it)."""
        if self._layout is None:
            from transformers import AutoConfig, AutoModelForCausalLM

            from rlcore.scheduler.weight_buckets import layout

            model_config = AutoConfig.from_pretrained(self.model_dir, trust_remote_code=False)
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(
                    model_config, dtype=getattr(torch, self.config.actor.model.dtype)
                )
            self._layout = layout(dict(model.state_dict()))
        return self._layout

    def load_bucket(self, bucket: dict[str, torch.Tensor]) -> None:
        """One bucket of the actor's weights into the engine (the cache is flushed once, after
        the last bucket: ``finish_sync``)."""
        device = self.device if self.device.type == "cuda" else torch.device("cpu")
        named = [(name, tensor.to(device)) for name, tensor in bucket.items()]
        self.engine.update_weights_from_tensor(named, load_format=None, flush_cache=False)

    def finish_sync(self) -> None:
        """After a whole sync: cached prefixes were computed with the old weights."""
        self.engine.flush_cache()

    # memory around training (collocated) ------------------------------------------------------

    def release_memory(self) -> None:
        if self.collocated and not self.released:
            self.engine.release_memory_occupation()
            self.released = True

    def resume_memory(self) -> None:
        if self.released:
            self.engine.resume_memory_occupation()
            self.released = False

    def close(self) -> None:
        if self.agent is not None:
            self.agent.close()
        self.engine.shutdown()


def eos_ids(model_dir: Path, tokenizer: Any) -> list[int]:
    """The generation config's end-of-sequence ids and the tokenizer's, as the hf engine stops."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    except OSError:  # no generation_config.json
        eos = None
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(tokenizer.eos_token_id)
    return eos
