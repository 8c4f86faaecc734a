"""The process that hosts components on a slot (a Ray actor), and what a component sees of it.

A component is any class whose constructor takes a ``WorkerContext`` first. Components that the
plan places identically are fused into one ``WorkerProcess`` per rank, so calls between them
(and weight copies) cost no serialisation.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlcore.scheduler.errors import WorkerError
from rlcore.scheduler.network import INTERFACE_ENV, bind_listener
from rlcore.scheduler.timed import Timed
from rlcore.scheduler.weight_sync import WeightEndpoint

if TYPE_CHECKING:
    import torch

__all__ = [
    "ProcessIdentity",
    "WorkerContext",
    "WorkerError",
    "WorkerProcess",
    "rank_seed",
    "set_up_process",
    "tear_down_model_parallel",
]

# torch is imported where it is used: a worker hosting only torch-free components starts faster.


@dataclass(frozen=True)
class WorkerContext:
    """Where a component instance runs, and its torch.distributed group."""

    component: str
    rank: int
    world_size: int
    local_rank: int
    node: int
    devices: tuple[int, ...]  # node-local device ids from the plan
    device: str  # cuda | cpu
    group: Any = None  # the component's torch.distributed ProcessGroup (None if not initialised)
    torch_threads: int | None = None  # torch's CPU threads in this process (None: torch's own)
    in_driver: bool = False  # built in the driver's own process (a plan of one process)

    @property
    def torch_device(self) -> torch.device:
        import torch

        # CUDA_VISIBLE_DEVICES holds exactly this process's GPUs, so its first is cuda:0.
        return torch.device("cuda", 0) if self.device == "cuda" else torch.device("cpu")


# Each random stream's stride between ranks: rank r of a stream draws from seed + stride x (r + 1),
# so ranks (and the driver's own stream, at seed) never share one. A prime, far from the small
# offsets added to seeds elsewhere (seed + iteration for validation samples).
STREAM_STRIDES = {"sampling": 7919}


def rank_seed(seed: int, rank: int, stream: str) -> int:
    """The seed of ``rank``'s random ``stream`` (``STREAM_STRIDES``) in a run seeded with
    ``seed``: the rollout's sampling, in every engine and layout.

    >>> rank_seed(1, 0, "sampling"), rank_seed(1, 1, "sampling")
    (7920, 15839)
    """
    return seed + STREAM_STRIDES[stream] * (rank + 1)


def set_up_process(ctx: WorkerContext) -> None:
    """What a process sets once for all its components, from the context of the first one
    built in it (the driver's own process: ``start_components``)."""
    set_torch_threads(ctx.torch_threads)


def tear_down_model_parallel() -> None:
    """Destroy Megatron's model-parallel state where a component of this process set it up
    (its groups belong to the default group, which goes next); nothing where Megatron is not
    imported."""
    state = sys.modules.get("megatron.core.parallel_state")
    if state is not None and state.model_parallel_is_initialized():
        state.destroy_model_parallel()


def set_torch_threads(threads: int | None) -> None:
    """torch's CPU threads in this process (None: torch's own); nothing to set where torch is
    not imported (a process whose components do not use it)."""
    torch = sys.modules.get("torch")
    if threads is not None and torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@dataclass(frozen=True)
class ProcessIdentity:
    """Who a worker process is in its plan: the components it hosts at one rank, where, and
    the environment and torch threads it runs them with."""

    components: tuple[str, ...]
    rank: int
    world_size: int
    local_rank: int
    node: int
    devices: tuple[int, ...]
    device: str
    env: dict[str, str]
    torch_threads: int | None = None


class WorkerProcess(WeightEndpoint):
    """One OS process: the components it hosts at one rank. Run as a Ray actor; the weight
    transfers between processes are its ``WeightEndpoint`` methods (weight_sync.py)."""

    def __init__(self, identity: ProcessIdentity) -> None:
        self.identity: ProcessIdentity | None = None
        self._take_identity(identity)

    def _take_identity(self, identity: ProcessIdentity) -> None:
        if self.identity is not None:  # the variables a previous identity set (``assign``)
            for key in self.identity.env:
                os.environ.pop(key, None)
        os.environ.update(identity.env)
        self.identity = identity
        self.torch_threads = identity.torch_threads
        self.names = identity.components
        self.rank, self.world_size = identity.rank, identity.world_size
        self.local_rank, self.node = identity.local_rank, identity.node
        self.devices, self.device = identity.devices, identity.device
        self.instances: dict[str, Any] = {}
        self.groups: dict[str, Any] = {}
        self.sync_groups: dict[str, tuple[Any, int]] = {}
        self._listeners: dict[int, socket.socket] = {}  # port -> socket a TCP store will serve
        self.busy: dict[str, float] = {}  # component -> seconds spent in calls (``call``)

    def describe(self) -> dict[str, Any]:
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "gpu_ids": [int(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }

    def cpu_seconds(self) -> float:
        """The CPU seconds this process has used, all its threads (the placement profiler's
        measure of what calls between processes cost: ``rlcore.runners.profiling``)."""
        return time.process_time()

    def listen(self, node_address: str) -> tuple[str, int]:
        """Bind the socket that this rank's next TCP store will serve (on cluster.network_interface
        when set, else on ``node_address``, loopback in a local run); its address and port."""
        listener = bind_listener(node_address, os.environ.get(INTERFACE_ENV) or None)
        address, port = listener.getsockname()[:2]
        self._listeners[port] = listener
        return address, port

    def _store(self, addr: str, port: int, size: int, rank: int, timeout_s: float) -> Any:
        """torch.distributed's TCP store: rank 0 serves it from the socket ``listen`` bound."""
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s)
        if rank != 0:
            return dist.TCPStore(addr, port, size, False, timeout=timeout)
        listener = self._listeners.pop(port)  # the store owns the descriptor from here on
        return dist.TCPStore(
            addr, port, size, True, timeout=timeout, master_listen_fd=listener.detach()
        )

    def init_distributed(
        self,
        backend: str,
        master_addr: str,
        master_port: int,
        timeout_s: float,
        collective_timeout_s: float,
    ) -> None:
        """The default group over this rank's fused components, and one group per component:
        rendezvous within ``timeout_s``, each collective within ``collective_timeout_s``."""
        import torch.distributed as dist

        os.environ.update({"MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port)})
        dist.init_process_group(
            backend,
            store=self._store(master_addr, master_port, self.world_size, self.rank, timeout_s),
            rank=self.rank,
            world_size=self.world_size,
            timeout=datetime.timedelta(seconds=collective_timeout_s),
        )
        for name in self.names:  # every rank creates them in the same order, as torch requires
            self.groups[name] = (
                dist.group.WORLD if len(self.names) == 1 else dist.new_group(backend=backend)
            )

    def create(self, component: str, cls: type, args: tuple, kwargs: dict) -> None:
        context = WorkerContext(
            component=component,
            rank=self.rank,
            world_size=self.world_size,
            local_rank=self.local_rank,
            node=self.node,
            devices=self.devices,
            device=self.device,
            group=self.groups.get(component),
            torch_threads=self.torch_threads,
        )
        from rlcore.scheduler.handles import resolve_peers

        args, kwargs = resolve_peers(args, kwargs, self.instances, self.rank)
        set_up_process(context)  # the class's module is imported: torch, if it uses it
        self.instances[component] = self._guard(component, lambda: cls(context, *args, **kwargs))

    def call(self, component: str, method: str, args: tuple, kwargs: dict) -> Timed:
        """``component.method(*args, **kwargs)``, with the seconds ``component`` has spent in
        calls so far (its busy time, ``Timed``)."""
        target = getattr(self.instances[component], method)
        start = time.perf_counter()
        try:
            value = self._guard(component, lambda: target(*args, **kwargs))
        finally:
            self.busy[component] = self.busy.get(component, 0.0) + time.perf_counter() - start
        return Timed(value, self.busy[component])

    def _guard(self, component: str, fn):
        from rlcore.config.errors import ConfigError

        try:
            return fn()
        except Exception as exc:
            detail = (
                f"{type(exc).__name__}: {exc}\n--- worker traceback ---\n{traceback.format_exc()}"
            )
            # a bad input met by a peer this component called (an env stepped for a rollout)
            # is still a bad input: one line at the CLI, not a traceback
            user = str(exc) if isinstance(exc, ConfigError) else getattr(exc, "user_error", None)
            raise WorkerError(component, self.rank, self.node, detail, user_error=user) from None

    def release(self) -> None:
        """Close the components (async envs own subprocesses), keeping the process and its
        groups for the next run's components (``warm.py``)."""
        import contextlib

        for instance in reversed(list(self.instances.values())):
            close = getattr(instance, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
        self.instances.clear()

    def close(self) -> None:
        """Close the components, then the groups (Megatron's model-parallel state with them)."""
        self.release()
        self.sync_groups.clear()
        for listener in self._listeners.values():
            listener.close()
        self._listeners.clear()
        tear_down_model_parallel()
        # a process whose components never imported torch has no group: importing it here would
        # cost a second and a half of CPU at every shutdown
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_initialized():
            dist.destroy_process_group()
        self.groups.clear()

    def assign(self, identity: ProcessIdentity) -> None:
        """Become the process of another plan on the same slot (``warm.py``: a scheduler that
        adopts a kept one's processes): close everything, groups included, and take the new
        identity, as the constructor would; the new plan's groups are set up afresh."""
        self.close()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()  # what the closed components held, for the new ones
        self._take_identity(identity)
