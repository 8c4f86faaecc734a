"""What a worker process answers a component call with (``WorkerProcess.call``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timed:
    """A call's answer, and the seconds its component has spent in calls in its process so far
    (what the driver's busy shares are computed from: ``WorkerGroup.busy``)."""

    value: Any
    busy_s: float
