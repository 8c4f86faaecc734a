"""Scoring throughput of ``reward.kind: model`` on CPU: samples/s per reward rank, 1 and 2 ranks.

    python benchmarks/reward_model.py --model .cache/rlcore/tiny-rm [--rows 128] [--repeats 5]

A batch of ``--rows`` training prompts of the default task with answers written as the policy
writes them is scored by the reward component (``RewardWorker.score``, one torch thread a
process): once in this process (1 rank: every row), then by 2 processes at once, each its half
(2 ranks, as ``Dispatch.SHARD`` splits it). One JSON line per layout: the median seconds of a
batch over ``--repeats`` and samples/s per rank and in all.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time

import torch


def batch_of(config, tokenizer, rows: int):
    from rlcore.data.sampler import load_prompt_set, prompt_batch

    train = load_prompt_set(config, tokenizer, train=True)
    batch = prompt_batch(list(range(rows)), train, 1, tokenizer.pad_token_id)
    texts = [f" #### {train.answers[i]}" for i in range(rows)]
    encoded = tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    mask = encoded["attention_mask"]
    responses = torch.where(mask.bool(), encoded["input_ids"], tokenizer.pad_token_id)
    batch["input_ids"] = torch.cat([batch["input_ids"], responses], dim=1)
    batch["attention_mask"] = torch.cat([batch["attention_mask"], mask], dim=1)
    batch["responses"], batch["response_mask"] = responses, mask
    return batch


def seconds_per_batch(model: str, rows: slice, total: int, repeats: int, out=None) -> float:
    from rlcore.config import load_config
    from rlcore.models.lm import load_tokenizer
    from rlcore.prepare import prepare_models
    from rlcore.rewards.worker import RewardWorker

    torch.set_num_threads(1)
    config = load_config(
        "reasoning/tiny_arith_ppo", ["reward.kind=model", f"reward.model.path={model}"]
    )
    actor = prepare_models(config).actor
    batch = batch_of(config, load_tokenizer(actor), total)[rows]
    worker = RewardWorker(None, config, actor)
    worker.score(batch)  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        worker.score(batch)
        times.append(time.perf_counter() - start)
    worker.close()
    median = statistics.median(times)
    if out is not None:
        out.put(median)
    return median


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    one = seconds_per_batch(args.model, slice(None), args.rows, args.repeats)
    print(
        json.dumps(
            {
                "ranks": 1,
                "batch_s": round(one, 4),
                "samples_per_s_per_rank": round(args.rows / one, 1),
                "samples_per_s": round(args.rows / one, 1),
            }
        )
    )
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    half = args.rows // 2
    procs = [
        context.Process(
            target=seconds_per_batch,
            args=(args.model, part, args.rows, args.repeats, out),
        )
        for part in (slice(0, half), slice(half, args.rows))
    ]
    for p in procs:
        p.start()
    two = [out.get() for _ in procs]
    for p in procs:
        p.join()
    slowest = max(two)
    print(
        json.dumps(
            {
                "ranks": 2,
                "batch_s": round(slowest, 4),
                "samples_per_s_per_rank": round(half / slowest, 1),
                "samples_per_s": round(args.rows / slowest, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
