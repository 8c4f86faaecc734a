"""Errors raised in worker processes, re-raised in the driver with where they happened."""

from __future__ import annotations


class WorkerError(RuntimeError):
    """An exception raised inside a worker, re-raised in the driver with where it happened."""

    def __init__(
        self,
        component: str,
        rank: int,
        node: int,
        detail: str,
        group: str | None = None,
        user_error: str | None = None,
    ) -> None:
        self.component, self.rank, self.node, self.detail = component, rank, node, detail
        self.group = group
        # The message of a ConfigError (a bad input: an env, a reward, data) raised in the
        # worker: the entry point prints it as one line, as it does for one raised in the driver.
        self.user_error = user_error
        named = f"{group} ({component})" if group and group != component else component
        super().__init__(f"{named} rank {rank} on node {node}: {detail}")

    def __reduce__(self):
        args = (self.component, self.rank, self.node, self.detail, self.group, self.user_error)
        return (type(self), args)


class WorkerLost(WorkerError):
    """A worker process that is gone (killed, out of memory, its node lost), not one that
    raised: the run goes on only if its processes are started again (``runner.max_restarts``)."""


# What torch.distributed says when a peer of a collective is gone or hung: gloo's broken
# connection and timeout, NCCL's watchdog and errors, torch's DistBackendError.
COLLECTIVE_FAILURES = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Timed out waiting",
    "DistBackendError",
    "DistNetworkError",
    "Watchdog caught collective operation timeout",
    "NCCL communicator was aborted",
)


def is_collective_failure(error: BaseException) -> bool:
    """``error`` (often a ``WorkerError`` carrying a worker's traceback) is a collective that
    failed because a peer died or hung, not a bug in the code that called it."""
    text = f"{type(error).__name__}: {error}"
    return any(phrase in text for phrase in COLLECTIVE_FAILURES)
