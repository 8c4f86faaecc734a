"""A run's components, started where the placement plan puts them, and reached through handles.

    components = start_components(plan, config.cluster)
    env = components.launch(ComponentSpec("env", EnvWorker, (config,)))
    rollout = components.launch(ComponentSpec("rollout", Rollout, (config,), {"env": Peer("env")}))
    rollout.collect(version=0)     # the Rollout itself, or a RemoteHandle to its ranks
    components.sync_weights("actor", "rollout", version=3)   # a no-op if it holds version 3
    components.close()

One plan, two ways to run it, and the driver's code is the same for both:

- ``InDriver``: the plan has one process and no cluster to join: every component is built in the
  driver's own process and called directly. Ray is not imported.
- ``OnRay``: otherwise: a ``Scheduler`` starts the plan's processes (fused components share one
  per rank) and each component is reached through a ``RemoteHandle``.

Components are built in the order they are launched, so a component can take an earlier one as
a ``Peer`` (a rollout sharing its actor's module, or stepping its env). ``launch_all`` launches
several at once: on Ray the processes build theirs at the same time (a process in the order
given), which is what makes a disaggregated start take the longest process's time, not the sum.
"""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlcore.config.sections import ClusterConfig, SyncConfig
from rlcore.placement import PlacementPlan, runs_in_driver
from rlcore.scheduler import tracing, warm
from rlcore.scheduler.handles import Peer, PeerRef, remote_handle
from rlcore.scheduler.worker import WorkerContext, set_torch_threads


def _nothing() -> None:
    """A copy with nothing left to wait for."""


@dataclass(frozen=True)
class ComponentSpec:
    """How to build a component: ``cls(ctx, *args, **kwargs)``; ``Peer`` arguments allowed."""

    name: str
    cls: type
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SyncRecord:
    """One actor -> rollout weight sync: how, how long, and the version the rollout now holds."""

    method: str
    seconds: float
    version: int


def start_components(
    plan: PlacementPlan,
    cluster: ClusterConfig | None = None,
    sync: SyncConfig | None = None,
    torch_threads: int | None = None,
) -> InDriver | OnRay:
    """Where ``plan``'s components will run (see the module docstring); nothing built yet.
    ``cluster``: the Ray address, collective timeout and network interface; ``sync``: the weight
    sync's bucket size (the defaults when None); ``torch_threads``: torch's CPU threads in each
    process (``runner.torch_threads``; None: torch's own), set once per process."""
    cluster, sync = cluster or ClusterConfig(), sync or SyncConfig()
    set_torch_threads(torch_threads)  # the driver's own process, which hosts or calls them
    if runs_in_driver(plan, cluster.address):
        return InDriver(plan, sync.bucket_bytes, torch_threads)
    return OnRay(plan, cluster, sync.bucket_bytes, torch_threads)


class _Deployment(abc.ABC):
    """What both deployments share: a weight sync that does nothing when the receiver already
    holds the version (the drivers sync before each iteration and each evaluation)."""

    def __init__(self) -> None:
        self._held: dict[str, int] = {}  # component -> the weight version it holds

    def sync_weights(self, src: str, dst: str, version: int) -> SyncRecord | None:
        """Give ``dst`` the weights of ``src`` as version ``version``; None if it has them."""
        if self._held.get(dst) == version:
            return None
        start = time.perf_counter()
        method = self._copy_weights(src, dst, version)
        self._held[dst] = version
        return SyncRecord(method, time.perf_counter() - start, version)

    def start_sync(self, src: str, dst: str, version: int) -> Callable[[], None]:
        """``sync_weights`` started, not waited for (on Ray; in the driver it is done at once):
        ``dst`` takes the weights after the calls submitted to it before, and before those
        submitted after (a rollout busy generating takes them when it has done). The returned
        callable waits for the copy, raising its errors."""
        if self._held.get(dst) == version:
            return _nothing
        finish = self._start_copy(src, dst, version)
        self._held[dst] = version
        return finish

    def _start_copy(self, src: str, dst: str, version: int) -> Callable[[], None]:
        self._copy_weights(src, dst, version)
        return _nothing

    def forget_weights(self, dst: str) -> None:
        """``dst`` no longer holds its weights (an engine that released its memory): the next
        ``sync_weights`` copies them whatever the version."""
        self._held.pop(dst, None)

    @abc.abstractmethod
    def _copy_weights(self, src: str, dst: str, version: int) -> str:
        """Copy the weights, tell ``dst`` its version; how it was done."""

    @abc.abstractmethod
    def launch(self, spec: ComponentSpec) -> Any:
        """Build ``spec``'s component; a handle to it."""

    def launch_all(self, specs: list[ComponentSpec]) -> list[Any]:
        """``launch`` each of ``specs``, in order; a handle to each."""
        return [self.launch(spec) for spec in specs]

    @abc.abstractmethod
    def close(self, wait_s: float = 10.0, keep_warm: bool = False) -> None:
        """Close the components and stop their processes (see ``OnRay.close``)."""

    def close_after_loss(self, wait_s: float) -> None:
        """``close``, after a worker was lost (see ``OnRay.close_after_loss``)."""
        self.close(wait_s)


class InDriver(_Deployment):
    """Every component in this process, called directly."""

    def __init__(
        self, plan: PlacementPlan, bucket_bytes: int = 512 << 20, torch_threads: int | None = None
    ) -> None:
        super().__init__()
        self.plan = plan
        self.bucket_bytes = bucket_bytes
        self.torch_threads = torch_threads
        self.objects: dict[str, Any] = {}
        self.handles: dict[str, Any] = {}  # the objects, or their traced wrappers (tracing.py)

    def launch(self, spec: ComponentSpec) -> Any:
        """Build ``spec``'s component here; the object itself is its handle."""
        ctx = WorkerContext(
            component=spec.name,
            rank=0,
            world_size=1,
            local_rank=0,
            node=0,
            devices=(0,),
            device=self.plan.device,
            torch_threads=self.torch_threads,
            in_driver=True,
        )
        args, kwargs = _local_peers(spec, self.handles)
        self.objects[spec.name] = spec.cls(ctx, *args, **kwargs)
        tracer = tracing.active()  # (the placement profiler: each call timed)
        traced = self.objects[spec.name]
        if tracer is not None:
            traced = tracing.Traced(traced, spec.name, tracer)
        self.handles[spec.name] = traced
        return traced

    def world_size(self, name: str) -> int:
        return 1

    def busy_seconds(self) -> dict[str, dict[int, float]]:
        """Nothing: components called directly in this process are not timed apart."""
        return {}

    def dead_processes(self) -> list[tuple[tuple[str, ...], int, int, str]]:
        """None: every component lives in the driver's own process."""
        return []

    def _copy_weights(self, src: str, dst: str, version: int) -> str:
        """Copy ``src``'s weights into ``dst`` a bucket at a time (nothing to copy for tensors
        they share)."""
        from rlcore.scheduler.weight_buckets import copy_weights

        copy_weights(self.objects[src], self.objects[dst], self.bucket_bytes)
        self.objects[dst].set_weight_version(version)
        return "in_process"

    def close(self, wait_s: float = 10.0, keep_warm: bool = False) -> None:
        for obj in reversed(list(self.objects.values())):
            close = getattr(obj, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # the error that got us here matters more
                    close()
        self.objects.clear()
        self.handles.clear()


class OnRay(_Deployment):
    """Components in Ray worker processes placed by a ``Scheduler``, reached by handles."""

    def __init__(
        self,
        plan: PlacementPlan,
        cluster: ClusterConfig,
        bucket_bytes: int = 512 << 20,
        torch_threads: int | None = None,
    ) -> None:
        from rlcore.scheduler.scheduler import Scheduler

        super().__init__()
        self.plan = plan
        options = dict(
            address=cluster.address,
            collective_timeout_s=cluster.collective_timeout_s,
            worker_timeout_s=cluster.worker_timeout_s,
            network_interface=cluster.network_interface,
            sync_bucket_bytes=bucket_bytes,
            torch_threads=torch_threads,
        )
        self._key = (plan, options)
        self.scheduler = warm.take(self._key)  # processes a finished run kept warm
        if self.scheduler is None:
            self.scheduler = Scheduler(plan, **options)
            self.scheduler.start()
        self.groups: dict[str, Any] = {}
        self.classes: dict[str, type] = {}

    def launch(self, spec: ComponentSpec) -> Any:
        """Build ``spec``'s component on every rank the plan gives it; a typed handle to them."""
        return self.launch_all([spec])[0]

    def launch_all(self, specs: list[ComponentSpec]) -> list[Any]:
        """``launch`` each of ``specs``, the processes building theirs at the same time (each
        process builds its components in the order given, so a peer in the same process is
        built first); a handle to each, once all are built."""
        creating = []
        for spec in specs:
            args, kwargs = self._peer_refs(spec)
            group, calls = self.scheduler.submit_launch(spec.name, spec.cls, *args, **kwargs)
            self.groups[spec.name], self.classes[spec.name] = group, spec.cls
            creating.append((group, calls))
        for group, calls in creating:
            group.get(calls)
        return [self.handle(spec.name) for spec in specs]

    def _peer_refs(self, spec: ComponentSpec) -> tuple[tuple, dict]:
        def ref(value: Any) -> Any:
            if not isinstance(value, Peer):
                return value
            group = self.groups[value.name]
            return PeerRef(
                value.name, self.classes[value.name], tuple(group.handles), value.local_only
            )

        return tuple(ref(a) for a in spec.args), {k: ref(v) for k, v in spec.kwargs.items()}

    def handle(self, name: str) -> Any:
        return remote_handle(self.classes[name], self.groups[name])

    def group(self, name: str) -> Any:
        return self.groups[name]

    def world_size(self, name: str) -> int:
        return self.groups[name].world_size

    def busy_seconds(self) -> dict[str, dict[int, float]]:
        """Component -> rank -> the seconds it has spent in calls, as of its latest answer."""
        return {name: dict(group.busy) for name, group in self.groups.items()}

    def cpu_seconds(self) -> dict[tuple[str, int], float]:
        """(component, rank) -> the CPU seconds its process has used (fused components: the
        same process under each name)."""
        import ray

        handles = self.scheduler.kept.handles
        answers = ray.get([h.cpu_seconds.remote() for h in handles.values()])
        return dict(zip(handles, answers, strict=True))

    def _copy_weights(self, src: str, dst: str, version: int) -> str:
        method, wait = self._begin_copy(src, dst, version)
        wait()
        return method

    def _start_copy(self, src: str, dst: str, version: int) -> Callable[[], None]:
        return self._begin_copy(src, dst, version)[1]

    def _begin_copy(self, src: str, dst: str, version: int) -> tuple[str, Callable[[], None]]:
        """The copy and ``dst``'s new version submitted: the method, and what waits for both."""
        method, finish = self.scheduler.start_sync(src, dst)
        group = self.groups[dst]
        told = group.call_all_async("set_weight_version", version)

        def wait() -> None:
            finish()
            group.get(told, method="set_weight_version")

        return method, wait

    def dead_processes(self) -> list[tuple[tuple[str, ...], int, int, str]]:
        """``(components, rank, node, cause)`` of each worker process that is gone."""
        return self.scheduler.dead_processes()

    def close(self, wait_s: float = 10.0, keep_warm: bool = False) -> None:
        """Stop the processes, giving them ``wait_s`` to close their components; with
        ``keep_warm`` (a run that ended cleanly), keep them for the next run of the same plan
        when processes are kept warm (``warm.py``)."""
        if not (keep_warm and warm.keep(self._key, self.scheduler, wait_s)):
            self.scheduler.shutdown(wait_s)

    def close_after_loss(self, wait_s: float) -> None:
        """Stop the processes after a loss; when processes are kept warm, keep those that
        close their components within ``wait_s`` for the next attempt to adopt
        (``Scheduler.keep_survivors``)."""
        if not warm.keep_survivors(self.scheduler, wait_s):
            self.scheduler.shutdown(wait_s)


def _local_peers(spec: ComponentSpec, built: dict[str, Any]) -> tuple[tuple, dict]:
    """In the driver every component is local: a peer is its object."""

    def resolve(value: Any) -> Any:
        if not isinstance(value, Peer):
            return value
        if value.name not in built:
            raise ValueError(f"{spec.name}: its peer {value.name} must be built before it")
        return built[value.name]

    return tuple(resolve(a) for a in spec.args), {k: resolve(v) for k, v in spec.kwargs.items()}
