"""Train a tiny reward model on the shipped arithmetic task, for ``reward.kind: model``.

    python examples/reasoning/train_reward_model.py [--out .cache/rlcore/tiny-rm] [k=v ...]
    python examples/reasoning/main.py --config reasoning/tiny_arith_rm_ppo

The warmed-up tiny policy (``reasoning/tiny_arith_ppo``'s, built or found cached) samples
``--samples`` answers to each of ``--prompts`` training problems; answers the task's rule finds
right are paired with wrong ones to the same problem. A sequence-classification model made from
the policy's own weights (a new one-logit head on its last token) learns to score the right one
higher (the Bradley-Terry loss, ``-log sigmoid(r_right - r_wrong)``), and is saved with the
tokenizer to ``--out``. It reads exactly what ``reward.kind: model`` gives it: the prompt's text
followed by the response's (``rlcore/workers/reward_model.py``). The pairwise accuracy on held-out
problems is printed; overrides (``k=v``) go to the policy's config.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch

from rlcore.config import load_config
from rlcore.data.sampler import load_prompt_set, prompt_batch
from rlcore.data.sequences import response_mask
from rlcore.log import say
from rlcore.models.lm import load_causal_lm, load_tokenizer
from rlcore.prepare import prepare_models
from rlcore.rewards.judge import Rules, judge
from rlcore.workers.reward_model import reward_model_text


@torch.no_grad()
def sample_pairs(config, actor_dir, prompts: int, samples: int, seed: int) -> list[tuple]:
    """``(prompt text, right response, wrong response)`` for each problem whose samples hold
    both; the policy samples at the training temperature."""
    torch.manual_seed(seed)
    tokenizer = load_tokenizer(actor_dir)
    policy = load_causal_lm(actor_dir, "float32").eval()
    train = load_prompt_set(config, tokenizer, train=True, log=lambda message: None)
    rules = Rules.of(config.reward, "gsm8k")
    pad = tokenizer.pad_token_id
    pairs, width = [], config.data.max_response_length
    for start in range(0, prompts, 64):
        rows = list(range(start, min(start + 64, prompts)))
        batch = prompt_batch(rows, train, samples, pad)
        out = policy.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            do_sample=True,
            temperature=config.rollout.temperature,
            top_k=0,
            max_new_tokens=width,
            pad_token_id=pad,
        )
        responses = out[:, batch["input_ids"].shape[1] :]
        mask = response_mask(responses, tokenizer.eos_token_id)
        texts = tokenizer.batch_decode(
            responses * mask + pad * (1 - mask), skip_special_tokens=True
        )
        keep = batch["attention_mask"].bool()
        for g, row in enumerate(rows):
            group = range(g * samples, (g + 1) * samples)
            prompt = tokenizer.decode(
                batch["input_ids"][g * samples][keep[g * samples]], skip_special_tokens=True
            )
            verdicts = [judge(rules, None, texts[i], train.answers[row], i).correct for i in group]
            right = [texts[i] for i, v in zip(group, verdicts, strict=True) if v]
            wrong = [texts[i] for i, v in zip(group, verdicts, strict=True) if not v]
            pairs += [(prompt, r, w) for r, w in zip(right, wrong, strict=False)]
    return pairs


def near_misses(config, actor_dir, count: int, seed: int) -> list[tuple]:
    """``count`` pairs per training problem of the right answer against a near miss (the sum
    off by 1, 2, 9, 10 or 11 either way), written as the policy writes its answers: what the
    sampled pairs hold too few of for a small model to learn to check a sum."""
    rng = random.Random(seed)
    tokenizer = load_tokenizer(actor_dir)
    train = load_prompt_set(config, tokenizer, train=True, log=lambda message: None)
    pad, pairs = tokenizer.pad_token_id, []
    for row in range(len(train.answers)):
        batch = prompt_batch([row], train, 1, pad)
        keep = batch["attention_mask"][0].bool()
        prompt = tokenizer.decode(batch["input_ids"][0][keep], skip_special_tokens=True)
        answer = int(train.answers[row])
        for _ in range(count):
            wrong = answer + rng.choice([1, 2, 9, 10, 11]) * rng.choice([-1, 1])
            pairs.append((prompt, f" #### {answer}", f" #### {wrong}"))
    return pairs


def train_reward_model(actor_dir, pairs, out: Path, epochs: int, lr: float, seed: int) -> dict:
    """Bradley-Terry on ``pairs`` (90% train, 10% held out); the model saved to ``out``."""
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(seed)
    tokenizer = load_tokenizer(actor_dir)
    tokenizer.padding_side = "right"
    # the policy was warmed up on plain prompts, not chat turns: the reward model reads (and is
    # saved to read) the plain text too, which its features were learned on
    tokenizer.chat_template = None
    model = AutoModelForSequenceClassification.from_pretrained(str(actor_dir), num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    random.Random(seed).shuffle(pairs)
    held = max(1, len(pairs) // 10)
    test, train = pairs[:held], pairs[held:]
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr)

    chat = getattr(tokenizer, "chat_template", None) is not None

    def scores(rows: list[tuple], which: int) -> torch.Tensor:
        texts = [reward_model_text(tokenizer, row[0], row[which]) for row in rows]
        encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not chat)
        return model(**encoded).logits[:, 0]

    for epoch in range(epochs):
        model.train()
        random.Random(seed + epoch).shuffle(train)
        for start in range(0, len(train), 32):
            rows = train[start : start + 32]
            loss = -torch.nn.functional.logsigmoid(scores(rows, 1) - scores(rows, 2)).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    model.eval()
    with torch.no_grad():
        accuracy = float((scores(test, 1) > scores(test, 2)).float().mean())
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"pairs": len(pairs), "held_out": held, "held_out_pairwise_accuracy": accuracy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--out", default=".cache/rlcore/tiny-rm")
    parser.add_argument("--prompts", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--near-misses", type=int, default=0, help="near-miss pairs per training problem"
    )
    args = parser.parse_args()
    config = load_config("reasoning/tiny_arith_ppo", args.overrides)
    actor = prepare_models(config).actor
    pairs = sample_pairs(config, actor, args.prompts, args.samples, args.seed)
    say(f"{len(pairs)} (right, wrong) pairs from {args.prompts} problems x {args.samples}")
    if args.near_misses:
        pairs += near_misses(config, actor, args.near_misses, args.seed)
    result = train_reward_model(actor, pairs, Path(args.out), args.epochs, args.lr, args.seed)
    say(f"reward model saved to {args.out}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
