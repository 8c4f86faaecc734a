"""A tensor env (a GPU simulator's batches, kept as torch on its device) trains exactly as the same
env stepped in numpy, and hands the policy the simulator's own observation tensors."""

from types import SimpleNamespace

import pytest
import torch

import tests.envs.drift  # noqa: F401  (registers rlcore_test/Drift-v0 and DriftNumpy-v0)
from rlcore.config import load_config
from rlcore.envs import make_vector_env, tensor_device
from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner
from rlcore.runners.metrics import MetricsLogger
from rlcore.workers.embodied.env_worker import EnvWorker


def drift_config(tmp_path, env_id, *extra):
    return load_config(
        "embodied/cartpole_ppo",
        [
            f"env.id={env_id}",
            "env.num_envs=4",
            "env.vector_mode=native",
            "env.normalize_obs=true",
            "env.normalize_reward=true",
            "env.solved_threshold=null",
            "runner.rollout_steps=16",
            "runner.total_env_steps=192",
            "runner.eval_episodes=2",
            "runner.eval_every=1",
            "runner.progress=false",
            f"runner.output_dir={tmp_path}",
            "logger.tensorboard=false",
            "actor.ppo_mini_batch_size=32",
            "actor.ppo_epochs=2",
            "algorithm.gamma=0.9",
            "actor.model.hidden_sizes=[16,16]",
            *extra,
        ],
    )


def test_the_drift_ids_are_a_tensor_env_and_a_numpy_one():
    cpu = torch.device("cpu")
    assert tensor_device(make_vector_env("rlcore_test/Drift-v0", 2, "native")) == cpu
    assert tensor_device(make_vector_env("rlcore_test/DriftNumpy-v0", 2, "native")) is None


def test_a_tensor_env_trains_as_the_same_env_stepped_in_numpy(tmp_path, monkeypatch):
    logged: dict[str, list[dict]] = {}

    def run(env_id):
        rows = logged.setdefault(env_id, [])
        monkeypatch.setattr(MetricsLogger, "log", lambda self, step, m: rows.append(dict(m)))
        config = drift_config(tmp_path / env_id.replace("/", "_"), env_id)
        return EmbodiedRunner(config, plan_for_config(config)).run()

    tensors, numpy = run("rlcore_test/Drift-v0"), run("rlcore_test/DriftNumpy-v0")
    assert tensors["iterations"] == numpy["iterations"] == 3
    assert tensors["eval_return_mean"] == pytest.approx(numpy["eval_return_mean"], rel=1e-5)
    a, b = logged["rlcore_test/Drift-v0"], logged["rlcore_test/DriftNumpy-v0"]
    compared = 0
    for row_a, row_b in zip(a, b, strict=True):
        for name, value in row_a.items():
            if not name.startswith(("time/", "perf/")) and value is not None:
                # float64 running statistics in torch and in numpy sum in different orders
                assert value == pytest.approx(row_b[name], rel=1e-4, abs=1e-6), name
                compared += 1
    assert compared > 30
    assert any(row.get("actor/pg_loss") for row in a)  # it did train


def test_the_policy_reads_the_simulators_own_observation_tensors(tmp_path):
    config = drift_config(tmp_path, "rlcore_test/Drift-v0", "env.normalize_obs=false")
    worker = EnvWorker(SimpleNamespace(rank=0, world_size=1, in_driver=True), config)
    try:
        sim = worker.stage_envs[0].env  # the Drift scene inside NextStepVectorEnv
        assert worker.device == torch.device("cpu") and worker.stage_envs[0].numpy is False
        assert worker.observe().data_ptr() == sim.last_obs.data_ptr()  # no copy at reset
        step = worker.step(torch.full((4, 1), 0.5))
        assert step.next_obs.data_ptr() == sim.last_obs.data_ptr()  # nor after a step
        assert isinstance(worker.finished_return, torch.Tensor)  # episode sums stay in torch
        worker.save_checkpoint(str(tmp_path / "env"))
        sums = worker.episode_return.clone()
        worker.step(torch.zeros((4, 1)))
        worker.load_checkpoint(str(tmp_path / "env"))  # reseeded episodes, saved sums restored
        assert isinstance(worker.episode_return, torch.Tensor)
        assert torch.equal(worker.finished_return, torch.zeros(4, dtype=torch.float64))
        assert sums.abs().sum() > 0
    finally:
        worker.close()
