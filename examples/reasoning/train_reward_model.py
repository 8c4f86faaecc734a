"""Train a tiny reward model on the shipped arithmetic task, for ``reward.kind: model``.

    python examples/reasoning/train_reward_model.py [--out .cache/rlcore/tiny-rm] [k=v ...]
    python examples/reasoning/main.py --config reasoning/tiny_arith_rm_ppo

The warmed-up tiny policy (``reasoning/tiny_arith_ppo``'s, built or found cached) samples
``--samples`` answers to each of ``--prompts`` training problems; answers the task's rule finds
right are paired with wrong ones to the same problem, and each training problem also gets
``--near-misses`` wrong sums (off by 1, 2, 9, 10, 11, 20, 30 or 100: a sum's slipped digits and
carries) to rank below its right one, and with ``--malformed`` (the default) three responses
that give no answer in the asked format (none, ``####`` alone, the sum without it) to rank below
its wrong sums, so that answering nothing never pays. The reward model is a
sequence-classification model (a new one-logit head on the last token) made from a stronger
model than the policy: the tiny model warmed up ``--base-warmup-steps`` steps on the task
(``--from-policy``: the policy's own weights, as RLHF's reward models start from the SFT model).
It learns to score the right response above the wrong ones of its problem (``--loss ranking``:
the softmax cross-entropy over a problem's responses, Bradley-Terry's ``-log sigmoid(r_right -
r_wrong)`` for a pair), and is saved with the tokenizer to ``--out``. It reads exactly what
``reward.kind: model`` gives it: the prompt's text followed by the response's
(``rlcore/rewards/model.py``). Held-out accuracies are printed (pairwise; the right
answer ranked first); overrides (``k=v``) go to the policy's config. The defaults are the recipe
measured in docs/rewards.md.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch
import torch.nn.functional as F

from rlcore.config import load_config
from rlcore.data.sampler import load_prompt_set, prompt_batch
from rlcore.data.sequences import response_mask
from rlcore.log import say
from rlcore.models.lm import load_causal_lm, load_tokenizer
from rlcore.prepare import prepare_models
from rlcore.rewards.model import reward_model_text
from rlcore.rewards.verdicts import Rules, rule_verdict


def malformed(answer: int) -> list[str]:
    """Responses that give no answer in the asked format: none, the marker alone, the sum without
    it. Ranked below every well-formed sum, right or wrong: a reward model that never saw them
    scores them at random, and the policy learns whichever it scores above its wrong sums (the
    empty response, found when the tiny model changed: validation accuracy 0.445 to 0.42)."""
    return ["", " ####", f" {answer}"]


@torch.no_grad()
def sample_pairs(
    config, actor_dir, prompts: int, samples: int, seed: int, bad: bool = True
) -> list[tuple]:
    """``(prompt text, right response, wrong response)`` for each problem whose samples hold
    both, followed by its ``malformed`` responses when ``bad``; the policy samples at the
    training temperature."""
    torch.manual_seed(seed)
    tokenizer = load_tokenizer(actor_dir)
    policy = load_causal_lm(actor_dir, "float32").eval()
    train = load_prompt_set(config, tokenizer, train=True)
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
            verdicts = [
                rule_verdict(rules, None, texts[i], train.answers[row], i).correct for i in group
            ]
            right = [texts[i] for i, v in zip(group, verdicts, strict=True) if v]
            wrong = [texts[i] for i, v in zip(group, verdicts, strict=True) if not v]
            tail = malformed(int(train.answers[row])) if bad else []
            pairs += [(prompt, r, w, *tail) for r, w in zip(right, wrong, strict=False)]
    return pairs


def near_misses(config, actor_dir, count: int, seed: int, bad: bool = True) -> list[tuple]:
    """For each training problem, the right answer and ``count`` near misses (the sum off by 1,
    2, 9, 10, 11, 20, 30 or 100 either way, each at most once: the slips of a sum's digits and
    carries), written as the policy writes its answers: what the sampled pairs hold too few of
    for a small model to learn to check a sum. One tuple ``(prompt, right, wrong, ...)`` a
    problem, its ``malformed`` responses last when ``bad``: the loss ranks the right one above
    all."""
    rng = random.Random(seed)
    tokenizer = load_tokenizer(actor_dir)
    train = load_prompt_set(config, tokenizer, train=True)
    offsets = [d * sign for d in (1, 2, 9, 10, 11, 20, 30, 100) for sign in (-1, 1)]
    pad, items = tokenizer.pad_token_id, []
    for row in range(len(train.answers)):
        batch = prompt_batch([row], train, 1, pad)
        keep = batch["attention_mask"][0].bool()
        prompt = tokenizer.decode(batch["input_ids"][0][keep], skip_special_tokens=True)
        answer = int(train.answers[row])
        wrong = [f" #### {answer + d}" for d in rng.sample(offsets, min(count, len(offsets)))]
        items.append((prompt, f" #### {answer}", *wrong, *(malformed(answer) if bad else [])))
    return items


def ranking_loss(logits: torch.Tensor, bad: int = 0) -> torch.Tensor:
    """``logits`` ``[rows, responses]``, each row's right response first: the cross-entropy of
    the right one under the softmax of the row's scores, plus, when the last ``bad`` responses
    are malformed, the mean cross-entropy of each well-formed wrong one among it and them."""
    value = F.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long))
    if bad and logits.shape[1] > 1 + bad:
        formed, worse = logits[:, 1:-bad], logits[:, -bad:]
        tiers = torch.cat(
            [formed[..., None], worse[:, None].expand(-1, formed.shape[1], -1)], -1
        ).flatten(0, 1)  # [rows x wrong, 1 + bad]: a wrong sum, then the malformed ones
        value = value + F.cross_entropy(tiers, torch.zeros(len(tiers), dtype=torch.long))
    return value


def train_reward_model(
    actor_dir,
    items,
    out: Path,
    epochs: int,
    lr: float,
    seed: int,
    loss: str = "ranking",
    bad: int = 0,
) -> dict:
    """``items``: ``(prompt, right, wrong, ...)`` tuples (90% train, 10% held out). ``loss``
    ``ranking``: the cross-entropy of the right response under the softmax of the scores of the
    tuple's responses (with one wrong response, Bradley-Terry's
    ``-log sigmoid(r_right - r_wrong)``): scores comparable within a problem only;
    ``verifier``: each response's binary cross-entropy against its verdict (Cobbe et al.'s
    verifier): the score is the log-odds that the response is right, comparable across
    problems, which a critic's per-prompt baseline needs less to learn. ``bad``: each tuple's
    last ``bad`` responses are malformed, and ``ranking`` also ranks each of its well-formed
    wrong responses above them (the cross-entropy of the wrong one among it and them). The
    model is saved to ``out``."""
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(seed)
    tokenizer = load_tokenizer(actor_dir)
    tokenizer.padding_side = "right"
    # the policy was warmed up on plain prompts, not chat turns: the reward model reads (and is
    # saved to read) the plain text too, which its features were learned on
    tokenizer.chat_template = None
    model = AutoModelForSequenceClassification.from_pretrained(str(actor_dir), num_labels=1)
    model.config.pad_token_id = tokenizer.pad_token_id
    random.Random(seed).shuffle(items)
    held = max(1, len(items) // 10)
    test, train = items[:held], items[held:]
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr)

    def scores(rows: list[tuple]) -> torch.Tensor:
        """``[rows, responses]``: each row's responses scored (rows of one width)."""
        texts = [reward_model_text(tokenizer, row[0], r) for row in rows for r in row[1:]]
        encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=True)
        return model(**encoded).logits[:, 0].reshape(len(rows), -1)

    def batches(rows: list[tuple], size: int):
        """``rows`` in batches of tuples of one width."""
        for width in sorted({len(row) for row in rows}):
            same = [row for row in rows if len(row) == width]
            for start in range(0, len(same), size):
                yield same[start : start + size]

    for epoch in range(epochs):
        model.train()
        random.Random(seed + epoch).shuffle(train)
        for rows in batches(train, 32):
            logits = scores(rows)
            if loss == "ranking":
                value = ranking_loss(logits, bad)
            else:  # the first response of each tuple is the right one
                labels = torch.zeros_like(logits)
                labels[:, 0] = 1.0
                value = F.binary_cross_entropy_with_logits(logits, labels)
            optimiser.zero_grad()
            value.backward()
            optimiser.step()
    model.eval()
    pairwise, top, pairs, verdicts, responses = 0.0, 0, 0, 0, 0
    with torch.no_grad():
        for rows in batches(test, 64):
            logits = scores(rows)
            pairwise += float((logits[:, :1] > logits[:, 1:]).float().sum())
            pairs += logits[:, 1:].numel()
            top += int((logits.argmax(-1) == 0).sum())
            verdicts += int((logits[:, 0] > 0).sum() + (logits[:, 1:] <= 0).sum())
            responses += logits.numel()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {
        "items": len(items),
        "held_out": held,
        "held_out_pairwise_accuracy": round(pairwise / pairs, 4),
        "held_out_right_ranked_first": round(top / held, 4),
        "held_out_verdict_accuracy": round(verdicts / responses, 4),  # (score > 0) = right
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--out", default=".cache/rlcore/tiny-rm")
    parser.add_argument("--prompts", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--near-misses",
        type=int,
        default=8,
        help="near misses ranked below the right answer, per training problem (at most 16)",
    )
    parser.add_argument(
        "--malformed",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="rank each problem's malformed responses (none, '####' alone, the sum without it) "
        "below its wrong sums",
    )
    parser.add_argument(
        "--loss",
        choices=("ranking", "verifier"),
        default="ranking",
        help="ranking: the right response above the wrong ones of its problem (Bradley-Terry "
        "for one); verifier: each response's log-odds of being right",
    )
    parser.add_argument(
        "--base-warmup-steps",
        type=int,
        default=1000,
        help="start the reward model from the tiny model warmed up this many steps (no early "
        "stop: a stronger model than the policy)",
    )
    parser.add_argument(
        "--from-policy",
        action="store_true",
        help="start the reward model from the policy's weights instead",
    )
    args = parser.parse_args()
    config = load_config("reasoning/tiny_arith_ppo", args.overrides)
    actor = prepare_models(config).actor
    base = actor
    if not args.from_policy:
        longer = [f"warmup.steps={args.base_warmup_steps}", "warmup.stop_at_accuracy=null"]
        base = prepare_models(load_config("reasoning/tiny_arith_ppo", [*args.overrides, *longer]))
        base = base.actor
    pairs = sample_pairs(config, actor, args.prompts, args.samples, args.seed, args.malformed)
    say(f"{len(pairs)} (right, wrong) pairs from {args.prompts} problems x {args.samples}")
    if args.near_misses:
        pairs += near_misses(config, actor, args.near_misses, args.seed, args.malformed)
    bad = len(malformed(0)) if args.malformed else 0
    result = train_reward_model(
        base, pairs, Path(args.out), args.epochs, args.lr, args.seed, args.loss, bad
    )
    say(f"reward model saved to {args.out}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
