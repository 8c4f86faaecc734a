"""The supervised warm-up of the tiny model: next-token steps on the synthetic task's answers, so
that PPO starts from a policy that answers in the ``#### N`` format and is sometimes right. A job
of the run's preparation (``rlcore/prepare/models.py``), before any driver is built."""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from tqdm import tqdm

from rlcore.config.schema import ReasoningConfig
from rlcore.data.arith import expression_of
from rlcore.data.sequences import left_pad
from rlcore.log import say
from rlcore.models.lm import evaluating
from rlcore.rewards.rules import gsm8k_correct


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


def tool_examples(
    rows: list[dict[str, str]], tokenizer: Any, suffix: str
) -> list[tuple[list[int], list[int], list[int]]]:
    """``(prompt_ids, target_ids, trained)`` calculator trajectories, tokenised as the agent
    loop lays them out (``rlcore.workers.reasoning.agent_loop``): the model's call with the
    question's expression and its end token, the calculator's answer as a tool message
    (``trained`` 0: no loss on it, as in PPO), then ``#### N`` and the end token."""
    from rlcore.tools.calculator import evaluate
    from rlcore.workers.reasoning.agent_loop import TurnRenderer

    render, eos = TurnRenderer(tokenizer), tokenizer.eos_token_id
    examples = []
    for (prompt, _), row in zip(sft_examples(rows, tokenizer, suffix, True), rows, strict=True):
        expression = expression_of(row["question"])
        call = tokenizer(calculator_call(expression), add_special_tokens=False)["input_ids"]
        result = render.tokens([{"role": "tool", "content": evaluate(expression)}], eos)
        answer = tokenizer(row["answer"], add_special_tokens=False)["input_ids"]
        target = [*call, eos, *result, *answer, eos]
        trained = [1] * (len(call) + 1) + [0] * len(result) + [1] * (len(answer) + 1)
        examples.append((prompt, target, trained))
    return examples


def calculator_call(expression: str) -> str:
    """The Hermes-format call of the calculator on ``expression``."""
    arguments = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
    return f"<tool_call>{arguments}</tool_call>"


def accuracy_reached(model: Any, tokenizer: Any, val: Any, config: ReasoningConfig) -> Any:
    """The warm-up's stop test: greedy validation accuracy >= ``warmup.stop_at_accuracy``."""
    target = config.warmup.stop_at_accuracy

    def reached(step: int) -> bool:
        accuracy = greedy_accuracy(model, tokenizer, val, config)
        say(f"tiny model: warm-up step {step}: validation accuracy {accuracy:.3f}")
        return accuracy >= target

    return reached


@torch.no_grad()
def greedy_accuracy(model: Any, tokenizer: Any, prompts: Any, config: ReasoningConfig) -> float:
    """Share of ``prompts`` (a ``PromptSet``) answered right by greedy decoding, scored by the
    GSM8K rule (``reward.rules.gsm8k_mode``) as the synthetic task's answers are written."""
    ids, mask = left_pad(prompts.prompts, tokenizer.pad_token_id)
    images = {}
    if prompts.images is not None:  # (the visual task: each prompt's image)
        images = {"pixel_values": torch.cat(prompts.images)}
    with evaluating(model):
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            **images,
            do_sample=False,
            max_new_tokens=config.data.max_response_length,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    texts = tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
    mode = config.reward.rules.gsm8k_mode
    right = [bool(gsm8k_correct(t, a, mode)) for t, a in zip(texts, prompts.answers, strict=True)]
    return sum(right) / len(right)


def supervised_warmup(
    model: torch.nn.Module,
    pad_id: int,
    examples: list[tuple[list[int], ...]],
    config: ReasoningConfig,
    seed: int,
    stop: Any = None,
    pixels: list[torch.Tensor] | None = None,
) -> list[float]:
    """At most ``warmup.steps`` AdamW steps of next-token loss on the targets only; returns the
    losses. ``stop(step)``, asked every ``warmup.check_every`` steps, ends it when True.
    ``pixels``: each example's ``[images, C, H, W]`` (a vision-language model's)."""
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
        images = {}
        if pixels is not None:
            images = {"pixel_values": torch.cat([pixels[i] for i in picked.tolist()])}
        loss = model(input_ids=ids, attention_mask=mask, labels=labels, **images).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=round(losses[-1], 3), refresh=False)
    model.eval()
    return losses


def _right_padded(
    examples: list[tuple[list[int], ...]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(prompt, target)`` or ``(prompt, target, trained)`` examples (``trained``: 0 where a
    target token takes no loss, a tool's answer)."""
    width = max(len(e[0]) + len(e[1]) for e in examples)
    ids = torch.full((len(examples), width), pad_id)
    labels = torch.full((len(examples), width), -100)  # -100: no loss on the prompt, padding
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, (prompt, target, *trained) in enumerate(examples):
        n = len(prompt) + len(target)
        ids[row, :n] = torch.tensor(prompt + target)
        taken = torch.tensor(target)
        if trained:
            taken = torch.where(torch.tensor(trained[0]).bool(), taken, -100)
        labels[row, len(prompt) : n] = taken
        mask[row, :n] = 1
    return ids, labels, mask
