"""The ``rollout`` component of reasoning runs: generates responses to prompts with an engine
behind one interface (``RolloutBackend``, rlcore/workers/reasoning/engine.py): ``hf``
(transformers ``generate``, here) or ``sglang`` (SGLang's offline engine,
rlcore/workers/reasoning/sglang_engine.py).

``RolloutWorker`` owns what does not depend on the engine: the weight version the driver checks,
the sampling RNG in checkpoints, and the split into ``rollout.micro_batch_size`` calls. Prompts
go in as token ids and responses come out as token ids with their mask, so an SGLang engine fits
behind the same two methods. Placed with the actor, the ``hf`` engine generates with the actor's
own module (nothing to sync).

A weight sync fills the tensors an engine exposes (``weights()``), or, for an engine whose
weights live elsewhere (``pushes_weights``: SGLang's, in its own processes), hands it each
bucket (``load_bucket``) and then ``finish_sync``; ``weight_layout`` describes what it takes.

Partial rollouts (``rollout.partial_rollout``, asynchronous runs): a batch is generated in
segments, ``begin_partial`` then ``advance_partial`` calls of up to
``rollout.partial_rollout_tokens`` tokens a row, then ``finish_partial``. The process runs its
calls in order, so a weight sync the driver submits between two segments is taken there: the
rows go on from where they stopped with the new weights (their prompt and tokens so far
prefilled anew), and each token records the version that sampled it (``rollout_versions``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rlcore.columns import (
    ATTENTION_MASK,
    IMAGE_COLUMNS,
    IMAGE_GRID,
    INPUT_IDS,
    PIXEL_VALUES,
    RESPONSE_MASK,
    ROLLOUT_VERSIONS,
    ROUTED_EXPERTS,
)
from rlcore.config.schema import ReasoningConfig
from rlcore.data.sequences import generated_layout, left_pad, position_ids, response_mask
from rlcore.models.forward import cache_inputs, check_images, image_inputs, inner_model
from rlcore.models.lm import evaluating, is_adapter, load_causal_lm, load_tokenizer, with_lora
from rlcore.models.moe import recording, routed_column
from rlcore.scheduler.dispatch import Dispatch, dispatch
from rlcore.scheduler.worker import rank_seed
from rlcore.workers.files.state_files import load_state, save_state
from rlcore.workers.reasoning.agent_loop import AgentLoop, Sampler
from rlcore.workers.reasoning.engine import RolloutBackend
from rlcore.workers.reasoning.sampling import sampling
from rlcore.workers.reasoning.static_decode import Sampling, StaticDecoder
from rlcore.workers.weight_version import check_weight_version


class HFEngine(RolloutBackend):
    """``generate`` from transformers on the component's device (``model``: the actor's module
    when fused with it)."""

    def __init__(
        self,
        config: ReasoningConfig,
        model_dir: Path,
        device: torch.device,
        model: Any = None,
        collocated: bool = False,
    ) -> None:
        self.config = config
        self.device = device
        self.collocated = collocated or model is not None  # the actor trains on this GPU too
        self.tokenizer = load_tokenizer(model_dir)
        lora = config.actor.model.lora
        self.lora = lora.rank > 0
        self.model = (
            model
            if model is not None
            else with_lora(load_causal_lm(model_dir, config.actor.model.dtype), lora)
        )
        self.model.to(self.device)
        eos = self.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id not in eos:
            eos.append(self.tokenizer.eos_token_id)
        self.eos_ids = eos
        self.released = False
        hf = config.rollout.hf
        self.decoder = (
            StaticDecoder(
                self.model,
                eos,
                self.tokenizer.pad_token_id,
                self.device,
                batch_bucket=hf.batch_bucket,
                length_bucket=hf.length_bucket,
                max_buckets=hf.max_buckets,
                cuda_graph=hf.cuda_graph,
                compile_backend="inductor" if hf.compile else None,
            )
            if hf.static_cache
            else None
        )
        # rollout.tools / rollout.interaction: multi-turn trajectories (agent_loop.py)
        self.agent = AgentLoop(config, self.tokenizer, eos) if config.rollout.multi_turn else None

    def close(self) -> None:
        if self.agent is not None:
            self.agent.close()

    pushes_weights = False

    def release_memory(self) -> None:
        """The static loop's caches and graphs, where the actor trains on this GPU too
        (``collocated``): they are made again, and recaptured, at the next generation (about
        a generation step's time); compiled ones (``rollout.hf.compile``) are kept, since a
        new cache would compile again. The model stays where it is (it may be the actor's
        own)."""
        hf = self.config.rollout.hf
        if self.decoder is not None and self.collocated and not hf.compile:
            self.decoder.release()

    def resume_memory(self) -> None:
        """Nothing to take back (see ``release_memory``)."""

    def weights(self) -> dict[str, torch.Tensor]:
        """The tensors a sync fills: all, or with LoRA the adapters (the base is the actor's
        frozen one, loaded from the same folder)."""
        tensors = self.model.state_dict()
        return {k: v for k, v in tensors.items() if not self.lora or is_adapter(k)}

    def generation_config(
        self, greedy: bool, validation: bool = False, max_new_tokens: int | None = None
    ) -> Any:
        from transformers import GenerationConfig

        options: dict[str, Any] = {"do_sample": False}
        if not greedy:  # top_k 0 is "no limit" to transformers too (None would mean its 50)
            temperature, top_p, top_k = sampling(self.config, validation)
            options = {
                "do_sample": True,
                "temperature": temperature,
                "top_p": top_p,
                "top_k": top_k,
            }
        return GenerationConfig(
            max_new_tokens=max_new_tokens or self.config.data.max_response_length,
            eos_token_id=self.eos_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            use_cache=True,
            **options,
        )

    def generating(self) -> AbstractContextManager[None]:
        return evaluating(self.model)

    def generate_rows(
        self, prompts: TensorDict, greedy: bool, validation: bool, log_probs: bool
    ) -> TensorDict:
        if self.decoder is not None:
            _no_images(prompts, "rollout.hf.static_cache")
            return self._static_generate(prompts, greedy, validation, log_probs)
        config = self.generation_config(greedy, validation)
        recorder = SampledLogProbs(sampling(self.config, validation)[0])
        routings = self.config.rollout.routing_replay and not validation
        return self._generate(prompts, config, recorder if log_probs else None, routings)

    def sampler(self, greedy: bool, validation: bool, log_probs: bool) -> Sampler:
        temperature = sampling(self.config, validation)[0]
        return lambda contexts, budget: self._turn(
            contexts,
            self.generation_config(greedy, validation, budget),
            SampledLogProbs(temperature) if log_probs else None,
        )

    def _static_generate(
        self, prompts: TensorDict, greedy: bool, validation: bool, log_probs: bool
    ) -> TensorDict:
        """``generate`` through the static-cache decode loop (``rollout.hf.static_cache``)."""
        assert self.decoder is not None
        temperature, top_p, top_k = sampling(self.config, validation)
        ids, mask = prompts[INPUT_IDS], prompts[ATTENTION_MASK]
        width = self.config.data.max_response_length
        responses, logp = self.decoder.generate(
            ids, mask, width, Sampling(greedy, temperature, top_p, top_k), log_probs
        )
        return self._laid_out(ids.to(self.device), mask.to(self.device), responses, logp)

    @torch.no_grad()
    def continue_rows(
        self, contexts: list[list[int]], budget: int
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Up to ``budget`` more sampled tokens of each context (a prompt and the response so
        far), each row's up to and including its first end-of-sequence token, with their
        log-probs (a partial rollout's segment: ``rollout.temperature`` / ``top_p`` /
        ``top_k``)."""
        config = self.generation_config(greedy=False, max_new_tokens=budget)
        recorder = SampledLogProbs(sampling(self.config, False)[0])
        with evaluating(self.model):
            tokens, logps = self._turn(contexts, config, recorder)
        assert logps is not None
        return tokens, logps

    def _turn(
        self, contexts: list[list[int]], generation_config: Any, recorder: SampledLogProbs | None
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """One turn of the agent loop: each context's new tokens, up to and including its first
        end-of-turn token, and their log-probs when ``recorder``."""
        from transformers import LogitsProcessorList

        ids, mask = left_pad(contexts, self.tokenizer.pad_token_id)
        with rollout_keys_only(self.model):
            out = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                generation_config=generation_config,
                logits_processor=LogitsProcessorList([recorder] if recorder is not None else []),
            )
        new = out[:, ids.shape[1] :].cpu()
        lengths = response_mask(new, self.eos_ids).sum(-1).tolist()
        tokens = [row[:n].tolist() for row, n in zip(new, lengths, strict=True)]
        if recorder is None:
            return tokens, None
        recorded = recorder.finish(out[:, -1]).cpu()
        return tokens, [row[:n].tolist() for row, n in zip(recorded, lengths, strict=True)]

    def _generate(
        self,
        prompts: TensorDict,
        generation_config: Any,
        recorder: SampledLogProbs | None,
        routings: bool = False,
    ) -> TensorDict:
        """``generate_rows`` through transformers' ``generate``; with ``routings``, the experts
        each token was routed to recorded (``ROUTED_EXPERTS``, routing replay)."""
        from transformers import LogitsProcessorList

        check_images(self.model, prompts)
        ids = prompts[INPUT_IDS].to(self.device)
        mask = prompts[ATTENTION_MASK].to(self.device)
        # the image columns moved once (the grid model's inputs and a shared prefill read them)
        on_device = prompts.select(*(k for k in IMAGE_COLUMNS if k in prompts)).to(self.device)
        pixels = on_device.get(PIXEL_VALUES, None)
        processors = [recorder] if recorder is not None else []
        images = image_inputs(self.model, on_device, ids)
        if pixels is not None:
            processors.append(NoPlaceholder(inner_model(self.model).config.image_token_id))
        record = recording(self.model) if routings else contextlib.nullcontext([])
        with rollout_keys_only(self.model), record as calls:
            # (a grid model's images are not shared: the config check refuses it)
            grids = IMAGE_GRID in prompts
            shared = {} if grids else self._shared_prompts(ids, mask, pixels)
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=generation_config,
                logits_processor=LogitsProcessorList(processors),
                **shared,
                **({} if shared else images),  # (a shared prefill has read them)
            )
        logp = None
        if recorder is not None:
            logp = recorder.finish(out[:, -1])
        routed = None
        if routings:
            # the calls: a prompt prefill (one row per group where prompts are shared), then
            # one column a step
            rows = len(ids)
            heads = rows // self.config.algorithm.group_size if shared else rows
            counts = [len(c) for c in calls[0]]
            shapes = [
                (heads if i == 0 else rows, n // (heads if i == 0 else rows))
                for i, n in enumerate(counts)
            ]
            width = ids.shape[1] + self.config.data.max_response_length
            routed = routed_column(calls, shapes, rows, width)
        generated = self._laid_out(ids, mask, out[:, ids.shape[1] :], logp, routed)
        for key in IMAGE_COLUMNS:  # (every later pass reads the images too)
            if key in prompts:
                generated[key] = prompts[key]
        return generated

    def _laid_out(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        responses: torch.Tensor,
        recorded: torch.Tensor | None,
        routed: torch.Tensor | None = None,
    ) -> TensorDict:
        """The generated batch (``generated_layout``) of prompts and responses that may be
        shorter than ``data.max_response_length`` (every row ended early), on the CPU."""
        width = self.config.data.max_response_length
        if responses.shape[1] < width:  # every row ended early: pad to the fixed width
            pad = responses.new_full(
                (len(responses), width - responses.shape[1]), self.tokenizer.pad_token_id
            )
            responses = torch.cat([responses, pad], dim=1)
        logp = None
        if recorded is not None:
            logp = recorded.new_zeros(responses.shape)
            logp[:, : recorded.shape[1]] = recorded
        pad = self.tokenizer.pad_token_id
        generated = generated_layout(ids, mask, responses, self.eos_ids, pad, logp)
        if routed is not None:
            generated[ROUTED_EXPERTS] = routed
        return TensorDict({k: v.cpu() for k, v in generated.items()}, batch_size=[len(ids)])

    def _shared_prompts(
        self, ids: torch.Tensor, mask: torch.Tensor, pixels: torch.Tensor | None = None
    ) -> dict[str, Any]:
        """With ``actor.model.share_group_prompts``, when the rows are groups of
        ``algorithm.group_size`` copies of one prompt (a training batch, as ``prompt_batch``
        lays it out): a key-value cache holding each group's prompt but its last token,
        computed once and repeated for the group, from which ``generate`` goes on (it computes
        only the columns the cache lacks). The same distribution, and on the tiny model the same
        tokens, for a prefill of one row per group (measured: 64 prompts x 4, 0.167 -> 0.111 s a
        generate call). Otherwise nothing: a full prefill. ``pixels``: the rows' images, which
        a group's rows share too; the cached prompt holds them (its last token, the one left to
        ``generate``, is then not an image's)."""
        group = self.config.algorithm.group_size
        if not self.config.actor.model.share_group_prompts or group == 1:
            return {}
        rows, width = ids.shape
        if rows % group or width < 2:
            return {}
        heads = ids[::group], mask[::group]
        if not (
            torch.equal(ids.reshape(-1, group, width), heads[0][:, None].expand(-1, group, -1))
            and torch.equal(mask.reshape(-1, group, width), heads[1][:, None].expand(-1, group, -1))
        ):
            return {}  # not groups (validation prompts): a full prefill
        images = {}
        if pixels is not None:
            last_is_image = heads[0][:, -1] == inner_model(self.model).config.image_token_id
            same = torch.equal(
                pixels.unflatten(0, (-1, group)),
                pixels[::group, None].expand(-1, group, *pixels.shape[1:]),
            )
            if bool(last_is_image.any()) or not same:
                return {}
            images = {"pixel_values": pixels[::group].flatten(0, 1)}
        from transformers import DynamicCache

        cache = DynamicCache(config=inner_model(self.model).config)
        self.model(
            input_ids=heads[0][:, :-1],
            attention_mask=heads[1][:, :-1],
            position_ids=position_ids(heads[1][:, :-1]),
            use_cache=True,
            **cache_inputs(self.model, cache),
            **images,
        )
        cache.batch_repeat_interleave(group)
        return cache_inputs(self.model, cache)


def _no_images(prompts: TensorDict, path: str) -> None:
    """Refuse prompts with images on a generation path that cannot pass them to the model."""
    if PIXEL_VALUES in prompts:
        raise NotImplementedError(
            f"{path}: prompts with images (the hf engine's generate takes them)"
        )


class PartialBatch:
    """A batch a partial rollout generates in segments: each row's prompt tokens (no padding)
    and what it has so far."""

    def __init__(self, prompts: TensorDict, contexts: list[list[int]]) -> None:
        self.prompts, self.contexts = prompts, contexts
        self.tokens: list[list[int]] = [[] for _ in contexts]
        self.log_probs: list[list[float]] = [[] for _ in contexts]
        self.versions: list[list[int]] = [[] for _ in contexts]
        self.done = [False] * len(contexts)


@contextmanager
def rollout_keys_only(model: Any) -> Iterator[None]:
    """Within it, ``generate`` samples as the rollout's keys say and nothing else: transformers
    fills every option a ``GenerationConfig`` leaves unset from the model folder's
    generation_config.json (an instruct model's top_k 20, repetition_penalty 1.05, min_p ...),
    and then from its own defaults (top_k 50), which would sample from another distribution than
    the one configured and recorded. For the call, the model's generation config holds its
    token ids only; it is put back after, so an exported model keeps its own."""
    from transformers import GenerationConfig

    inner = inner_model(model)
    own = inner.generation_config
    inner.generation_config = GenerationConfig(
        bos_token_id=own.bos_token_id, eos_token_id=own.eos_token_id, pad_token_id=own.pad_token_id
    )
    try:
        yield
    finally:
        inner.generation_config = own


class SampledLogProbs:
    """A logits processor that records each sampled token's log-prob at ``temperature``.

    transformers calls it at every step with the logits before its own temperature and top-p /
    top-k warpers (it is merged in ahead of them); the token sampled from a step's logits shows
    up in the next call's ``input_ids``, so one step's log-softmax is held until then, and the
    last step's token is read by ``finish``. It returns the logits unchanged.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.held: torch.Tensor | None = None  # [B, V]: the last step's log-softmax
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.held is not None:
            self._take(input_ids[:, -1])
        self.held = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        self.steps.append(self.held.gather(-1, tokens[:, None]).squeeze(-1))

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """``[B, steps]``: the log-prob of each sampled token, given the final step's tokens."""
        if self.held is not None:
            self._take(last_tokens)
            self.held = None
        if not self.steps:
            return torch.zeros(len(last_tokens), 0, device=last_tokens.device)
        return torch.stack(self.steps, dim=1)


class NoPlaceholder:
    """A logits processor that never lets the image placeholder token be sampled: a response
    holding one would read as an image slot with no image in every later pass. Placed after
    ``SampledLogProbs``, which records the log-probs over the whole vocabulary, as the training
    passes compute them (the placeholder's probability, near 0 in a trained model, is left out
    of the sampling as top-p's tail is)."""

    def __init__(self, token_id: int) -> None:
        self.token_id = token_id

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores[:, self.token_id] = -torch.inf
        return scores


class RolloutWorker:
    """See the module docstring. ``actor``: the actor's worker when fused with it, else None."""

    def __init__(
        self,
        ctx: Any,
        config: ReasoningConfig,
        model_dir: Path,
        actor: Any = None,
        collocated: bool = False,
    ) -> None:
        self.config, self.rank = config, ctx.rank
        # transformers samples from torch's global RNG: this process's, seeded per rank
        torch.manual_seed(rank_seed(config.runner.seed, ctx.rank, "sampling"))
        self.engine: RolloutBackend
        if config.rollout.backend == "sglang":
            from rlcore.workers.reasoning.sglang_engine import SGLangEngine

            # Tensor parallel over every GPU of this process; collocated: the actor trains on
            # them too (fused with it, or in another process on the same GPUs).
            self.engine = SGLangEngine(
                config,
                model_dir,
                ctx.torch_device,
                rank=ctx.rank,
                tp_size=len(ctx.devices) if ctx.device == "cuda" else 1,
                collocated=collocated or actor is not None,
            )
            self.shares_actor = False
        else:
            # The actor's own module, unless FSDP2 shards it: then a whole copy, synced.
            model = actor.model if actor is not None and not actor.trainer.shards else None
            self.engine = HFEngine(config, model_dir, ctx.torch_device, model, collocated)
            self.shares_actor = model is not None
        self.pushes_weights = self.engine.pushes_weights
        self.version = -1  # no weights synced yet
        self.partial: dict[int, PartialBatch] = {}  # partial rollouts being generated, by key

    def weights(self) -> dict[str, torch.Tensor]:
        return self.engine.weights()

    def weight_layout(self) -> list[tuple[str, tuple[int, ...], str, int]]:
        """What a sync pushes into an engine that ``pushes_weights`` (see the module doc)."""
        return self.engine.weight_layout()

    def load_bucket(self, bucket: dict[str, torch.Tensor]) -> None:
        self.engine.load_bucket(bucket)

    @dispatch(Dispatch.ALL)
    def set_weight_version(self, version: int) -> None:
        """Called after each sync: the engine's weights are now ``version``'s."""
        if self.pushes_weights:
            self.engine.finish_sync()
        self.version = version

    @dispatch(Dispatch.ALL)
    def release_memory(self) -> None:
        """While the actor trains: a collocated engine gives back its GPU memory."""
        self.engine.release_memory()

    @dispatch(Dispatch.ALL)
    def resume_memory(self) -> bool:
        """Before the next sync; True when the engine's weights were released (the sync must
        then happen even for a version it held)."""
        released = self.engine.released
        self.engine.resume_memory()
        return released

    def close(self) -> None:
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()

    @dispatch(Dispatch.RANK0)
    def generates_with_the_actor(self) -> bool:
        """Whether this rollout samples with the actor's own module (fused, not sharded): then
        the log-probs it records are the actor's old log-probs."""
        return self.shares_actor

    @dispatch(Dispatch.SHARD)
    def generate(
        self, prompts: TensorDict, version: int, greedy: bool = False, log_probs: bool = False
    ) -> TensorDict:
        """Responses to this rank's ``prompts`` (see ``RolloutBackend.generate``), sampled with
        the actor's weights of ``version`` (greedy for validation); with ``log_probs``, the
        sampled tokens' log-probs too (``rollout_log_probs``)."""
        check_weight_version(self.rank, self.version, version)
        return self._in_parts(prompts, greedy=greedy, log_probs=log_probs)

    @dispatch(Dispatch.SHARD)
    def sample_validation(self, prompts: TensorDict, version: int, seed: int) -> TensorDict:
        """Validation samples of this rank's ``prompts`` (``rollout.val_temperature``,
        ``val_top_p``, ``val_top_k``), drawn from a torch RNG seeded with ``seed`` and this rank,
        apart from the training sampler's (which validation must not move: a resumed run would
        sample differently)."""
        check_weight_version(self.rank, self.version, version)
        devices = [self.engine.device] if self.engine.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(rank_seed(seed, self.rank, "sampling"))
            return self._in_parts(prompts, greedy=False, validation=True)

    # partial rollouts (module docstring) ------------------------------------------------------

    @dispatch(Dispatch.SHARD_REDUCED)
    def begin_partial(self, prompts: TensorDict, version: int, key: int) -> None:
        """This rank's ``prompts`` to generate in segments under ``key``, from ``version``."""
        check_weight_version(self.rank, self.version, version)
        _no_images(prompts, "rollout.partial_rollout")
        keep = prompts[ATTENTION_MASK].bool()
        contexts = [row[m].tolist() for row, m in zip(prompts[INPUT_IDS], keep, strict=True)]
        self.partial[key] = PartialBatch(prompts, contexts)

    @dispatch(Dispatch.GATHER)
    def advance_partial(self, key: int, tokens: int) -> torch.Tensor:
        """Up to ``tokens`` more tokens of each unfinished row of ``key``'s batch, sampled with
        the weights held now; ``[1]``: whether every row of this rank's has ended."""
        batch = self.partial[key]
        width = self.config.data.max_response_length
        rows = [i for i, done in enumerate(batch.done) if not done]
        size = self.config.rollout.micro_batch_size or max(1, len(rows))
        eos = set(self.engine.eos_ids)
        for start in range(0, len(rows), size):
            part = rows[start : start + size]
            budget = min(tokens, width - len(batch.tokens[part[0]]))  # (rows move together)
            contexts = [batch.contexts[i] + batch.tokens[i] for i in part]
            new, logps = self.engine.continue_rows(contexts, budget)
            for i, row, logp in zip(part, new, logps, strict=True):
                batch.tokens[i] += row
                batch.log_probs[i] += logp
                batch.versions[i] += [self.version] * len(row)
                batch.done[i] = len(batch.tokens[i]) >= width or bool(row and row[-1] in eos)
        return torch.tensor([all(batch.done)])

    @dispatch(Dispatch.GATHER)
    def finish_partial(self, key: int) -> TensorDict:
        """``key``'s batch as ``generate`` lays it out (with ``rollout_log_probs``), and
        ``rollout_versions`` ``[B, R]``: the weight version that sampled each response token
        (-1 on padding)."""
        batch = self.partial.pop(key)
        width, pad = self.config.data.max_response_length, self.engine.tokenizer.pad_token_id
        rows = len(batch.tokens)
        responses = torch.full((rows, width), pad, dtype=torch.long)
        logp = torch.zeros((rows, width))
        versions = torch.full((rows, width), -1, dtype=torch.long)
        for i, (tokens, logps, made) in enumerate(
            zip(batch.tokens, batch.log_probs, batch.versions, strict=True)
        ):
            responses[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            logp[i, : len(tokens)] = torch.tensor(logps)
            versions[i, : len(tokens)] = torch.tensor(made, dtype=torch.long)
        prompt_ids = batch.prompts[INPUT_IDS].to(torch.long)
        generated = generated_layout(
            prompt_ids, batch.prompts[ATTENTION_MASK], responses, self.engine.eos_ids, pad, logp
        )
        mask = generated[RESPONSE_MASK].bool()
        generated[ROLLOUT_VERSIONS] = torch.where(mask, versions, -1)
        return TensorDict(generated, batch_size=[rows])

    def _in_parts(self, prompts: TensorDict, **options: Any) -> TensorDict:
        size = self.config.rollout.micro_batch_size or prompts.batch_size[0]
        group = self.config.algorithm.group_size
        if self.config.actor.model.share_group_prompts and group < size:
            size -= size % group  # whole groups per call: a split one would be prefilled in full
        parts = [self.engine.generate(part, **options) for part in prompts.split(size)]
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    # checkpoints: the sampler's RNG (transformers samples from torch's global one) -------------

    @dispatch(Dispatch.ALL)
    def save_checkpoint(self, directory: str) -> None:
        where = Path(directory)
        where.mkdir(parents=True, exist_ok=True)
        save_state({"torch_rng": torch.get_rng_state()}, where / f"rank{self.rank}.pt")

    @dispatch(Dispatch.ALL)
    def load_checkpoint(self, directory: str) -> None:
        state = load_state(Path(directory) / f"rank{self.rank}.pt")
        torch.set_rng_state(state["torch_rng"])
