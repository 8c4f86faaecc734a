"""``KeptProcesses``: which kept process a new plan's process adopts (on its node and devices,
with at most its share of them), the others stopped; a scheduler hands what it holds on
whole. Without Ray: the handles are stand-ins, the stopping is recorded."""

import pytest

from rlcore.placement import ComponentRoles, build_plan
from rlcore.scheduler import kept as kept_module
from rlcore.scheduler.kept import KeptProcesses
from rlcore.scheduler.scheduler import Scheduler

ROLES = ComponentRoles("embodied", ("actor", "rollout"))


def plan(placement, fuse=True):
    return build_plan(placement, ROLES, num_nodes=1, devices_per_node=2, device="cpu", fuse=fuse)


def holding(kept_plan):
    """A KeptProcesses with a named stand-in handle for each process of ``kept_plan``."""
    kept = KeptProcesses()
    for process in kept_plan.processes():
        handle = f"{'+'.join(process.components)}:{process.rank}"
        for name in process.components:
            kept.handles[(name, process.rank)] = handle
            kept.info[(name, process.rank)] = {"pid": 0}
    return kept


@pytest.fixture
def stopped(monkeypatch):
    seen = []
    monkeypatch.setattr(
        kept_module, "stop_processes", lambda handles, *_, **__: seen.extend(handles)
    )
    return seen


def test_a_process_adopts_the_kept_one_on_its_slot_and_the_rest_are_stopped(stopped):
    # kept: rollout+env on slot 0, actor on slot 1; new: actor+rollout on slot 0 only
    old = plan({"env": "0", "rollout": "0", "actor": "1"})
    kept = holding(old)
    new = plan({"actor,rollout": "0"})
    assert kept.adopt(old, new.processes()) == ["rollout+env:0"]
    assert stopped == ["actor:0"]
    assert kept.handles == {} and kept.info == {}  # recorded afresh under the new plan's keys


def test_a_kept_process_with_a_larger_share_than_the_new_one_is_not_adopted(stopped):
    # kept: one process holding all of slot 0; new: three processes a third of it each
    old = plan({"actor,rollout,env": "0"})
    new = plan({"env": "0", "rollout": "0", "actor": "0-1"}, fuse=False)
    shares = {(p.components, p.devices): round(p.fraction, 2) for p in new.processes()}
    assert shares[(("actor",), (1,))] == 1.0 and shares[(("env",), (0,))] == 0.33
    kept = holding(old)
    assert kept.adopt(old, new.processes()) == [None] * 4  # started afresh
    assert stopped == ["actor+rollout+env:0"]


def test_smaller_kept_shares_are_adopted_each_by_one_process(stopped):
    # kept: three thirds of slot 0 and all of slot 1; new: two halves of slot 0, slot 1 whole
    old = plan({"env": "0", "rollout": "0", "actor": "0-1"}, fuse=False)
    new = plan({"env": "0", "rollout": "0", "actor": "1"}, fuse=False)
    processes = new.processes()
    kept = holding(old)
    where = [(p.components, p.devices) for p in processes]
    adopted = dict(zip(where, kept.adopt(old, processes), strict=True))
    assert adopted.pop((("actor",), (1,))) == "actor:1"
    thirds = {"actor:0", "rollout:0", "env:0"}
    assert len(set(adopted.values())) == 2 and set(adopted.values()) < thirds
    assert set(stopped) == thirds - set(adopted.values()) and len(stopped) == 1


def test_a_scheduler_hands_on_what_it_holds_and_holds_nothing_after():
    scheduler = Scheduler(plan({"actor,rollout,env": "0"}), init_distributed=False)
    held = scheduler.kept
    held.handles[("actor", 0)] = "actor:0"
    assert scheduler.hand_on() is held
    assert scheduler.kept.handles == {} and scheduler.info == {}
    assert not scheduler.is_alive()
