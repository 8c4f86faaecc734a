"""Errors raised in worker processes, re-raised in the driver with where they happened."""

from __future__ import annotations


class WorkerError(RuntimeError):
    """An exception raised inside a worker, re-raised in the driver with where it happened."""

    def __init__(
        self, component: str, rank: int, node: int, detail: str, group: str | None = None
    ) -> None:
        self.component, self.rank, self.node, self.detail = component, rank, node, detail
        self.group = group
        named = f"{group} ({component})" if group and group != component else component
        super().__init__(f"{named} rank {rank} on node {node}: {detail}")

    def __reduce__(self):
        return (WorkerError, (self.component, self.rank, self.node, self.detail, self.group))
