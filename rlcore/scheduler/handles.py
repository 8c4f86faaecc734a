"""Typed handles: a component in other processes, called as if it were the object itself.

``remote_handle(ActorWorker, group)`` returns an object whose methods are ``ActorWorker``'s, run
on the component's ranks as each method's ``@dispatch`` mode says (``dispatch.py``). A method the
class does not have fails at the call with the list of those it has, not with a Ray error.

``Peer`` names another component in a component's constructor arguments (an env worker's
rollout, a rollout's actor). The process that builds the component resolves it: to the peer's own
object when the two share the process (fused: direct calls, no serialisation), else to a
``RankHandle`` on the peer's rank of the same number, or to None for a ``local_only`` peer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from rlcore.scheduler.dispatch import Dispatch, dispatch_mode

T = TypeVar("T")


@dataclass(frozen=True)
class Peer:
    """Another component, as a constructor argument; ``local_only``: None unless fused."""

    name: str
    local_only: bool = False


@dataclass(frozen=True)
class PeerRef:
    """A ``Peer`` made concrete by the launcher: the peer's class and its ranks' processes."""

    name: str
    cls: type
    handles: tuple[Any, ...]
    local_only: bool


def split_batch(batch: Any, parts: int, where: str) -> list[Any]:
    """``parts`` equal contiguous shards of a ``TensorDict`` or tensor (along dim 0)."""
    size = batch.shape[0]
    if size % parts:
        raise ValueError(f"{where}: a batch of {size} cannot be split evenly over {parts} ranks")
    return list(batch.split(size // parts))


def concat(results: Sequence[Any]) -> Any:
    """Rank results joined along dim 0: tensors and TensorDicts, or tuples of them."""
    import torch

    if isinstance(results[0], tuple):
        return tuple(concat(column) for column in zip(*results, strict=True))
    return torch.cat(list(results)) if len(results) > 1 else results[0]


class RemoteHandle:
    """Every rank of a component, from the driver (see the module docstring)."""

    def __init__(self, cls: type, group: Any) -> None:
        self._cls = cls
        self._group = group

    @property
    def world_size(self) -> int:
        return self._group.world_size

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)
        mode = dispatch_mode(self._cls, method)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._call(method, mode, args, kwargs)

        return call

    def _call(self, method: str, mode: Dispatch, args: tuple, kwargs: dict) -> Any:
        return self._submit(method, mode, args, kwargs).result()

    def _submit(self, method: str, mode: Dispatch, args: tuple, kwargs: dict) -> Pending:
        group = self._group
        if mode in (Dispatch.SHARD, Dispatch.SHARD_REDUCED):
            where = f"{group.component}.{method}"
            shards = split_batch(args[0], group.world_size, where)
            refs = group.scatter_async(method, shards, *args[1:], **kwargs)
        elif mode is Dispatch.RANK0:
            ref = group.call_rank_async(0, method, *args, **kwargs)
            return Pending(lambda: group.get([ref], ranks=[0], method=method)[0], [ref])
        else:
            refs = group.call_all_async(method, *args, **kwargs)
        joined = mode in (Dispatch.SHARD, Dispatch.GATHER)

        def answer() -> Any:
            results = group.get(refs, method=method)
            return concat(results) if joined else results[0]

        return Pending(answer, refs)


class Pending:
    """A call's answer to come: ``result()`` waits for it (once) and returns it, or raises what
    the call raised, as the call itself would have. ``refs``: the Ray objects it waits for
    (None: a call in this process, already made)."""

    def __init__(self, wait: Callable[[], Any], refs: list[Any] | None = None) -> None:
        self._wait: Callable[[], Any] | None = wait
        self._value: Any = None
        self.refs = refs

    def result(self) -> Any:
        if self._wait is not None:
            wait, self._wait = self._wait, None
            self._value = wait()
        return self._value

    def done(self) -> bool:
        """Whether ``result()`` would return at once (a failed call counts as done)."""
        if self._wait is None or not self.refs:
            return True
        import ray

        ready, _ = ray.wait(self.refs, num_returns=len(self.refs), timeout=0)
        return len(ready) == len(self.refs)


def wait_any(pendings: Sequence[Pending], timeout_s: float) -> bool:
    """Until one of ``pendings`` is done (True), or ``timeout_s`` has passed (False)."""
    if any(p.done() for p in pendings):
        return True
    import ray

    refs = [ref for p in pendings for ref in p.refs or []]
    ready, _ = ray.wait(refs, num_returns=1, timeout=timeout_s)
    return bool(ready)


def submit(handle: Any, method: str, *args: Any, **kwargs: Any) -> Pending:
    """``handle.method(*args, **kwargs)`` started, not waited for: a ``Pending`` answer. On Ray
    (a ``RemoteHandle``, or a worker's ``RankHandle`` on a peer) each rank's process runs it
    after the calls submitted to it before; a component in this process (the object itself)
    runs it at once."""
    if isinstance(handle, RemoteHandle):
        return handle._submit(method, dispatch_mode(handle._cls, method), args, kwargs)
    if isinstance(handle, RankHandle):
        dispatch_mode(handle._cls, method)  # fails early, naming the methods the class has
        return handle._submit(method, args, kwargs)
    value = getattr(handle, method)(*args, **kwargs)
    return Pending(lambda: value)


class RankHandle:
    """One rank of a component in another process, called from a worker (no splitting)."""

    def __init__(self, cls: type, handle: Any, component: str, rank: int) -> None:
        self._cls, self._handle, self._component, self._rank = cls, handle, component, rank

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)
        dispatch_mode(self._cls, method)  # fails early, naming the methods the class has

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._submit(method, args, kwargs).result()

        return call

    def _submit(self, method: str, args: tuple, kwargs: dict) -> Pending:
        """The call started on the peer's process (which runs it after those submitted
        before), its answer to come."""
        import ray
        from ray.exceptions import RayTaskError

        from rlcore.scheduler.errors import WorkerError

        reference = self._handle.call.remote(self._component, method, args, kwargs)

        def answer() -> Any:
            try:
                return ray.get(reference).value
            except RayTaskError as error:
                if isinstance(error.cause, WorkerError):
                    raise error.cause from None
                raise

        return Pending(answer, [reference])


def remote_handle(cls: type[T], group: Any) -> T:
    """``group``'s ranks seen as one ``cls`` (typed as ``cls`` for the code that calls it)."""
    return cast(T, RemoteHandle(cls, group))


def resolve_peers(args: tuple, kwargs: dict, local: dict[str, Any], rank: int) -> tuple:
    """``args`` / ``kwargs`` with each ``PeerRef`` replaced by what this process can reach."""

    def resolve(value: Any) -> Any:
        if not isinstance(value, PeerRef):
            return value
        if value.name in local:
            return local[value.name]
        if value.local_only:
            return None
        return RankHandle(value.cls, value.handles[rank % len(value.handles)], value.name, rank)

    return tuple(resolve(a) for a in args), {k: resolve(v) for k, v in kwargs.items()}
