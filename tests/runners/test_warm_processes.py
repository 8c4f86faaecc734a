"""Processes kept warm (``rlcore.scheduler.warm``): a run that ends cleanly hands its processes to
the next run of the same plan, or of another plan on the same slots, which computes what it
would in new ones; a run that fails does not hand them on, and another scheduler starting
adopts those standing where it needs a process and stops the others."""

import time

import pytest
import torch

from rlcore.placement import ComponentRoles, build_plan, plan_for_config
from rlcore.runners.embodied import EmbodiedRunner
from rlcore.scheduler import Scheduler, warm
from rlcore.scheduler.processes import alive
from tests.runners.test_resume import LAYOUTS, config, final_weights

pytestmark = pytest.mark.usefixtures("local_ray")


def pids(runner):
    return sorted({info["pid"] for info in runner.components.scheduler.info.values()})


def test_a_clean_run_hands_its_processes_on_and_a_failed_one_does_not(tmp_path, monkeypatch):
    with warm.keep_processes_warm():
        runs = []
        for name in ("a", "b"):
            cfg = config(tmp_path, f"runner.run_name={name}", *LAYOUTS["env-apart"])
            runner = EmbodiedRunner(cfg, plan_for_config(cfg))
            runs.append((pids(runner), runner.run()))
        (first, one), (second, two) = runs
        assert first == second and len(first) == 2  # env apart, rollout+actor: 2 processes
        # the same numbers as in new processes (run "a" started them)
        a, b = final_weights(tmp_path / "a"), final_weights(tmp_path / "b")
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert one["eval_return_mean"] == two["eval_return_mean"]

        def fails(self, iteration):
            raise RuntimeError("a bug in iteration 1")

        cfg = config(tmp_path, "runner.run_name=c", *LAYOUTS["env-apart"])
        runner = EmbodiedRunner(cfg, plan_for_config(cfg))
        assert pids(runner) == first  # (b ended cleanly)
        monkeypatch.setattr(EmbodiedRunner, "iterate", fails)
        with pytest.raises(RuntimeError, match="a bug in iteration 1"):
            runner.run()
        monkeypatch.undo()
        cfg = config(tmp_path, "runner.run_name=d", *LAYOUTS["env-apart"])
        runner = EmbodiedRunner(cfg, plan_for_config(cfg))
        assert not set(pids(runner)) & set(first)  # new processes after a failure
        runner.run()
        kept_pids = pids(runner)
        # another plan on the same slots (two CPU slots, a process on each): it adopts both
        # processes, with their new ranks and groups, and computes what new ones compute (the
        # split layouts compute the same numbers: tests/runners/test_layouts.py)
        cfg = config(tmp_path, "runner.run_name=e", *LAYOUTS["rollout-apart"])
        runner = EmbodiedRunner(cfg, plan_for_config(cfg))
        assert pids(runner) == kept_pids
        runner.run()
        e = final_weights(tmp_path / "e")
        assert all(torch.equal(a[k], e[k]) for k in a)
        kept = warm._state["kept"][1]
        where = {info["pid"]: rank_slot for rank_slot, info in kept.info.items()}
        slot0 = next(pid for pid, (name, _) in where.items() if name == "env")  # env+rollout: 0
        roles = ComponentRoles("embodied", ("actor", "rollout"))
        plan = build_plan(
            {"actor,rollout": "0"}, roles, num_nodes=1, devices_per_node=2, device="cpu"
        )
        other = Scheduler(plan, init_distributed=False)
        other.start()  # one process, on slot 0: that one is adopted, the other stopped
        try:
            assert warm._state["kept"] is None and not kept.is_alive()
            assert {info["pid"] for info in other.info.values()} == {slot0}
            (gone,) = set(kept_pids) - {slot0}
            deadline = time.monotonic() + 10
            while alive(gone) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not alive(gone)
        finally:
            other.shutdown()
