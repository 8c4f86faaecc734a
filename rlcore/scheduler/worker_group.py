"""``WorkerGroup``: the ranks of one component, called from the driver as one object."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from rlcore.placement import RankPlacement
from rlcore.scheduler.deadlines import Deadlines
from rlcore.scheduler.errors import WorkerError, WorkerLost
from rlcore.scheduler.timed import Timed


class WorkerGroup:
    """Every rank of ``component``; results come back in rank order.

    ``call_all`` runs a method on all ranks, ``call_rank`` on one, ``scatter`` gives rank r the
    r-th shard. The ``*_async`` forms return Ray futures to overlap work; ``get`` waits for them.
    A worker's exception is re-raised here as ``WorkerError`` naming the component, rank and
    node, with the worker's traceback.
    """

    def __init__(
        self,
        component: str,
        handles: Sequence[Any],
        placements: Sequence[RankPlacement],
        group_name: str | None = None,
        deadlines: Deadlines | None = None,
    ) -> None:
        self.component = component
        self.group_name = group_name or component
        self.handles = list(handles)
        self.placements = list(placements)
        self.deadlines = deadlines or Deadlines(float("inf"))
        # rank -> seconds the component has spent in calls there, as of its latest answer
        self.busy: dict[int, float] = {}

    @property
    def world_size(self) -> int:
        return len(self.handles)

    def call_all_async(self, method: str, *args: Any, **kwargs: Any) -> list[ray.ObjectRef]:
        return [h.call.remote(self.component, method, args, kwargs) for h in self.handles]

    def call_rank_async(self, rank: int, method: str, *args: Any, **kwargs: Any) -> ray.ObjectRef:
        return self.handles[rank].call.remote(self.component, method, args, kwargs)

    def scatter_async(
        self, method: str, shards: Sequence[Any], *args: Any, **kwargs: Any
    ) -> list[ray.ObjectRef]:
        if len(shards) != self.world_size:
            raise ValueError(
                f"{self.component}: scatter needs one shard per rank ({self.world_size}), "
                f"got {len(shards)}"
            )
        return [
            h.call.remote(self.component, method, (shard, *args), kwargs)
            for h, shard in zip(self.handles, shards, strict=True)
        ]

    def call_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self.get(self.call_all_async(method, *args, **kwargs), method=method)

    def call_rank(self, rank: int, method: str, *args: Any, **kwargs: Any) -> Any:
        ref = self.call_rank_async(rank, method, *args, **kwargs)
        return self.get([ref], ranks=[rank], method=method)[0]

    def scatter(self, method: str, shards: Sequence[Any], *args: Any, **kwargs: Any) -> list[Any]:
        return self.get(self.scatter_async(method, shards, *args, **kwargs), method=method)

    def get(
        self,
        refs: Sequence[ray.ObjectRef],
        ranks: Sequence[int] | None = None,
        method: str | None = None,
    ) -> list[Any]:
        """Wait for ``refs`` (one per rank unless ``ranks`` says which), the answers to
        ``method``; errors name the rank.

        At the first failure the others get ``GRACE_S`` to finish, then a process that died
        (``WorkerLost``) is reported before any exception: a peer's death makes the survivors
        of a collective fail too, and they are not the cause. Nobody waits for a rank stuck in
        a collective with a dead peer, nor past the call's deadline (``deadlines.py``) for a
        rank that answers nothing: that one is ``WorkerLost`` (stopped or hung)."""
        ranks = list(range(len(refs))) if ranks is None else list(ranks)
        values: dict[ray.ObjectRef, Any] = {}
        pending = list(refs)
        start, limit = time.monotonic(), self.deadlines.limit(method)
        while pending:
            left = limit - (time.monotonic() - start)
            wait_s = None if left == float("inf") else max(0.0, left)  # (Ray takes no inf)
            ready, pending = ray.wait(pending, num_returns=1, timeout=wait_s)
            if not ready:
                raise self._silent(refs, ranks, pending, method, limit)
            try:
                values[ready[0]] = ray.get(ready[0])
            except (RayTaskError, RayActorError):
                break
        else:
            self.deadlines.record(method, time.monotonic() - start)
            return [self._answer(rank, values[ref]) for rank, ref in zip(ranks, refs, strict=True)]
        if pending:
            ray.wait(pending, num_returns=len(pending), timeout=self.GRACE_S)
        errors: list[WorkerError] = []
        for rank, ref in zip(ranks, refs, strict=True):
            if ray.wait([ref], timeout=0)[0]:
                error = self._failure(rank, ref)
                if error is not None:
                    errors.append(error)
        lost = [e for e in errors if isinstance(e, WorkerLost)]
        raise (lost or errors)[0] from None

    GRACE_S = 5.0  # how long the other ranks get to fail or finish after the first failure

    def _answer(self, rank: int, value: Any) -> Any:
        """A rank's answer; a component call's (``Timed``) also updates ``busy``."""
        if isinstance(value, Timed):
            self.busy[rank] = value.busy_s
            return value.value
        return value

    def _silent(
        self,
        refs: Sequence[ray.ObjectRef],
        ranks: list[int],
        pending: list[ray.ObjectRef],
        method: str | None,
        limit: float,
    ) -> WorkerLost:
        rank = ranks[list(refs).index(pending[0])]
        what = f"{method}()" if method else "a call"
        return WorkerLost(
            self.component,
            rank,
            self.placements[rank].node,
            f"the worker process answered nothing to {what} in {limit:.0f} s: stopped or hung "
            "(cluster.worker_timeout_s; 10x the slowest such call before)",
            self.group_name,
        )

    def _failure(self, rank: int, ref: ray.ObjectRef) -> WorkerError | None:
        """The error of a finished ``ref``, naming the rank, or None if it succeeded."""
        try:
            ray.get(ref)
        except RayTaskError as error:
            cause = error.cause
            if isinstance(cause, WorkerError):
                group = self.group_name if cause.component == self.component else cause.group
                return type(cause)(
                    cause.component, cause.rank, cause.node, cause.detail, group, cause.user_error
                )
            return self._error(rank, f"{type(cause).__name__}: {cause}")
        except RayActorError as error:
            node = self.placements[rank].node
            return WorkerLost(
                self.component,
                rank,
                node,
                f"the worker process died: {death_cause(error)}",
                self.group_name,
            )
        return None

    def _error(self, rank: int, detail: str) -> WorkerError:
        node = self.placements[rank].node
        return WorkerError(self.component, rank, node, detail, self.group_name)


def death_cause(error: BaseException) -> str:
    """The first sentence of a Ray actor death that says why (killed, out of memory, node lost),
    e.g. ``SYSTEM_ERROR: Worker unexpectedly exits with a connection error code 2``."""
    text = str(error)
    kind = text.split("Worker exit type: ", 1)[1].split()[0] if "Worker exit type: " in text else ""
    for marker in ("Worker exit detail: ", "The actor is dead because ", "The actor died "):
        if marker in text:
            sentence = text.split(marker, 1)[1].split("\n")[0].split(". ")[0].strip().rstrip(".")
            return f"{kind}: {sentence}" if kind else sentence
    return text.splitlines()[0] if text else type(error).__name__
