"""Where metrics go: wandb with a key but no reachable server logs offline at once, and says so
(before, wandb.init retried for 104 s and then raised)."""

import time

import pytest

from rlcore.runners.metrics import MetricsLogger


def test_wandb_without_a_reachable_server_logs_offline_within_seconds(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens on port 9
    monkeypatch.setenv("WANDB_SILENT", "true")
    start = time.monotonic()
    logger = MetricsLogger(tmp_path, tensorboard=False, wandb=True, config={"a": 1})
    logger.log(1, {"reward/mean": 0.5})
    logger.close()
    assert time.monotonic() - start < 20  # the import of wandb included
    assert "127.0.0.1:9 is not reachable" in capsys.readouterr().err
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_wandb_logs_to_the_configs_project(tmp_path, monkeypatch):
    import wandb

    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # (offline: no server asked)
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = {"logger": {"project": "verl_grpo_example_gsm8k"}}  # (verl's trainer.project_name)
    logger = MetricsLogger(tmp_path, tensorboard=False, wandb=True, config=config)
    try:
        assert wandb.run.project == "verl_grpo_example_gsm8k"
    finally:
        logger.close()


def test_busy_shares_are_each_components_seconds_in_calls_over_the_iteration():
    from rlcore.runners.loop import busy_shares

    before = {"actor": {0: 1.0, 1: 2.0}, "rollout": {0: 5.0}}
    after = {"actor": {0: 1.5, 1: 2.3}, "rollout": {0: 5.2}, "reward": {0: 0.1}}
    shares = busy_shares(before, after, seconds=0.5)
    # actor: ranks spent 0.5 and 0.3 s, mean 0.4 of 0.5 s; a component first seen counts from 0
    assert shares == pytest.approx(
        {"perf/busy/actor": 0.8, "perf/busy/rollout": 0.4, "perf/busy/reward": 0.2}
    )
    assert busy_shares({}, {}, 0.5) == {}  # in the driver's process: nothing timed apart
