"""benchmarks/trl_baseline.py's same-work comparison of TRL's GRPO and rlcore's (issue 51):
gpu_check's check is skipped where TRL is not importable, the CPU-only TRL runs refuse
``--device cuda``, and where TRL is installed the small comparison runs on the CPU."""

import argparse
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forked

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def trl_baseline(monkeypatch):
    """The script as a module; benchmarks/ on the path for this test only (the script imports
    its neighbours gpu_check, trl_prompts and trl_same_work by name)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("trl_baseline")


def small_args() -> argparse.Namespace:
    return argparse.Namespace(device="cpu", small=True, iterations=2, micro_batch=16)


def test_the_trl_check_is_skipped_with_the_way_to_bring_trl_where_it_is_not_importable(
    trl_baseline, monkeypatch, tmp_path
):
    monkeypatch.setitem(sys.modules, "trl", None)  # import trl raises ImportError
    row = trl_baseline.check_trl_grpo(small_args(), tmp_path)
    assert row["ok"] is None
    assert "gpu_wheels.sh trl" in row["skipped"]
    assert not (tmp_path / "qwen").exists()  # skipped before any model is built


def test_the_cpu_only_trl_runs_refuse_a_cuda_device():
    done = forked.run(
        [sys.executable, str(ROOT / "benchmarks" / "trl_baseline.py"), "grpo", "--device", "cuda"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "leave grpo out for --device cuda" in done.stderr


def test_the_small_comparison_times_both_systems_on_the_same_work(trl_baseline, tmp_path):
    pytest.importorskip("trl")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    row = trl_baseline.check_trl_grpo(small_args(), tmp_path)
    assert row["ok"] is True
    work = row["settings"]
    most = work["prompts"] * work["group"] * work["new_tokens"]
    for system in ("trl", "rlcore"):
        run = row[system]
        assert len(run["seconds_per_iteration_all"]) == 3  # one warm-up, two timed
        assert run["iterations_timed"] == 2
        assert 0 < run["generated_tokens_per_iteration"] <= most
    ratio = row["rlcore_seconds_per_iteration"] / row["trl_seconds_per_iteration"]
    assert row["rlcore_over_trl"] == pytest.approx(ratio, rel=1e-3)


def test_importing_the_script_leaves_the_environment_alone():
    """gpu_check imports it for its check: its other checks' processes must not inherit
    OMP_NUM_THREADS=1 and the like."""
    code = (
        "import os, sys; sys.path.insert(0, sys.argv[1]); before = dict(os.environ); "
        "import trl_baseline; print(sorted(set(os.environ.items()) ^ set(before.items())))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "HF_HUB_OFFLINE")}
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "benchmarks")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
