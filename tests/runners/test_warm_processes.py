"""Processes kept warm (``rlcore.scheduler.warm``): a run that ends cleanly hands its processes to
the next run of the same plan, which computes what it would in new ones; a run that fails does
not hand them on, and another scheduler starting stops them."""

import pytest
import torch

from rlcore.placement import ComponentRoles, build_plan, plan_for_config
from rlcore.runners.embodied import EmbodiedRunner
from rlcore.scheduler import Scheduler, warm
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
        kept = warm._state["kept"][1]
        roles = ComponentRoles("embodied", ("actor", "rollout"))
        plan = build_plan(
            {"actor,rollout": "0"}, roles, num_nodes=1, devices_per_node=2, device="cpu"
        )
        other = Scheduler(plan, init_distributed=False)
        other.start()  # another scheduler's start stops the kept processes (their slots)
        try:
            assert warm._state["kept"] is None and not kept.is_alive()
        finally:
            other.shutdown()
