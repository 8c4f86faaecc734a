"""Routing replay's effect on one sampled batch (issue 53): how many of the rollout's token-layer
routings the training pass would choose differently, and how far the training pass's log-probs
are from the ones the rollout sampled with, with and without replay. One JSON line per dtype.

    python benchmarks/moe_replay.py [--config reasoning/tiny_arith_moe_ppo] [--rows 128]
        [--dtypes float32 bfloat16] [key=value ...]

The rollout generates with its own key-value cache, token by token; the training pass computes
each sequence at once. Same weights, other sums: where a router's top-k is a near tie, the two
choose different experts, the token goes through other experts, and its log-prob (and the
importance ratio of every PPO term that reads it) moves. Replay routes the training pass by the
rollout's record. In bfloat16 the sums round coarser and more ties flip.

Measured on the sampled tokens of one training batch of the tiny MoE (the config's model, its
warm-up cached as a run caches it): ``routing_mismatch`` (share of the recorded token-layer
routings the training pass's routers choose otherwise), and per replay on/off the mean and
largest absolute log-prob difference from the rollout's and the share of tokens off by more than
1e-3; and, since the largest gap over all tokens may be the dtype's own rounding rather than a
flip's (bfloat16 on one CPU puts it at 0.026, on another at 0.061, either way), the largest gap
on the tokens a flip reaches (``tokens_a_flip_reaches``: where the passes with and without
replay differ, a flip having changed the token's own routing or, through attention, an earlier
token's).
"""

from __future__ import annotations

import argparse
import json

import torch

from rlcore.columns import ROLLOUT_LOG_PROBS, ROUTED_EXPERTS
from rlcore.config import load_config
from rlcore.data.sampler import load_prompt_set, prompt_batch
from rlcore.prepare import prepare_models
from rlcore.scheduler.worker import WorkerContext
from rlcore.workers.reasoning.lm_actor import LMActor
from rlcore.workers.reasoning.rollout import HFEngine


def measure(config, dirs, rows: int, seed: int, device: str = "cpu") -> dict:
    ctx = WorkerContext(
        component="bench", rank=0, world_size=1, local_rank=0, node=0, devices=(0,), device=device
    )
    actor = LMActor(ctx, config, dirs.actor)
    engine = HFEngine(config, dirs.actor, torch.device(device), model=None)
    engine.model.load_state_dict(actor.model.state_dict())  # the same weights, its own module
    prompts = load_prompt_set(config, engine.tokenizer, train=True, quiet=True)
    batch = prompt_batch(list(range(rows)), prompts, 1, engine.tokenizer.pad_token_id)
    torch.manual_seed(seed)
    sampled = engine.generate(batch, greedy=False, log_probs=True)
    valid = sampled["response_mask"].bool()
    rollout = sampled[ROLLOUT_LOG_PROBS].float()
    out = {}
    replayed = actor.compute_log_probs(sampled).float()
    compared, flipped = actor.routings
    out["routing_mismatch"] = flipped / max(compared, 1)
    free = sampled.exclude(ROUTED_EXPERTS)
    plain = LMActor(ctx, _without_replay(config), dirs.actor)
    plain.model.load_state_dict(actor.model.state_dict())
    own = plain.compute_log_probs(free).float()
    # the two training passes differ in routing alone: where their log-probs differ, a flip
    # reached the token (its own routing, or an earlier token's through attention)
    reached = (replayed != own) & valid
    for name, logp in (("replay", replayed), ("no_replay", own)):
        gap = (logp - rollout).abs()
        sampled_gap = gap[valid]
        out[name] = {
            "mean_abs_log_prob_gap": float(sampled_gap.mean()),
            "max_abs_log_prob_gap": float(sampled_gap.max()),
            "tokens_off_1e-3": float((sampled_gap > 1e-3).float().mean()),
            "max_gap_where_flipped": float(gap[reached].max()) if reached.any() else 0.0,
        }
    out["tokens_a_flip_reaches"] = float(reached.sum() / valid.sum())
    out["sampled_tokens"] = int(valid.sum())
    return out


def _without_replay(config):
    from rlcore.config import replace_keys

    return replace_keys(config, {"rollout.routing_replay": False})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="reasoning/tiny_arith_moe_ppo")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    args, overrides = parser.parse_known_args()
    torch.set_num_threads(1)
    for dtype in args.dtypes:
        keys = [*overrides, f"actor.model.dtype={dtype}", "actor.recompute_log_probs=true"]
        config = load_config(args.config, keys)
        dirs = prepare_models(config)
        row = {"config": args.config, "dtype": dtype, "rows": args.rows}
        print(json.dumps(row | measure(config, dirs, args.rows, args.seed)), flush=True)


if __name__ == "__main__":
    main()
