"""What a run carries from iteration to iteration (``Progress``, saved in checkpoints as JSON) and
how it times its stages (``Stopwatch``)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from rlcore.scheduler.tracing import in_stage


@dataclass
class Progress:
    iteration: int = 0
    samples: int = 0  # trained on: env steps (embodied) or responses (reasoning)
    elapsed_s: float = 0.0  # wall time, counted across resumes
    train_s: float = 0.0  # in iterations (experience and updates), without evals and checkpoints
    first_eval: dict[str, float] | None = None  # the evaluation before training, when there is one
    last_eval: dict[str, float] = field(default_factory=dict)  # the latest evaluation's metrics
    reached_s: float | None = None  # when the eval first reached the solved threshold
    reached_samples: int | None = None


class Stopwatch:
    """Seconds per stage of one iteration: ``with watch("collect"): ...``; ``metrics()`` gives
    them as ``time/<stage>_s``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            with in_stage(stage):  # (calls a placement profile traces count under it)
                yield
        finally:
            self.seconds[stage] += time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        return {f"time/{stage}_s": seconds for stage, seconds in self.seconds.items()}
