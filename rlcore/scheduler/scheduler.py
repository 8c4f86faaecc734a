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
import signal
import tempfile
import threading
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlcore.config.schema import RLCoreConfig
from rlcore.placement import PlacementPlan, Process, plan_for_config
from rlcore.scheduler import warm
from rlcore.scheduler.deadlines import Deadlines
from rlcore.scheduler.kept import Dead, KeptProcesses
from rlcore.scheduler.last_words import LAST_WORDS_ENV
from rlcore.scheduler.network import transport_env
from rlcore.scheduler.ray_cluster import SchedulerError, connect, reserve
from rlcore.scheduler.weight_sync import SyncReport, WeightSync
from rlcore.scheduler.worker import ProcessIdentity, WorkerProcess
from rlcore.scheduler.worker_group import WorkerGroup

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
        self.kept = KeptProcesses()  # its slots and processes (kept.py)
        self._weights: WeightSync | None = None
        self._previous_sigterm: Any = None

    @property
    def info(self) -> dict[tuple[str, int], dict[str, Any]]:
        """(component, rank) -> what its process says of itself (``WorkerProcess.describe``)."""
        return self.kept.info

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
        if not (keep_warm and warm.keep(None, self)):
            self.shutdown()

    # start-up ----------------------------------------------------------------------------------

    def can_host(self, plan: PlacementPlan, address: str | None) -> bool:
        """Whether this started scheduler can host ``plan`` on Ray at ``address``: the same Ray
        and device kind, on slots that can hold it (``KeptProcesses.can_hold``)."""
        same = (self.address, self.plan.device) == (address, plan.device)
        return same and self.kept.can_hold(plan)

    def hand_on(self) -> KeptProcesses:
        """What this scheduler holds, for another to start on (``warm.py``); after, it holds
        nothing and leaves SIGTERM to whoever had it before."""
        self._restore_sigterm()
        kept, self.kept = self.kept, KeptProcesses()
        return kept

    def start(self) -> None:
        # Processes a finished run kept warm (warm.py) are adopted when they stand on the slots
        # this plan asks for, and stopped otherwise (they hold slots).
        kept = warm.adopt(lambda kept: kept.can_host(self.plan, self.address))
        if kept is not None:
            self.kept = kept.hand_on()
        self._catch_sigterm()
        processes, handles = self.plan.processes(), []
        try:
            if kept is None:
                # Where a worker's watchdog writes its last words (last_words.py), on this node.
                self.kept.last_words = tempfile.mkdtemp(prefix="rlcore-last-words-")
                self.kept.owns_ray = connect(self.plan, self.address)
                self.kept.slots = reserve(self.plan, self.timeout_s, self.tag)
                handles = [self._spawn(p) for p in processes]
            else:
                handles = self._adopt(kept.plan, processes)
            infos = ray.get([h.describe.remote() for h in handles], timeout=self.timeout_s)
            for process, handle, info in zip(processes, handles, infos, strict=True):
                self._check_where(process, info)
                # The address the Ray node runs on (reachable by the other nodes): the
                # rendezvous address of any group whose rank 0 is here.
                info["ip"] = self.kept.slots[process.node].ip
                for name in process.components:
                    self.kept.handles[(name, process.rank)] = handle
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
                lost = self.kept.lost_while_starting(error, processes, handles)
            self.shutdown()
            if lost is not None:
                raise lost from error
            raise

    def _spawn(self, process: Process) -> Any:
        plan = self.plan
        slot = self.kept.slots[process.node]
        return _RemoteProcess.options(
            num_gpus=process.fraction if plan.device == "cuda" else 0,
            num_cpus=process.fraction if plan.device == "cpu" else 0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                slot.group, placement_group_bundle_index=process.devices[0]
            ),
            name=f"rlcore-{self.tag}:{'+'.join(map(plan.group_name, process.components))}:"
            f"{process.rank}",
        ).remote(self._identity(process))

    def _adopt(self, kept_plan: PlacementPlan, processes: list[Process]) -> list[Any]:
        """The processes of this plan: for each, a kept process of ``kept_plan`` that stands on
        its slot (``KeptProcesses.adopt``) given its new identity (its groups are set up
        afresh), or one started where none does."""
        handles = self.kept.adopt(kept_plan, processes)
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
        env = {
            # gloo's and NCCL's sockets: loopback in a local run (network.py)
            **transport_env(self.network_interface, local=self.address is None),
            LAST_WORDS_ENV: self.kept.last_words or "",
        }
        return _identity(self.plan, process, env, self.torch_threads)

    def _check_where(self, process: Process, info: dict[str, Any]) -> None:
        """Refuse to go on if Ray put a process anywhere but where the plan says."""
        slot = self.kept.slots[process.node]
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
            handles = [self.kept.handles[(group[0], r.rank)] for r in ranks]
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
        handles = [self.kept.handles[(component, r.rank)] for r in ranks]
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

    def dead_processes(self, wait_s: float = 5.0) -> list[Dead]:
        """``(components, rank, node, cause)`` of each process that is gone, or stopped; a
        process busy in a long call counts as alive (``KeptProcesses.dead``)."""
        return self.kept.dead(self.plan, wait_s)

    def is_alive(self) -> bool:
        """Whether every process of this started scheduler still answers (none lost)."""
        return self.kept.all_answer(self.plan)

    def release_components(self, wait_s: float = 10.0) -> bool:
        """Close every component, keeping the processes, their groups and slots for another
        run (``warm.py``); False (and everything stopped) if a process does not close in
        ``wait_s``."""
        if self.kept.release_components(wait_s):
            return True
        self.shutdown(wait_s)
        return False

    # shutdown ----------------------------------------------------------------------------------

    def keep_survivors(self, wait_s: float) -> bool:
        """After a loss: stop the processes lost and keep the others, their components closed,
        for the next attempt to adopt (``KeptProcesses.keep_survivors``); False, and every
        process stopped, when none is left."""
        if self.kept.keep_survivors(self.plan, wait_s):
            return True
        self.shutdown(wait_s)
        return False

    def shutdown(self, wait_s: float = 10.0) -> None:
        """Stop every process this scheduler started, giving them ``wait_s`` to close their
        components first; safe to call more than once."""
        self.kept.stop(wait_s)
        self._restore_sigterm()

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


def _identity(
    plan: PlacementPlan, process: Process, env: dict[str, str], torch_threads: int | None
) -> ProcessIdentity:
    """``process``'s identity in ``plan``: its ranks, and its environment (``env`` added)."""
    first = process.components[0]
    world = plan.world_size(first)
    same_node = [r.rank for r in plan.components[first] if r.node == process.node]
    env = {
        "RANK": str(process.rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(same_node.index(process.rank)),
        "LOCAL_WORLD_SIZE": str(len(same_node)),
        "NODE_RANK": str(process.node),
        **env,
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
        torch_threads,
    )


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
