"""Resolve a reasoning run's models to local directories, building and warming up the tiny model
when ``actor.model.path`` is null.

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
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from rlcore.config.errors import ConfigError
from rlcore.config.schema import ReasoningConfig
from rlcore.data.arith import arithmetic_problems
from rlcore.data.sampler import load_prompt_set
from rlcore.data.sequences import left_pad
from rlcore.models.lm import build_tiny_lm, check_model_dir, train_tiny_tokenizer
from rlcore.rewards.rules import gsm8k_correct


@dataclass(frozen=True)
class ModelDirs:
    """Where each model of the run is read from: the actor (and the reference), the critic."""

    actor: Path
    critic: Path


def prepare_models(config: ReasoningConfig, log: Any = print) -> ModelDirs:
    """The run's model directories; builds (or finds cached) the tiny model when no path is set."""
    model = config.actor.model
    if model.path is not None:
        if config.warmup.steps:
            raise ConfigError(
                "warmup.steps: the supervised warm-up trains the tiny model only; set it to 0 "
                "when actor.model.path is set"
            )
        actor = check_model_dir(model.path, "actor.model.path", tokenizer=True)
    else:
        actor = _tiny_model_dir(config, log)
    critic = actor
    if config.critic.model_path is not None:
        critic = check_model_dir(config.critic.model_path, "critic.model_path")
    return ModelDirs(actor=actor, critic=critic)


def _fingerprint(config: ReasoningConfig) -> str:
    shape = {
        "tiny": dataclasses.asdict(config.actor.model.tiny),
        "synthetic": dataclasses.asdict(config.data.synthetic),
        "suffix": config.data.prompt_suffix,
        "chat": config.data.chat_template,
        "warmup": {k: v for k, v in dataclasses.asdict(config.warmup).items() if k != "cache_dir"},
        "version": 3,  # bump when the recipe below changes
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


def _tiny_model_dir(config: ReasoningConfig, log: Any) -> Path:
    directory = Path(config.warmup.cache_dir).expanduser() / f"tiny-{_fingerprint(config)}"
    if (directory / "config.json").is_file():
        log(f"tiny model: cached at {directory}")
        return directory
    syn = config.data.synthetic
    rows = arithmetic_problems(
        syn.num_train, digits=syn.digits, operations=syn.operations, seed=syn.seed
    )
    suffix = config.data.prompt_suffix
    corpus = [row["question"] + suffix + " " + row["answer"] for row in rows]
    tokenizer = train_tiny_tokenizer(corpus)
    tiny = config.actor.model.tiny
    model = build_tiny_lm(
        tokenizer,
        hidden_size=tiny.hidden_size,
        num_layers=tiny.num_layers,
        num_heads=tiny.num_heads,
        intermediate_size=tiny.intermediate_size,
        seed=syn.seed,
    )
    if config.warmup.steps:
        examples = sft_examples(rows, tokenizer, suffix, config.data.chat_template)
        warm = config.warmup
        log(f"tiny model: up to {warm.steps} warm-up steps on {len(examples)} problems")
        stop = None
        if warm.stop_at_accuracy is not None:
            val = load_prompt_set(config, tokenizer, train=False, log=log)
            stop = _accuracy_reached(model, tokenizer, val, config, log)
        losses = supervised_warmup(model, tokenizer.pad_token_id, examples, config, syn.seed, stop)
        log(f"tiny model: warmed up for {len(losses)} steps")
    staging = directory.with_name(directory.name + f".tmp{os.getpid()}")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)  # atomic: a crash mid-save leaves no half-written cache entry
    log(f"tiny model: saved to {directory}")
    return directory


def sft_examples(
    rows: list[dict[str, str]], tokenizer: Any, suffix: str, chat: bool
) -> list[tuple[list[int], list[int]]]:
    """``(prompt_ids, target_ids)`` pairs, the prompt tokenised exactly as the runner does."""
    examples = []
    for row in rows:
        text = row["question"] + suffix
        if chat:
            text = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
            )
        prompt = tokenizer(text, add_special_tokens=not chat)["input_ids"]
        target = tokenizer(("" if chat else " ") + row["answer"], add_special_tokens=False)
        examples.append((prompt, target["input_ids"] + [tokenizer.eos_token_id]))
    return examples


def _accuracy_reached(
    model: Any, tokenizer: Any, val: Any, config: ReasoningConfig, log: Any
) -> Any:
    """The warm-up's stop test: greedy validation accuracy >= ``warmup.stop_at_accuracy``."""
    target = config.warmup.stop_at_accuracy

    def reached(step: int) -> bool:
        accuracy = greedy_accuracy(model, tokenizer, val, config)
        log(f"tiny model: warm-up step {step}: validation accuracy {accuracy:.3f}")
        return accuracy >= target

    return reached


@torch.no_grad()
def greedy_accuracy(model: Any, tokenizer: Any, prompts: Any, config: ReasoningConfig) -> float:
    """Share of ``prompts`` (a ``PromptSet``) answered right by greedy decoding, scored by the
    GSM8K rule (``reward.gsm8k_mode``) as the synthetic task's answers are written."""
    was_training = model.training
    model.eval()
    ids, mask = left_pad(prompts.prompts, tokenizer.pad_token_id)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=config.data.max_response_length,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model.train(was_training)
    texts = tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
    mode = config.reward.gsm8k_mode
    right = [bool(gsm8k_correct(t, a, mode)) for t, a in zip(texts, prompts.answers, strict=True)]
    return sum(right) / len(right)


def supervised_warmup(
    model: torch.nn.Module,
    pad_id: int,
    examples: list[tuple[list[int], list[int]]],
    config: ReasoningConfig,
    seed: int,
    stop: Any = None,
) -> list[float]:
    """At most ``warmup.steps`` AdamW steps of next-token loss on the targets only; returns the
    losses. ``stop(step)``, asked every ``warmup.check_every`` steps, ends it when True."""
    warm = config.warmup
    generator = torch.Generator().manual_seed(seed)
    # A constant learning rate: the warm-up is meant to stop part-way (the model answers in the
    # right format and is sometimes right), and PPO goes on from there.
    optimizer = torch.optim.AdamW(model.parameters(), lr=warm.lr, weight_decay=0.0)
    model.train()
    losses = []
    bar = tqdm(
        range(warm.steps), desc="warm-up", file=sys.stderr, disable=not config.runner.progress
    )
    for step in bar:
        if stop is not None and step and step % warm.check_every == 0 and stop(step):
            break
        picked = torch.randint(len(examples), (warm.batch_size,), generator=generator)
        ids, labels, mask = _right_padded([examples[i] for i in picked.tolist()], pad_id)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=round(losses[-1], 3), refresh=False)
    model.eval()
    return losses


def _right_padded(
    pairs: list[tuple[list[int], list[int]]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(p) + len(t) for p, t in pairs)
    ids = torch.full((len(pairs), width), pad_id)
    labels = torch.full((len(pairs), width), -100)  # -100: no loss on the prompt and the padding
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    for row, (prompt, target) in enumerate(pairs):
        n = len(prompt) + len(target)
        ids[row, :n] = torch.tensor(prompt + target)
        labels[row, len(prompt) : n] = torch.tensor(target)
        mask[row, :n] = 1
    return ids, labels, mask
