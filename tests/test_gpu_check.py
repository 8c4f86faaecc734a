"""benchmarks/gpu_check.py stays runnable: on a CPU with a small model here, on a GPU in full (a
test skipped where no GPU is visible)."""

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from tests import forked

ROOT = Path(__file__).resolve().parents[1]


def gpu_check(*args, timeout):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    script = str(ROOT / "benchmarks" / "gpu_check.py")
    done = forked.run(
        [sys.executable, script, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, {row["check"]: row for row in rows}, done.stderr


def test_the_qwen_iteration_reports_every_stage_on_a_cpu_with_a_small_model(tmp_path):
    code, rows, err = gpu_check(
        "--device",
        "cpu",
        "--small",
        "--only",
        "qwen_fsdp2",
        "generate",
        "moe",
        "ulysses",
        "qwen_megatron",
        "maniskill",
        "maniskill_ppo",
        "maniskill_rgb_ppo",
        "maniskill_lm_ppo",
        "--iterations",
        "1",
        "--micro-batch",
        "4",
        "--out",
        str(tmp_path),
        timeout=240,
    )
    assert code == 0, err[-2000:]
    row = rows["qwen_fsdp2"]
    assert row["ok"] and row["backend"] == "fsdp2"
    stages = row["stages"]
    for stage in (
        "generate",
        "reward",
        "logprob",
        "ref",
        "values",
        "critic_update",
        "actor_update",
    ):
        assert stages[stage]["seconds"] >= 0 and stages[stage]["tokens_per_s"] > 0, stage
    # MFU needs a GPU's peak; the FLOP rate is reported anyway
    assert stages["actor_update"]["mfu"] is None and stages["actor_update"]["tflops"] >= 0
    # the static-cache loop beside transformers' generate: float32 on a CPU, the same tokens
    row = rows["generate"]
    assert row["ok"] and row["errors"] == {}, row
    assert row["greedy_tokens_identical"] == 1.0
    for path in ("generate", "graph"):  # both record the log-probs a forward pass gives
        assert row["log_prob_error_vs_forward"][path]["max"] < 1e-4, path
    # the tiny MoE job ran, and the bf16 replay measure (its figures: docs/moe.md)
    row = rows["moe"]
    assert row["ok"] and row["iterations"] == 2, row
    replay = row["replay_bf16"]
    assert 0 <= replay["routing_mismatch"] <= 1 and replay["sampled_tokens"] > 0
    for way in ("replay", "no_replay"):
        assert 0 <= replay[way]["max_abs_log_prob_gap"] < 1, way
    # sequence parallelism on 2 gloo ranks: less kept for the backward pass, the same loss
    row = rows["ulysses"]
    assert row["ok"] and 0.3 < row["reduction"] < 0.6, row
    need_cuda = ("qwen_megatron", "maniskill", "maniskill_ppo", "maniskill_rgb_ppo")
    for check in (*need_cuda, "maniskill_lm_ppo"):  # these need CUDA
        assert rows[check]["ok"] is None and "skipped" in rows[check]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")
def test_every_check_passes_on_a_gpu(tmp_path):
    code, rows, err = gpu_check("--out", str(tmp_path), timeout=1800)
    assert code == 0, (rows, err[-2000:])
