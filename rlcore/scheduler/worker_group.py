"""``WorkerGroup``: the ranks of one component, called from the driver as one object."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from rlcore.placement import RankPlacement
from rlcore.scheduler.errors import WorkerError


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
    ) -> None:
        self.component = component
        self.group_name = group_name or component
        self.handles = list(handles)
        self.placements = list(placements)

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
        return self.get(self.call_all_async(method, *args, **kwargs))

    def call_rank(self, rank: int, method: str, *args: Any, **kwargs: Any) -> Any:
        return self.get([self.call_rank_async(rank, method, *args, **kwargs)], ranks=[rank])[0]

    def scatter(self, method: str, shards: Sequence[Any], *args: Any, **kwargs: Any) -> list[Any]:
        return self.get(self.scatter_async(method, shards, *args, **kwargs))

    def get(self, refs: Sequence[ray.ObjectRef], ranks: Sequence[int] | None = None) -> list[Any]:
        """Wait for ``refs`` (one per rank unless ``ranks`` says which); errors name the rank."""
        ranks = list(range(len(refs))) if ranks is None else list(ranks)
        try:
            return ray.get(list(refs))
        except (RayTaskError, RayActorError):
            pass
        for rank, ref in zip(ranks, refs, strict=True):  # find the first failing rank, in order
            try:
                ray.get(ref)
            except RayTaskError as error:
                cause = error.cause
                if isinstance(cause, WorkerError):
                    raise WorkerError(
                        cause.component, cause.rank, cause.node, cause.detail, self.group_name
                    ) from None
                raise self._error(rank, f"{type(cause).__name__}: {cause}") from None
            except RayActorError as error:
                raise self._error(rank, f"the worker process died: {error}") from None
        raise AssertionError("ray.get failed but no single reference did")  # pragma: no cover

    def _error(self, rank: int, detail: str) -> WorkerError:
        node = self.placements[rank].node
        return WorkerError(self.component, rank, node, detail, self.group_name)
