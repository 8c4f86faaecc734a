"""Where a run's metrics go: tensorboard (default), Weights & Biases and the console (when
enabled)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm


class MetricsLogger:
    """``log(step, {"name": value})`` to every enabled sink; ``close()`` flushes them."""

    def __init__(
        self, run_dir: Path, *, tensorboard: bool, wandb: bool, config: dict, console: bool = False
    ) -> None:
        self._console = console
        self._tb = None
        self._wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        if wandb:
            self._wandb = _start_wandb(run_dir, config)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if self._console:
            shown = " ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items()) if v is not None)
            tqdm.write(f"step {step}: {shown}", file=sys.stderr)  # above the progress bar
        if self._tb is not None:
            for name, value in metrics.items():
                if value is not None:
                    self._tb.add_scalar(name, value, step)
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in metrics.items() if v is not None}, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


WANDB_CONNECT_S = 3.0  # how long the wandb server gets to answer before the run logs offline


def _start_wandb(run_dir: Path, config: dict) -> Any:
    """A wandb run: online when a key is set and the server answers, else offline (a run never
    blocks on a login prompt, nor for minutes on a server it cannot reach), said on stderr."""
    import socket
    from urllib.parse import urlparse

    import wandb

    from rlcore.log import say, warn

    mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
    if mode == "online":
        url = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai"))
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            socket.create_connection((url.hostname, port), timeout=WANDB_CONNECT_S).close()
        except OSError as error:
            say(
                f"wandb: {url.hostname}:{port} is not reachable ({error}); logging offline to "
                f"{run_dir / 'wandb'} (upload later with `wandb sync`)"
            )
            mode = "offline"
    project = config.get("logger", {}).get("project", "rlcore")
    options = {"project": project, "dir": str(run_dir), "config": config, "name": run_dir.name}
    try:
        return wandb.init(mode=mode, **options)
    except Exception as error:  # reachable but refusing (a bad key, a server error)
        if mode == "offline":
            raise
        warn(f"wandb: online logging failed ({type(error).__name__}: {error}); logging offline")
        return wandb.init(mode="offline", **options)
