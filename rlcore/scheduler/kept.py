"""``KeptProcesses``: what a ``Scheduler`` holds on Ray, as one thing it can hand on whole.

A scheduler's CPU or GPU slots (its placement groups), the worker processes on them, what each
process said of itself (``describe``), the folder its watchdogs write their last words to and
whether the scheduler started Ray: all of it outlives one run when processes are kept warm
(``warm.py``), so it lives here rather than in the scheduler. A scheduler that starts on
another's kept processes takes them with ``Scheduler.hand_on`` and ``adopt``s the ones that
stand where its plan needs a process; the others are stopped.

Also here, since they read only these: which processes are gone and why (``dead``), keeping the
survivors of a loss (``keep_survivors``), closing every component while keeping the processes
(``release_components``), and stopping everything (``stop``).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

import ray

from rlcore.placement import PlacementPlan, Process
from rlcore.scheduler.errors import WorkerLost
from rlcore.scheduler.last_words import account
from rlcore.scheduler.ray_cluster import NodeSlots, alive_nodes, disconnect, lost_node, release
from rlcore.scheduler.worker_group import death_cause

# Once a process is known lost, how long the others get to be seen lost too (Ray reports a
# death at once); the rest are busy, in a call that waits on the lost one, and alive.
LOST_TOO_S = 0.5

Dead = tuple[tuple[str, ...], int, int, str]  # (components, rank, node, cause)


@dataclass
class KeptProcesses:
    """The slots and processes one scheduler holds (see the module docstring).

    ``handles`` and ``info`` are keyed by ``(component, rank)``; fused components share one
    process, so one handle can appear under several keys.
    """

    slots: list[NodeSlots] = field(default_factory=list)
    last_words: str | None = None  # the watchdogs' folder on this node (last_words.py)
    owns_ray: bool = False  # whether the scheduler started the Ray it runs on
    handles: dict[tuple[str, int], Any] = field(default_factory=dict)
    info: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    # the processes ``dead`` found dead, and why, by handle id (with the handle: its id is not
    # reused while held): not asked again, which for one on a lost node takes seconds
    known_gone: dict[int, tuple[Any, str]] = field(default_factory=dict)

    def can_hold(self, plan: PlacementPlan) -> bool:
        """Whether these slots can hold ``plan``: its nodes, every one still alive (a lost
        node's slots and processes are gone with it), and at least as many slots on each."""
        return (
            len(self.slots) == plan.num_nodes
            and all(slot.group.bundle_count >= plan.devices_per_node for slot in self.slots)
            and {slot.node_id for slot in self.slots} <= alive_nodes()
        )

    def processes(self) -> list[Any]:
        """One handle per process (fused components share theirs)."""
        return list({id(h): h for h in self.handles.values()}.values())

    def adopt(self, kept_plan: PlacementPlan, processes: list[Process]) -> list[Any]:
        """For each of ``processes`` (a new plan's), a kept process (of ``kept_plan``) that
        stands on its node and devices with at most its share of them (the largest such: the
        slot still holds every process of the plan), or None where none does; the kept
        processes left over are stopped. The kept ones are forgotten: the new plan's are
        recorded under their new keys once started."""
        free: dict[tuple, list[tuple[float, Any]]] = {}
        for process in kept_plan.processes():
            handle = self.handles.get((process.components[0], process.rank))
            if handle is not None:
                where = (process.node, tuple(process.devices))
                free.setdefault(where, []).append((process.fraction, handle))
        self.handles, self.info = {}, {}
        handles: list[Any] = []
        for process in processes:
            here = free.get((process.node, tuple(process.devices)), [])
            fits = [entry for entry in here if entry[0] <= process.fraction]
            best = max(fits, key=lambda entry: entry[0], default=None)
            if best is not None:
                here.remove(best)
            handles.append(None if best is None else best[1])
        stop_processes([handle for left in free.values() for _, handle in left], {}, wait_s=10.0)
        return handles

    def lost_while_starting(
        self, error: BaseException, processes: list[Process], handles: list[Any]
    ) -> WorkerLost | None:
        """The process that died while its scheduler started (killed, its node lost), as the
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
                slot = self.slots[process.node] if process.node < len(self.slots) else None
                if slot is not None and slot.node_id not in alive:
                    cause = lost_node(slot.ip, slot.node_id)
                else:
                    cause = f"the process died while starting: {death_cause(death)}"
                named = "+".join(process.components)
                return WorkerLost(named, process.rank, process.node, cause)
        return None

    def dead(self, plan: PlacementPlan, wait_s: float = 5.0) -> list[Dead]:
        """``(components, rank, node, cause)`` of each process of ``plan`` that is gone, or
        stopped (on this machine: its state says so); ``cause`` says which, and why it died. A
        process busy in a long call (or stuck in a collective) does not answer within
        ``wait_s`` and counts as alive."""
        where = {id(h): (name, rank) for (name, rank), h in self.handles.items()}
        here = ray.get_runtime_context().get_node_id()
        gone = [(h, cause) for key, (h, cause) in self.known_gone.items() if key in where]
        known = {id(h) for h, _ in gone}
        # a stopped process answers nothing: seen in its state, not waited for
        halted = {key: h for key, h in self.stopped_here().items() if key not in known}
        pings = {
            h.describe.remote(): h
            for h in self.processes()
            if id(h) not in halted and id(h) not in known
        }
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
                    words = account(self.last_words, info["pid"], info["node_id"] == here)
                    gone.append((pings[ref], f"the process died: {words or death_cause(error)}"))
        self.known_gone = {id(h): (h, cause) for h, cause in gone}  # (a stopped one may go on)
        for handle in halted.values():
            pid = self.info[where[id(handle)]]["pid"]
            gone.append((handle, f"the process is stopped (pid {pid}: SIGSTOP, a debugger)"))
        dead = []
        for handle, cause in gone:
            name, rank = where[id(handle)]
            process = next(p for p in plan.processes() if p.rank == rank and name in p.components)
            dead.append((process.components, rank, process.node, cause))
        return dead

    def stopped_here(self) -> dict[int, Any]:
        """The processes on this machine that are stopped (their state says so), by handle id."""
        from rlcore.scheduler.processes import stopped

        here = ray.get_runtime_context().get_node_id()
        where = {id(h): key for key, h in self.handles.items()}
        return {
            id(h): h
            for h in self.processes()
            if self.info[where[id(h)]]["node_id"] == here
            and stopped(self.info[where[id(h)]]["pid"])
        }

    def all_answer(self, plan: PlacementPlan) -> bool:
        """Whether every process is there and answers (none lost)."""
        if not self.handles or not ray.is_initialized():
            return False
        try:
            return not self.dead(plan)
        except Exception:  # (handles of another Ray session)
            return False

    def release_components(self, wait_s: float = 10.0) -> bool:
        """Close every component, keeping the processes, their groups and slots; False if a
        process does not close in ``wait_s`` (then none can be kept)."""
        try:
            ray.get([h.release.remote() for h in self.processes()], timeout=wait_s)
        except Exception:
            return False
        return True

    def keep_survivors(self, plan: PlacementPlan, wait_s: float) -> bool:
        """After a loss: stop the processes lost (dead, stopped, or not closing their
        components within ``wait_s``: busy in a call that waits on a lost peer) and keep the
        others, their components closed; False when none is left."""
        lost = {id(self.handles[(names[0], rank)]) for names, rank, _, _ in self.dead(plan, wait_s)}
        alive = [h for h in self.processes() if id(h) not in lost]
        releasing = {h.release.remote(): h for h in alive}
        done, _ = ray.wait(list(releasing), num_returns=len(releasing), timeout=wait_s)
        closed = set()
        for ref in done:
            with contextlib.suppress(Exception):
                ray.get(ref)
                closed.add(id(releasing[ref]))
        kill([h for h in self.processes() if id(h) not in closed])
        self.handles = {key: h for key, h in self.handles.items() if id(h) in closed}
        return bool(self.handles)

    def stop(self, wait_s: float = 10.0) -> None:
        """Stop every process, giving them ``wait_s`` to close their components first; release
        the slots, and Ray if it was started here; safe to call more than once."""
        handles = self.processes()
        if handles and ray.is_initialized():
            # (nor a stopped one, which would answer nothing, make the others wait)
            halted: dict[int, Any] = {}
            with contextlib.suppress(Exception):
                halted = self.stopped_here()
            stop_processes(handles, halted, wait_s)
        self.handles.clear()
        if ray.is_initialized():
            release(self.slots)
        self.slots = []
        if self.owns_ray and ray.is_initialized():
            disconnect()
        self.owns_ray = False
        if self.last_words is not None:
            shutil.rmtree(self.last_words, ignore_errors=True)
            self.last_words = None


def stop_processes(handles: list[Any], halted: dict[int, Any], wait_s: float) -> None:
    """Give ``handles``' processes ``wait_s`` to close (those in ``halted``, stopped, are not
    asked), then end them. A dead or hung process does not stop the clean-up of the others."""
    if not handles or not ray.is_initialized():
        return
    with contextlib.suppress(Exception):
        closing = [h.close.remote() for h in handles if id(h) not in halted]
        ray.wait(closing, num_returns=len(closing), timeout=wait_s)
    kill(handles)


def kill(handles: list[Any]) -> None:
    for h in handles:
        with contextlib.suppress(Exception):
            ray.kill(h)
