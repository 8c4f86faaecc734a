"""Where metrics go: wandb with a key but no reachable server logs offline at once, and says so
(before, wandb.init retried for 104 s and then raised)."""

import time

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
