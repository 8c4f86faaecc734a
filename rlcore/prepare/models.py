"""A reasoning run's models as local folders, prepared by the entry point before any driver is
built (the driver is handed the folders): the given ones checked, or the tiny model built and
warmed up (``warmup.py``) when ``actor.model.path`` is null.

The tiny model is a Qwen2-architecture LM with a BPE tokenizer trained on the synthetic task's
text, then ``warmup.steps`` supervised steps on that task, so that PPO starts from a policy that
answers in the ``#### N`` format and is sometimes right. The result is cached under
``warmup.cache_dir`` by a hash of everything that shapes it: the second run starts at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcore.config.errors import ConfigError
from rlcore.config.schema import ReasoningConfig
from rlcore.data.arith import arithmetic_problems, expression_of
from rlcore.data.images import MARKER, ImageInputs
from rlcore.data.sampler import load_prompt_set
from rlcore.data.visual_arith import SIDE, visual_problems
from rlcore.log import say
from rlcore.models.hub import local_model_dir
from rlcore.models.lm import build_tiny_lm, check_model_dir, check_positions, train_tiny_tokenizer
from rlcore.prepare.warmup import (
    accuracy_reached,
    calculator_call,
    sft_examples,
    supervised_warmup,
    tool_examples,
)


@dataclass(frozen=True)
class ModelDirs:
    """Where each model of the run is read from: the actor (and the reference), the critic."""

    actor: Path
    critic: Path


def prepare(config: Any) -> ModelDirs | None:
    """What ``config``'s run needs prepared before its driver is built: a reasoning run's model
    folders (``prepare_models``); nothing for an embodied run."""
    return prepare_models(config) if config.mode == "reasoning" else None


def prepare_models(config: ReasoningConfig) -> ModelDirs:
    """The run's model directories; builds (or finds cached) the tiny model when no path is set."""
    model = config.actor.model
    if model.path is not None:
        if config.warmup.steps:
            raise ConfigError(
                "warmup.steps: the supervised warm-up trains the tiny model only; set it to 0 "
                "when actor.model.path is set"
            )
        folder = local_model_dir(model.path, "actor.model.path")
        actor = check_model_dir(str(folder), "actor.model.path", tokenizer=True)
        check_positions(actor, config.data, "actor.model.path")
    else:
        check_positions(None, config.data, "actor.model.path")  # before it is built
        actor = _tiny_model_dir(config)
    critic = actor
    if config.critic.model_path is not None:
        folder = local_model_dir(config.critic.model_path, "critic.model_path")
        critic = check_model_dir(str(folder), "critic.model_path")
        check_positions(critic, config.data, "critic.model_path")
    return ModelDirs(actor=actor, critic=critic)


def _fingerprint(config: ReasoningConfig) -> str:
    synthetic = dataclasses.asdict(config.data.synthetic)
    if not synthetic["images"]:  # (the text task's caches from before the key stay valid)
        del synthetic["images"]
    shape = {
        "tiny": _tiny_shape(config),
        "synthetic": synthetic,
        "suffix": config.data.prompt_suffix,
        "chat": config.data.chat_template is True,  # (the synthetic prompts are text)
        "warmup": {k: v for k, v in dataclasses.asdict(config.warmup).items() if k != "cache_dir"},
        "version": 3,  # bump when the recipe below changes
    }
    if config.rollout.tools:  # (only then: the caches of runs without tools stay valid)
        shape["tools"] = sorted(config.rollout.tools)
    if config.warmup.examples is not None:
        shape["examples"] = config.warmup.examples
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


def _tiny_shape(config: ReasoningConfig) -> dict:
    """The tiny model's keys in its fingerprint (a dense model's without the experts' keys, so
    the dense models cached before those keys existed are found again)."""
    shape = dataclasses.asdict(config.actor.model.tiny)
    if not shape["num_experts"]:
        for moe_only in ("num_experts", "experts_per_token", "expert_intermediate_size"):
            del shape[moe_only]
    return shape


def cached_tiny_model(config: ReasoningConfig) -> Path | None:
    """The folder of the tiny model ``config`` builds, when a run built it already."""
    directory = _tiny_cache_dir(config)
    return directory if (directory / "config.json").is_file() else None


def _tiny_cache_dir(config: ReasoningConfig) -> Path:
    return Path(config.warmup.cache_dir).expanduser() / f"tiny-{_fingerprint(config)}"


TINY_PATCH = 4  # the tiny vision-language model's patch side: a 16-pixel image is 16 tokens


def _tiny_image_inputs(image_token: int) -> ImageInputs:
    """How the tiny vision-language model takes the visual task's images: a CLIP image
    processor that keeps their size and maps [0, 255] to [-1, 1], one placeholder a patch."""
    from transformers import CLIPImageProcessor

    processor = CLIPImageProcessor(
        size={"shortest_edge": SIDE},
        crop_size={"height": SIDE, "width": SIDE},
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    return ImageInputs(processor, image_token, (SIDE // TINY_PATCH) ** 2)


def _tiny_model_dir(config: ReasoningConfig) -> Path:
    directory = _tiny_cache_dir(config)
    if (directory / "config.json").is_file():
        say(f"tiny model: cached at {directory}")
        return directory
    syn = config.data.synthetic
    if syn.images:
        rows = visual_problems(syn.num_train, operations=syn.operations, seed=syn.seed)
    else:
        rows = arithmetic_problems(
            syn.num_train, digits=syn.digits, operations=syn.operations, seed=syn.seed
        )
    suffix = config.data.prompt_suffix
    tools = bool(config.rollout.tools)
    corpus = [row["question"].replace(MARKER, "") + suffix + " " + row["answer"] for row in rows]
    if tools:  # the calls' JSON too, so that BPE merges its fixed parts
        corpus += [calculator_call(expression_of(r["question"])) for r in rows[:2000]]
    tokenizer = train_tiny_tokenizer(corpus, tools=tools, images=syn.images)
    tiny = config.actor.model.tiny
    image_token = tokenizer.convert_tokens_to_ids(MARKER) if syn.images else None
    model = build_tiny_lm(
        tokenizer,
        hidden_size=tiny.hidden_size,
        num_layers=tiny.num_layers,
        num_heads=tiny.num_heads,
        intermediate_size=tiny.intermediate_size,
        seed=syn.seed,
        vision=(SIDE, TINY_PATCH, 3) if syn.images else None,
        image_token=image_token,
        experts=tiny.num_experts,
        experts_per_token=tiny.experts_per_token,
        expert_intermediate_size=tiny.expert_intermediate_size,
    )
    images = _tiny_image_inputs(image_token) if image_token is not None else None
    if config.warmup.steps:
        _warm_up(config, model, tokenizer, rows, images)
    staging = directory.with_name(directory.name + f".tmp{os.getpid()}")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    if images is not None:
        images.processor.save_pretrained(staging)
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)  # atomic: a crash mid-save leaves no half-written cache entry
    say(f"tiny model: saved to {directory}")
    return directory


def _warm_up(
    config: ReasoningConfig,
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    images: ImageInputs | None,
) -> None:
    """``warmup.steps`` supervised steps on the task's ``rows`` (stopping early at
    ``warmup.stop_at_accuracy``); ``images``: the visual task's, each prompt's image read."""
    warm, syn, suffix = config.warmup, config.data.synthetic, config.data.prompt_suffix
    taught = rows[: warm.examples] if warm.examples is not None else rows
    examples = (
        tool_examples(taught, tokenizer, suffix)
        if config.rollout.tools
        else sft_examples(taught, tokenizer, suffix, config.data.chat_template is True)
    )
    pixels = None
    if images is not None:  # each marker made the image's placeholders, and its pixels
        from PIL import Image

        count = images.placeholders(None, 1)  # (the tiny LLaVA's: a fixed count)
        examples = [(images.expand(p, count, "warm-up"), t) for p, t in examples]
        drawn = images.pixels([Image.fromarray(r["image"]) for r in taught])[0]
        pixels = list(drawn.split(1))
    say(f"tiny model: up to {warm.steps} warm-up steps on {len(examples)} problems")
    stop = None
    if warm.stop_at_accuracy is not None:
        val = load_prompt_set(config, tokenizer, train=False, images=images)
        stop = accuracy_reached(model, tokenizer, val, config)
    pad = tokenizer.pad_token_id
    losses = supervised_warmup(model, pad, examples, config, syn.seed, stop, pixels)
    say(f"tiny model: warmed up for {len(losses)} steps")
