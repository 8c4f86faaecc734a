"""Seconds per PPO iteration by stage, and tokens/s, for a reasoning config; then validation
accuracy before and after. One JSON line per seed, then a median line.

    python benchmarks/reasoning.py [k=v ...] [--config reasoning/tiny_arith_ppo] [--seeds 1 2 3]

(overrides before the options: ``--seeds`` takes every value that follows it)

``padding_share``: the share of the batch's token positions that are padding (prompts
left-padded to the longest, responses right-padded to the batch's longest);
``update_padding_share``: that of the actor update's passes (each micro-batch cut to its own
longest, or packed with ``actor.model.use_remove_padding=true``). Stages: generate
(rollout), reward, logprob (actor's old log-probs), ref, values (critic),
critic_update, actor_update, sync (weights to the rollout). ``perf.tokens_per_s`` counts prompt
and response tokens of the batch over the whole iteration; ``generated_tokens_per_s`` the
response tokens over the generate stage. The warm-up of the tiny model is not timed (it is
cached after the first run); the first seed builds it if needed. ``--count-flops`` adds
``gflop_per_stage`` and ``gflop_per_iteration``, each stage's floating-point operations per
iteration (torch's ``FlopCounterMode``; the seconds of such a run are not comparable: counting
slows every operation). ``curve``: at each validation, ``[iteration, response tokens
generated so far, val/accuracy, seconds since the run started]`` (to compare recipes at equal
generated tokens, e.g. ``--config reasoning/tiny_arith_dapo`` against the PPO default, or to
read the time to an accuracy; the seconds include validation). ``--blank-images``: the visual
task's images (``data.synthetic.images``) all black in the run's prompts, training and
validation, its model built and warmed up on the real ones: the control that the policy reads
the image (its accuracy should stay where it starts).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time

from rlcore.config import load_config
from rlcore.placement import plan_for_config
from rlcore.prepare import prepare_models
from rlcore.runners.reasoning import ReasoningRunner

KEYS = (
    "val_accuracy_before",
    "val_accuracy_after",
    "iterations",
    "wall_s",
    "padding_share",
    "update_padding_share",
)


def count_flops_per_stage() -> dict[str, float]:
    """From now on, every stage the runner times (``Stopwatch``) also counts its floating-point
    operations with torch's ``FlopCounterMode`` (matrix products, and attention where torch
    counts it), summed per stage in the dict returned. Only operations run in this process are
    seen: the default placement, where every component is in the driver's process."""
    from collections import defaultdict
    from contextlib import contextmanager

    from torch.utils.flop_counter import FlopCounterMode

    from rlcore.runners.progress import Stopwatch

    counted: dict[str, float] = defaultdict(float)
    timed = Stopwatch.__call__

    @contextmanager
    def counting(self, stage):
        with FlopCounterMode(display=False) as counter, timed(self, stage):
            yield
        counted[stage] += counter.get_total_flops()

    Stopwatch.__call__ = counting
    return counted


class CurveRunner(ReasoningRunner):
    """The runner, noting the generated tokens, accuracy and wall time at each validation."""

    def run(self) -> dict:
        self.started = time.perf_counter()
        return super().run()

    def evaluate(self, iteration: int) -> dict[str, float]:
        metrics = super().evaluate(iteration)
        self.curve = [
            *getattr(self, "curve", []),
            [
                iteration,
                self.generated_tokens,
                metrics.get("val/accuracy"),
                round(time.perf_counter() - self.started, 1),
            ],
        ]
        return metrics


@contextlib.contextmanager
def blank_images():
    """Inside, the synthetic task's prompt sets have black images of the same size."""
    from PIL import Image

    from rlcore.data import sampler

    drawn = sampler.synthetic_rows

    def blank(syn, train):
        rows = drawn(syn, train)
        for row in rows:
            row["images"] = [Image.new("RGB", image.size) for image in row.get("images", [])]
        return rows

    sampler.synthetic_rows = blank
    try:
        yield
    finally:
        sampler.synthetic_rows = drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="reasoning/tiny_arith_ppo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--count-flops", action="store_true")
    parser.add_argument("--blank-images", action="store_true")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    flops = count_flops_per_stage() if args.count_flops else None
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for seed in args.seeds:
            config = load_config(
                args.config,
                [
                    *args.overrides,
                    f"runner.seed={seed}",
                    "runner.progress=false",
                    f"runner.output_dir={out}",
                    "logger.tensorboard=false",
                ],
            )
            models = prepare_models(config)  # (built on the real images)
            with blank_images() if args.blank_images else contextlib.nullcontext():
                runner = CurveRunner(config, plan_for_config(config), models)
            summary = runner.run()
            row = {
                "config": args.config,
                "seed": seed,
                **{k: summary[k] for k in KEYS},
                "generated_tokens": summary["generated_tokens"],
                "curve": runner.curve,
                "gain": round(summary["val_accuracy_after"] - summary["val_accuracy_before"], 4),
                "seconds_per_stage": summary["seconds_per_stage"],
                "tokens_per_s": summary["tokens_per_s"],
            }
            if flops is not None:
                row["gflop_per_stage"] = {
                    k: round(v / summary["iterations"] / 1e9, 4) for k, v in flops.items()
                }
                row["gflop_per_iteration"] = round(
                    sum(flops.values()) / summary["iterations"] / 1e9, 4
                )
                flops.clear()
            rows.append(row)
            print(json.dumps(row), flush=True)
    median = {"config": args.config, "seeds": args.seeds, "median": True}
    for key in (*KEYS, "gain"):
        median[key] = statistics.median(r[key] for r in rows)
    median["seconds_per_stage"] = {
        stage: statistics.median(r["seconds_per_stage"][stage] for r in rows)
        for stage in rows[0]["seconds_per_stage"]
    }
    print(json.dumps(median), flush=True)


if __name__ == "__main__":
    main()
