"""The prompts of a reasoning run: the train and validation sets (from files or the shipped
arithmetic task), and the seeded order in which training prompts are drawn, batch by batch."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.columns import ANSWERS, ATTENTION_MASK, IMAGE_GRID, INDEX, INPUT_IDS, PIXEL_VALUES
from rlcore.config.errors import ConfigError
from rlcore.config.schema import ReasoningConfig
from rlcore.data.answers import math_verify_seconds, scorer_of, unreadable_math_answers
from rlcore.data.arith import arithmetic_problems
from rlcore.data.images import ImageInputs
from rlcore.data.prompts import DataError, PromptSet, load_prompt_rows
from rlcore.data.sequences import left_pad
from rlcore.log import say


def data_name(data: Any) -> str:
    """A run's data in a run folder's name: the first training file's stem, or "arith"."""
    return Path(data.train_files[0]).stem.split(".")[0] if data.train_files else "arith"


# Prompt sets a start's preflight built, for the run it starts to take instead of building them
# again (reading, scoring and tokenising GSM8K takes seconds); at most one per split.
_kept: dict[bool, tuple[str, PromptSet]] = {}


def _kept_key(config: ReasoningConfig, tokenizer: Any, train: bool, tools: Any) -> str:
    """What a prompt set is built from: the data section, the reward's scorers, the tokenizer
    (its folder, size and chat template), the tools, and each data file's size and time."""
    files = config.data.train_files if train else config.data.val_files
    stamps = []
    for name in files:
        try:
            stat = Path(name).expanduser().stat()
            stamps.append((name, stat.st_size, stat.st_mtime_ns))
        except OSError:
            stamps.append((name, None, None))
    reward = config.reward
    return repr(
        (
            config.data,
            reward.kind,
            reward.sources,
            reward.rules.timeout_s,
            getattr(tokenizer, "name_or_path", None),
            len(tokenizer) if hasattr(tokenizer, "__len__") else None,
            getattr(tokenizer, "chat_template", None),
            tools,
            stamps,
        )
    )


def load_prompt_set(
    config: ReasoningConfig,
    tokenizer: Any,
    train: bool,
    tools: list[dict[str, Any]] | None = None,
    quiet: bool = False,
    keep: bool = False,
    images: ImageInputs | None = None,
) -> PromptSet:
    """``data.train_files`` / ``data.val_files`` tokenised, or the synthetic task when empty;
    ``tools``: the function schemas a chat template lists for the model (``rollout.tools``).
    ``DataError`` when fewer training prompts are usable than ``data.train_batch_size``. What it
    reads and drops is said, unless ``quiet``. ``keep``: the set is also kept for the next call
    that would build the same one (a start's preflight, then its run), which takes it.
    ``images``: how the model takes the prompts' images (else those of the tokenizer's folder,
    ``ImageInputs.of_tokenizer``)."""
    key = _kept_key(config, tokenizer, train, tools)
    kept = _kept.pop(train, None)
    if kept is not None and kept[0] == key and not keep:
        return kept[1]
    prompts = _built_prompt_set(config, tokenizer, train, tools, quiet, images)
    if keep:
        _kept[train] = (key, prompts)
    return prompts


def synthetic_rows(syn: Any, train: bool) -> list[dict[str, Any]]:
    """The synthetic task's training or validation rows (``data.synthetic``), the latter
    disjoint from the former; with ``images``, the visual task's, each with its image."""
    if syn.images:
        from rlcore.data.visual_arith import visual_problems

        make = lambda n, seed, exclude=None: visual_problems(  # noqa: E731
            n, operations=syn.operations, seed=seed, exclude=exclude
        )
        key = "key"  # (the drawing's numbers, operation and offsets)
    else:
        make = lambda n, seed, exclude=None: arithmetic_problems(  # noqa: E731
            n, digits=syn.digits, operations=syn.operations, seed=seed, exclude=exclude
        )
        key = "question"
    train_rows = make(syn.num_train, syn.seed)
    rows = train_rows if train else make(syn.num_val, syn.seed + 1, {r[key] for r in train_rows})
    out = [{"prompt": r["question"], "answer": r["answer"].removeprefix("#### ")} for r in rows]
    if syn.images:
        from PIL import Image

        for row, problem in zip(out, rows, strict=True):
            row["images"] = [Image.fromarray(problem["image"])]
    return out


def _built_prompt_set(
    config: ReasoningConfig,
    tokenizer: Any,
    train: bool,
    tools: list[dict[str, Any]] | None,
    quiet: bool,
    images: ImageInputs | None = None,
) -> PromptSet:
    data = config.data
    what = "data.train_files" if train else "data.val_files"
    files = data.train_files if train else data.val_files
    if files:
        rows = load_prompt_rows(
            files, what, data.prompt_key, data.answer_key, data.answer_format, quiet=quiet
        )
    else:  # errors and notes name the task the prompts come from, not empty file keys
        what = f"data.synthetic ({'training' if train else 'validation'} problems)"
        syn = data.synthetic
        rows = synthetic_rows(syn, train)
    if not train and data.val_max_samples is not None:
        rows = rows[: data.val_max_samples]
    kinds = _scorers(rows, config.reward.kind, what)
    if "math" in kinds:
        math_rows = [row for row, kind in zip(rows, kinds, strict=True) if kind == "math"]
        readable = _readable_math_rows(math_rows, what, config.reward.rules.timeout_s)
        if len(readable) < len(math_rows):
            kept = {id(row) for row in readable}
            rows = [r for r, k in zip(rows, kinds, strict=True) if k != "math" or id(r) in kept]
    if images is None and any(r.get("images") for r in rows):
        images = ImageInputs.of_tokenizer(tokenizer)
    prompts = PromptSet.build(
        rows,
        tokenizer,
        suffix=data.prompt_suffix,
        chat_template=data.chat_template,
        max_length=data.max_prompt_length,
        what=what,
        tools=tools,
        images=images,
    )
    if prompts.images is not None:
        check_image_settings(config, what, grids=prompts.grids is not None)
    if prompts.dropped and not quiet:
        say(
            f"{what}: dropped {prompts.dropped} of {len(rows)} prompts longer than "
            f"data.max_prompt_length={data.max_prompt_length} tokens"
        )
    if train:
        _enough_for_a_batch(prompts, data.train_batch_size, what)
    return prompts


def _enough_for_a_batch(prompts: PromptSet, batch: int, what: str) -> None:
    """``DataError`` when fewer training prompts are usable than ``data.train_batch_size``."""
    if len(prompts) < batch:
        raise DataError(
            f"{what}: {len(prompts)} usable prompts, fewer than data.train_batch_size={batch}; "
            "give more prompts or a smaller batch"
            + (
                f" (or a larger data.max_prompt_length, which dropped {prompts.dropped})"
                if prompts.dropped
                else ""
            )
        )


def check_prompt_files(config: ReasoningConfig, files: list[str], what: str) -> None:
    """``files`` read as the run reads them, and each row's scorer found (the dry run, where the
    model's tokenizer is not here yet): fewer rows than ``data.train_batch_size`` in the
    training files leave fewer usable prompts, which the run refuses."""
    data = config.data
    rows = load_prompt_rows(
        files, what, data.prompt_key, data.answer_key, data.answer_format, quiet=True
    )
    _scorers(rows, config.reward.kind, what)
    if what == "data.train_files" and len(rows) < data.train_batch_size:
        raise DataError(
            f"{what}: {len(rows)} prompts in the files, so fewer usable prompts than "
            f"data.train_batch_size={data.train_batch_size}; give more prompts or a smaller batch"
        )


def _scorers(rows: list[dict[str, Any]], kind: str, what: str) -> list[str]:
    """The rule that scores each row (``scorer_of``); a ``DataError`` naming a data source that
    reward.kind auto cannot score."""
    kinds = []
    for row in rows:
        try:
            kinds.append(scorer_of(kind, row.get("source")))
        except ValueError as error:
            raise DataError(f"{what}: {error}") from None
    return kinds


def _readable_math_rows(
    rows: list[dict[str, str]], what: str, timeout_s: float
) -> list[dict[str, str]]:
    """``rows`` without those whose reference answer math-verify cannot read (each distinct
    answer read once, within reward.rules.timeout_s): they would score every response 0."""
    main = threading.current_thread() is threading.main_thread()  # (math-verify's alarm)
    limit = math_verify_seconds(timeout_s) if main else None
    bad = unreadable_math_answers([row["answer"] for row in rows], limit)
    if not bad:
        return rows
    kept = [row for row in rows if row["answer"] not in bad]
    named = ", ".join(repr(a[:40]) for a in sorted(bad)[:3]) + (", ..." if len(bad) > 3 else "")
    say(
        f"{what}: dropped {len(rows) - len(kept)} of {len(rows)} prompts whose reference answer "
        f"math-verify cannot read within reward.rules.timeout_s={timeout_s:g} (reward.kind=math "
        f"would score every response to them 0): {named}"
    )
    if not kept:
        raise DataError(f"{what}: math-verify reads none of the reference answers: {named}")
    return kept


def check_image_settings(config: ReasoningConfig, what: str, grids: bool = False) -> None:
    """Refuse, by key, the settings whose code does not carry a prompt's images yet; ``grids``:
    a grid model's images (Qwen2-VL's 3-D positions, not for a prompt computed once yet)."""
    critic = config.derived.critic_model
    model = config.actor.model
    refused = [
        (grids and model.share_group_prompts, "actor.model.share_group_prompts (Qwen2-VL's)"),
        (config.rollout.hf.static_cache, "rollout.hf.static_cache"),
        (config.rollout.partial_rollout, "rollout.partial_rollout"),
        (config.rollout.multi_turn, "rollout.tools / rollout.interaction"),
        (config.actor.training_backend == "megatron", "actor.training_backend megatron"),
        (config.actor.ulysses_sequence_parallel_size > 1, "actor.ulysses_sequence_parallel_size"),
        (
            critic and config.critic.training_backend == "megatron",
            "critic.training_backend megatron",
        ),
        (
            critic and config.critic.ulysses_sequence_parallel_size > 1,
            "critic.ulysses_sequence_parallel_size",
        ),
    ]
    named = [name for on, name in refused if on]
    if named:
        raise ConfigError(
            f"{what}: prompts with images, and {', '.join(named)}, which does not pass images "
            "to the model yet; with images: the hf engine without static cache, one-turn whole "
            "rollouts, the torch, ddp or fsdp2 backends without sequence parallelism (and for "
            "Qwen2-VL's images, each prompt computed with each response)"
        )


def prompt_batch(rows: list[int], prompts: PromptSet, repeat: int, pad_id: int) -> TensorDict:
    """Rows ``rows`` of ``prompts``, each ``repeat`` times: ``[B]`` rows of left-padded
    ``input_ids`` / ``attention_mask``, the ``answers``, and ``index``, the row's group."""
    ids = [prompts.prompts[i] for i in rows for _ in range(repeat)]
    input_ids, mask = left_pad(ids, pad_id)
    batch = TensorDict(
        {
            INPUT_IDS: input_ids,
            ATTENTION_MASK: mask,
            # Groups are this batch's prompts by position: a prompt drawn twice (at an epoch's
            # end and the next one's start) makes two groups, not one of twice the size.
            INDEX: torch.arange(len(rows)).repeat_interleave(repeat),
        },
        batch_size=[len(ids)],
    )
    batch[ANSWERS] = NonTensorStack(*[prompts.answers[i] for i in rows for _ in range(repeat)])
    # verl's data_source (reward.kind auto routes by it) and extra_info (a custom reward
    # written as verl's is given both)
    for key, column in (("sources", prompts.sources), ("extras", prompts.extras)):
        if column is not None:
            batch[key] = NonTensorStack(*[column[i] for i in rows for _ in range(repeat)])
    if prompts.images is not None:
        batch[PIXEL_VALUES] = torch.stack([prompts.images[i] for i in rows for _ in range(repeat)])
    if prompts.grids is not None:
        batch[IMAGE_GRID] = torch.stack([prompts.grids[i] for i in rows for _ in range(repeat)])
    return batch


class PromptSampler:
    """Training prompts in a seeded order, reshuffled each epoch (``data.shuffle``)."""

    def __init__(self, size: int, seed: int, shuffle: bool) -> None:
        self.size, self.shuffle = size, shuffle
        self.order = np.random.default_rng(seed)
        self.queue: list[int] = []

    def next(self, count: int) -> list[int]:
        while len(self.queue) < count:
            epoch = self.order.permutation(self.size) if self.shuffle else np.arange(self.size)
            self.queue += epoch.tolist()
        picked, self.queue = self.queue[:count], self.queue[count:]
        return picked

    def state_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "order": self.order.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.queue = list(state["queue"])
        self.order.bit_generator.state = state["order"]


@dataclass
class TrainingPrompts:
    """A run's batches of training prompts: ``wanted`` groups of ``size`` rows each, drawn by
    ``sampler`` from ``prompts`` (``pad_id`` pads them on the left)."""

    sampler: PromptSampler
    prompts: PromptSet
    wanted: int
    size: int
    pad_id: int

    def __call__(self, generation: int = 0) -> TensorDict:
        """The next batch; ``generation``: its number among one training batch's generation
        batches (DAPO's dynamic sampling), so that each group's ``index`` is its own over all."""
        batch = prompt_batch(self.sampler.next(self.wanted), self.prompts, self.size, self.pad_id)
        batch[INDEX] += generation * self.wanted
        return batch
