"""``Scheduler``: start a placement plan's processes on Ray, one ``WorkerGroup`` per component.

    with Scheduler.from_config(config) as scheduler:   # plan_for_config + cluster.address
        actor = scheduler.launch("actor", ActorWorker, model_config)
        rollout = scheduler.launch("rollout", RolloutWorker, model_config)
        actor.call_all("update", batch)
        scheduler.sync_weights("actor", "rollout")

Local and multi-node runs are the same code: ``address=None`` starts a local Ray (dashboard
off), ``"auto"`` or ``"host:port"`` joins one. Leaving the ``with`` block, by return, exception,
Ctrl-C or SIGTERM, stops every process it started (inside ``warm.keep_processes_warm()``, a clean
exit keeps them for the next scheduler: ``warm.py``).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import signal
import tempfile
import threading
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlcore.config.schema import RLCoreConfig
from rlcore.placement import PlacementPlan, Process, plan_for_config
from rlcore.scheduler import warm
from rlcore.scheduler.deadlines import Deadlines
from rlcore.scheduler.errors import WorkerLost
from rlcore.scheduler.last_words import LAST_WORDS_ENV, account
from rlcore.scheduler.network import transport_env
from rlcore.scheduler.ray_cluster import (
    NodeSlots,
    SchedulerError,
    alive_nodes,
    connect,
    disconnect,
    lost_node,
    release,
    reserve,
)
from rlcore.scheduler.weight_sync import SyncReport, WeightSync
from rlcore.scheduler.worker import ProcessIdentity, WorkerProcess
from rlcore.scheduler.worker_group import WorkerGroup, death_cause

# Once a process is known lost, how long the others get to be seen lost too (Ray reports a
# death at once); the rest are busy, in a call that waits on the lost one, and alive.
LOST_TOO_S = 0.5

_RemoteProcess = ray.remote(WorkerProcess)


class Scheduler:
    """Owns the Ray connection, the placement groups and the worker processes of one plan.

    Args:
        plan: where every component's ranks go.
        address: Ray address to join (``"auto"``, ``"host:port"``); None starts a local Ray.
        backend: torch.distributed backend of each component's group; None = nccl on cuda, gloo
            on cpu. ``init_distributed=False`` skips the groups (a plan on simulated GPUs).
        timeout_s: how long to wait for resources and for group rendezvous before failing.
        collective_timeout_s: how long a rank waits in a collective for its peers (a dead or
            hung peer makes the others fail after this long instead of hanging).
        worker_timeout_s: the least the driver waits for a worker's answer (``deadlines.py``).
        torch_threads: torch's CPU threads in each worker process (None: torch's own).
    """

    def __init__(
        self,
        plan: PlacementPlan,
        *,
        address: str | None = None,
        backend: str | None = None,
        init_distributed: bool = True,
        timeout_s: float = 120.0,
        collective_timeout_s: float = 600.0,
        worker_timeout_s: float = float("inf"),
        network_interface: str | None = None,
        sync_bucket_bytes: int = 512 << 20,
        torch_threads: int | None = None,
    ) -> None:
        self.plan = plan
        self.torch_threads = torch_threads
        # names this scheduler's placement groups and processes in Ray (rlcore-TAG-node0,
        # rlcore-TAG:actor:0): several schedulers of one driver never share a name
        self.tag = secrets.token_hex(3)
        self.sync_bucket_bytes = sync_bucket_bytes
        self.address = address
        self.network_interface = network_interface
        self.backend = backend or ("nccl" if plan.device == "cuda" else "gloo")
        self.init_distributed = init_distributed
        self.timeout_s = timeout_s
        self.collective_timeout_s = collective_timeout_s
        self.deadlines: dict[str, Deadlines] = {}  # per component, kept across its groups
        self.worker_timeout_s = worker_timeout_s
        self.info: dict[tuple[str, int], dict[str, Any]] = {}  # (component, rank) -> describe()
        self._handles: dict[tuple[str, int], Any] = {}  # (component, rank) -> process
        self._slots: list[NodeSlots] = []
        self._weights: WeightSync | None = None
        self._owns_ray = False
        self._previous_sigterm: Any = None
        self._last_words: str | None = None

    @classmethod
    def from_config(cls, config: RLCoreConfig, **options: Any) -> Scheduler:
        """The scheduler of a validated config: its placement plan, on ``cluster.address``."""
        cluster = config.cluster
        return cls(
            plan_for_config(config),
            address=cluster.address,
            collective_timeout_s=cluster.collective_timeout_s,
            worker_timeout_s=cluster.worker_timeout_s,
            network_interface=cluster.network_interface,
            **options,
        )

    def __enter__(self) -> Scheduler:
        self.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.stop(keep_warm=exc_type is None)

    def stop(self, keep_warm: bool = False) -> None:
        """``shutdown``; with ``keep_warm`` (a clean end) in a program that keeps processes
        warm, keep them for the next scheduler instead (``warm.py``)."""
        if keep_warm and warm.enabled() and self.release_components():
            warm.give(None, self)
            return
        self.shutdown()

    # start-up ----------------------------------------------------------------------------------

    def can_host(self, plan: PlacementPlan, address: str | None) -> bool:
        """Whether this started scheduler's slots can hold ``plan`` (on Ray at ``address``): the
        same Ray, device kind and nodes, every node still alive (a lost node's slots and
        processes are gone with it), and at least as many slots on each node."""
        mine = self.plan
        return (
            (self.address, mine.device, len(self._slots)) == (address, plan.device, plan.num_nodes)
            and all(slot.group.bundle_count >= plan.devices_per_node for slot in self._slots)
            and {slot.node_id for slot in self._slots} <= alive_nodes()
        )

    def start(self) -> None:
        # Processes a finished run kept warm (warm.py) are adopted when they stand on the slots
        # this plan asks for, and stopped otherwise (they hold slots).
        kept = warm.adopt(lambda kept: kept.can_host(self.plan, self.address))
        if kept is not None:
            kept._restore_sigterm()
        self._catch_sigterm()
        processes, handles = self.plan.processes(), []
        try:
            if kept is None:
                # Where a worker's watchdog writes its last words (last_words.py), on this node.
                self._last_words = tempfile.mkdtemp(prefix="rlcore-last-words-")
                self._owns_ray = connect(self.plan, self.address)
                self._slots = reserve(self.plan, self.timeout_s, self.tag)
                handles = [self._spawn(p) for p in processes]
            else:
                handles = self._adopt(kept, processes)
            infos = ray.get([h.describe.remote() for h in handles], timeout=self.timeout_s)
            for process, handle, info in zip(processes, handles, infos, strict=True):
                self._check_where(process, info)
                # The address the Ray node runs on (reachable by the other nodes): the
                # rendezvous address of any group whose rank 0 is here.
                info["ip"] = self._slots[process.node].ip
                for name in process.components:
                    self._handles[(name, process.rank)] = handle
                    self.info[(name, process.rank)] = info
            if self.init_distributed:
                self._init_groups()
            self._weights = WeightSync(
                self.plan,
                self.group,
                self.info,
                self.backend,
                self.timeout_s,
                self.collective_timeout_s,
                self.sync_bucket_bytes,
            )
        except BaseException as error:
            lost = None
            with contextlib.suppress(Exception):  # (the error to tell is the one raised)
                lost = self._lost_while_starting(error, processes, handles)
            self.shutdown()
            if lost is not None:
                raise lost from error
            raise

    def _lost_while_starting(
        self, error: BaseException, processes: list[Process], handles: list[Any]
    ) -> WorkerLost | None:
        """The process that died while this scheduler started (killed, its node lost), as the
        ``WorkerLost`` a run's supervisor restarts after; None when ``error`` is no death."""
        if not isinstance(error, ray.exceptions.RayError) or not handles:
            return None
        pings = {h.describe.remote(): p for p, h in zip(processes, handles, strict=False)}
        done, _ = ray.wait(list(pings), num_returns=len(pings), timeout=LOST_TOO_S)
        alive = alive_nodes()
        for ref in done:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as death:
                process = pings[ref]
                slot = self._slots[process.node] if process.node < len(self._slots) else None
                if slot is not None and slot.node_id not in alive:
                    cause = lost_node(slot.ip, slot.node_id)
                else:
                    cause = f"the process died while starting: {death_cause(death)}"
                named = "+".join(process.components)
                return WorkerLost(named, process.rank, process.node, cause)
        return None

    def _spawn(self, process: Process) -> Any:
        plan = self.plan
        slot = self._slots[process.node]
        return _RemoteProcess.options(
            num_gpus=process.fraction if plan.device == "cuda" else 0,
            num_cpus=process.fraction if plan.device == "cpu" else 0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                slot.group, placement_group_bundle_index=process.devices[0]
            ),
            name=f"rlcore-{self.tag}:{'+'.join(map(plan.group_name, process.components))}:"
            f"{process.rank}",
        ).remote(self._identity(process))

    def _adopt(self, kept: Scheduler, processes: list[Process]) -> list[Any]:
        """Take over ``kept``'s slots and, for each process of this plan, a kept process that
        stands on its node and devices with at most its share of them (the largest such: the
        slot still holds every process of the plan), given its new identity (its groups are set
        up afresh); stop the others, and start the processes still missing."""
        self._slots, self._last_words, self._owns_ray = (
            kept._slots,
            kept._last_words,
            kept._owns_ray,
        )
        free: dict[tuple, list[tuple[float, Any]]] = {}
        for process in kept.plan.processes():
            handle = kept._handles.get((process.components[0], process.rank))
            if handle is not None:
                where = (process.node, tuple(process.devices))
                free.setdefault(where, []).append((process.fraction, handle))
        kept._handles.clear()
        kept._slots, kept._last_words, kept._owns_ray = [], None, False
        handles: list[Any] = []
        for process in processes:
            here = free.get((process.node, tuple(process.devices)), [])
            fits = [entry for entry in here if entry[0] <= process.fraction]
            best = max(fits, key=lambda entry: entry[0], default=None)
            if best is not None:
                here.remove(best)
            handles.append(None if best is None else best[1])
        _stop([handle for left in free.values() for _, handle in left], {}, wait_s=10.0)
        assigning = [
            handle.assign.remote(self._identity(process))
            for process, handle in zip(processes, handles, strict=True)
            if handle is not None
        ]
        handles = [
            self._spawn(process) if handle is None else handle
            for process, handle in zip(processes, handles, strict=True)
        ]
        ray.get(assigning, timeout=self.timeout_s)
        return handles

    def _identity(self, process: Process) -> ProcessIdentity:
        """Who ``process``'s ``WorkerProcess`` is (what it is built or ``assign``ed with)."""
        plan = self.plan
        first = process.components[0]
        world = plan.world_size(first)
        same_node = [r.rank for r in plan.components[first] if r.node == process.node]
        env = {
            "RANK": str(process.rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(same_node.index(process.rank)),
            "LOCAL_WORLD_SIZE": str(len(same_node)),
            "NODE_RANK": str(process.node),
            # gloo's and NCCL's sockets: loopback in a local run (network.py)
            **transport_env(self.network_interface, local=self.address is None),
            LAST_WORDS_ENV: self._last_words or "",
        }
        if plan.device == "cuda" and len(process.devices) > 1:
            # Ray makes one GPU visible (its bundle's); a multi-GPU process sees all of its own.
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in process.devices)
        return ProcessIdentity(
            process.components,
            process.rank,
            world,
            int(env["LOCAL_RANK"]),
            process.node,
            process.devices,
            plan.device,
            env,
            self.torch_threads,
        )

    def _check_where(self, process: Process, info: dict[str, Any]) -> None:
        """Refuse to go on if Ray put a process anywhere but where the plan says."""
        slot = self._slots[process.node]
        where = f"{'+'.join(process.components)} rank {process.rank}"
        if info["node_id"] != slot.node_id:
            raise SchedulerError(f"cluster: Ray started {where} on a node the plan did not pick")
        if self.plan.device == "cuda" and info["gpu_ids"][:1] != [process.devices[0]]:
            raise SchedulerError(
                f"cluster: Ray gave {where} GPU {info['gpu_ids']} for slot {process.devices[0]} of "
                f"node {process.node}; another job may hold some of the node's GPUs"
            )

    def _init_groups(self) -> None:
        calls = []
        for group in self.plan.fused:
            ranks = self.plan.components[group[0]]
            handles = [self._handles[(group[0], r.rank)] for r in ranks]
            addr, port = ray.get(handles[0].listen.remote(self.info[(group[0], 0)]["ip"]))
            calls += [
                h.init_distributed.remote(
                    self.backend, addr, port, self.timeout_s, self.collective_timeout_s
                )
                for h in handles
            ]
        ray.get(calls, timeout=self.timeout_s + 30)

    # use ---------------------------------------------------------------------------------------

    def group(self, component: str) -> WorkerGroup:
        """The ``WorkerGroup`` of a placed component."""
        if component not in self.plan.components:
            placed = ", ".join(self.plan.components)
            raise KeyError(f"component '{component}' is not in the plan (placed: {placed})")
        ranks = self.plan.components[component]
        handles = [self._handles[(component, r.rank)] for r in ranks]
        deadlines = self.deadlines.setdefault(component, Deadlines(self.worker_timeout_s))
        return WorkerGroup(component, handles, ranks, self.plan.group_name(component), deadlines)

    def launch(self, component: str, cls: type, *args: Any, **kwargs: Any) -> WorkerGroup:
        """Create ``cls(context, *args, **kwargs)`` on every rank of ``component``."""
        group, creating = self.submit_launch(component, cls, *args, **kwargs)
        group.get(creating)
        return group

    def submit_launch(
        self, component: str, cls: type, *args: Any, **kwargs: Any
    ) -> tuple[WorkerGroup, list[Any]]:
        """Start creating ``component`` as ``launch`` does, without waiting: its group, and the
        calls to wait for with ``group.get``. A process runs its calls in the order they were
        submitted, so a component created after another in the same process can use it. A
        component launched again (a new instance in its processes) has its weight layouts
        checked again at its next sync."""
        group = self.group(component)
        if self._weights is not None:
            self._weights.forget(component)
        return group, [h.create.remote(component, cls, args, kwargs) for h in group.handles]

    def sync_weights(self, src: str, dst: str, method: str = "auto") -> SyncReport:
        """Copy ``src``'s weights into every rank of ``dst`` (see weight_sync.py)."""
        if self._weights is None:
            raise RuntimeError("the scheduler has not started: call start() or use `with`")
        return self._weights.sync(src, dst, method)

    def start_sync(self, src: str, dst: str, method: str = "auto") -> tuple[str, Any]:
        """``sync_weights`` started, not waited for: the method, and what waits for the copy
        (``WeightSync.start``)."""
        if self._weights is None:
            raise RuntimeError("the scheduler has not started: call start() or use `with`")
        chosen, _, finish = self._weights.start(src, dst, method)
        return chosen, finish

    def dead_processes(self, wait_s: float = 5.0) -> list[tuple[tuple[str, ...], int, int, str]]:
        """``(components, rank, node, cause)`` of each process that is gone, or stopped (on
        this machine: its state says so); ``cause`` says which, and why it died. A process busy
        in a long call (or stuck in a collective) does not answer within ``wait_s`` and counts
        as alive."""

        where = {id(h): (name, rank) for (name, rank), h in self._handles.items()}
        here = ray.get_runtime_context().get_node_id()
        # a stopped process answers nothing: seen in its state, not waited for
        halted = self._stopped_here()
        pings = {h.describe.remote(): h for h in self._processes() if id(h) not in halted}
        gone: list[tuple[Any, str]] = []
        pending, deadline = list(pings), time.monotonic() + wait_s
        while pending:
            if halted or gone:  # one is lost: the others get a moment to say they are too
                deadline = min(deadline, time.monotonic() + LOST_TOO_S)
            answered, pending = ray.wait(
                pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic())
            )
            if not answered:
                break  # the rest are busy (in a long call, a collective): alive
            for ref in answered:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as error:
                    info = self.info[where[id(pings[ref])]]
                    if info["node_id"] not in alive_nodes():
                        gone.append((pings[ref], lost_node(info["ip"], info["node_id"])))
                        continue
                    words = account(self._last_words, info["pid"], info["node_id"] == here)
                    gone.append((pings[ref], f"the process died: {words or death_cause(error)}"))
        for handle in halted.values():
            pid = self.info[where[id(handle)]]["pid"]
            gone.append((handle, f"the process is stopped (pid {pid}: SIGSTOP, a debugger)"))
        dead = []
        for handle, cause in gone:
            name, rank = where[id(handle)]
            process = next(
                p for p in self.plan.processes() if p.rank == rank and name in p.components
            )
            dead.append((process.components, rank, process.node, cause))
        return dead

    def _stopped_here(self) -> dict[int, Any]:
        """The processes on this machine that are stopped (their state says so), by handle id."""
        from rlcore.scheduler.processes import stopped

        here = ray.get_runtime_context().get_node_id()
        where = {id(h): key for key, h in self._handles.items()}
        return {
            id(h): h
            for h in self._processes()
            if self.info[where[id(h)]]["node_id"] == here
            and stopped(self.info[where[id(h)]]["pid"])
        }

    def _processes(self) -> list[Any]:
        """One handle per process (fused components share theirs)."""
        return list({id(h): h for h in self._handles.values()}.values())

    def is_alive(self) -> bool:
        """Whether every process of this started scheduler still answers (none lost)."""
        if not self._handles or not ray.is_initialized():
            return False
        try:
            return not self.dead_processes()
        except Exception:  # (handles of another Ray session)
            return False

    def release_components(self, wait_s: float = 10.0) -> bool:
        """Close every component, keeping the processes, their groups and slots for another
        run (``warm.py``); False (and everything stopped) if a process does not close in
        ``wait_s``."""
        handles = self._processes()
        try:
            ray.get([h.release.remote() for h in handles], timeout=wait_s)
        except Exception:
            self.shutdown(wait_s)
            return False
        return True

    # shutdown ----------------------------------------------------------------------------------

    def keep_survivors(self, wait_s: float) -> bool:
        """After a loss: stop the processes lost (dead, stopped, or not closing their
        components within ``wait_s``: busy in a call that waits on a lost peer) and keep the
        others, their components closed, for the next attempt to adopt (``warm.py``); False,
        and every process stopped, when none is left."""
        lost = {
            id(self._handles[(components[0], rank)])
            for components, rank, _, _ in self.dead_processes(wait_s)
        }
        alive = [h for h in self._processes() if id(h) not in lost]
        releasing = {h.release.remote(): h for h in alive}
        done, _ = ray.wait(list(releasing), num_returns=len(releasing), timeout=wait_s)
        closed = set()
        for ref in done:
            with contextlib.suppress(Exception):
                ray.get(ref)
                closed.add(id(releasing[ref]))
        _kill([h for h in self._processes() if id(h) not in closed])
        self._handles = {key: h for key, h in self._handles.items() if id(h) in closed}
        if not self._handles:
            self.shutdown(wait_s)
            return False
        return True

    def shutdown(self, wait_s: float = 10.0) -> None:
        """Stop every process this scheduler started, giving them ``wait_s`` to close their
        components first; safe to call more than once."""
        handles = self._processes()
        if handles and ray.is_initialized():
            # (nor a stopped one, which would answer nothing, make the others wait)
            halted: dict[int, Any] = {}
            with contextlib.suppress(Exception):
                halted = self._stopped_here()
            _stop(handles, halted, wait_s)
        self._handles.clear()
        if ray.is_initialized():
            release(self._slots)
        self._slots = []
        if self._owns_ray and ray.is_initialized():
            disconnect()
        self._owns_ray = False
        self._restore_sigterm()
        if self._last_words is not None:
            shutil.rmtree(self._last_words, ignore_errors=True)
            self._last_words = None

    def _catch_sigterm(self) -> None:
        # SIGTERM and SIGHUP would end Python without running `finally`; make them unwind like
        # Ctrl-C.
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = {
                sig: signal.signal(sig, _raise_exit) for sig in (signal.SIGTERM, signal.SIGHUP)
            }

    def _restore_sigterm(self) -> None:
        if self._previous_sigterm is not None:
            for sig, handler in self._previous_sigterm.items():
                signal.signal(sig, handler)
            self._previous_sigterm = None


def _stop(handles: list[Any], halted: dict[int, Any], wait_s: float) -> None:
    """Give ``handles``' processes ``wait_s`` to close (those in ``halted``, stopped, are not
    asked), then end them. A dead or hung process does not stop the clean-up of the others."""
    if not handles or not ray.is_initialized():
        return
    with contextlib.suppress(Exception):
        closing = [h.close.remote() for h in handles if id(h) not in halted]
        ray.wait(closing, num_returns=len(closing), timeout=wait_s)
    _kill(handles)


def _kill(handles: list[Any]) -> None:
    for h in handles:
        with contextlib.suppress(Exception):
            ray.kill(h)


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
