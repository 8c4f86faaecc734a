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
            import wandb as wandb_module

            # Offline unless the user configured a key: a run never blocks on a login prompt.
            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"
            self._wandb = wandb_module.init(
                project="rlcore", dir=str(run_dir), config=config, mode=mode, name=run_dir.name
            )

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
