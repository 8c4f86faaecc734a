"""A run resumed from a checkpoint ends exactly where the uninterrupted run ends."""

import shutil

import pytest
from safetensors.torch import load_file

from rlcore.config import ConfigError, load_config
from rlcore.runners.embodied import EmbodiedRunner

SMALL = [
    "env.num_envs=4", "runner.rollout_steps=16", "runner.total_env_steps=384",
    "actor.ppo_mini_batch_size=32", "actor.ppo_epochs=2", "runner.checkpoint_every=3",
    "runner.eval_every=2", "runner.eval_episodes=2", "runner.progress=false",
    "logger.tensorboard=false", "env.solved_threshold=null",
]  # fmt: skip


def config(tmp_path, *extra):
    return load_config("embodied/cartpole_ppo", [*SMALL, f"runner.output_dir={tmp_path}", *extra])


@pytest.mark.parametrize(
    "env",
    [
        ["env.id=CartPole-v1"],
        ["env.id=Pendulum-v1", "env.vector_mode=sync", "env.normalize_obs=true",
         "env.normalize_reward=true"],
    ],
)  # fmt: skip
def test_resumed_run_ends_with_bit_identical_parameters(tmp_path, env):
    full = EmbodiedRunner(config(tmp_path, *env, "runner.run_name=full")).run()
    assert full["iterations"] == 6

    # Stop after iteration 3: a run folder holding only the iteration-3 checkpoint.
    stopped = tmp_path / "stopped" / "checkpoints"
    shutil.copytree(tmp_path / "full" / "checkpoints" / "iter_000003", stopped / "iter_000003")
    resumed = EmbodiedRunner(config(tmp_path, *env, f"runner.resume_dir={stopped.parent}")).run()

    a = load_file(tmp_path / "full" / "checkpoints" / "iter_000006" / "model.safetensors")
    b = load_file(stopped / "iter_000006" / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(a[k].equal(b[k]) for k in a), "parameters differ after resuming"
    assert resumed["env_steps"] == full["env_steps"] == 384
    assert resumed["eval_return_mean"] == full["eval_return_mean"]


def test_resuming_with_another_config_names_the_changed_keys(tmp_path):
    EmbodiedRunner(config(tmp_path, "runner.run_name=a", "runner.total_env_steps=192")).run()
    with pytest.raises(ConfigError, match=r"other values of algorithm\.gamma"):
        EmbodiedRunner(
            config(tmp_path, f"runner.resume_dir={tmp_path / 'a'}", "algorithm.gamma=0.9")
        )


def test_resume_from_a_folder_without_checkpoints_says_what_to_give(tmp_path):
    with pytest.raises(ConfigError, match=r"runner\.resume_dir: no checkpoint at"):
        EmbodiedRunner(config(tmp_path, f"runner.resume_dir={tmp_path}"))


def test_envs_that_cannot_be_pickled_are_refused_before_training(tmp_path):
    unpicklable = "env.id=tests.runners.corridor:LockedCartPole"
    with pytest.raises(
        ConfigError, match=r"runner.checkpoint_every: the envs of .* cannot be saved"
    ):
        EmbodiedRunner(config(tmp_path, unpicklable, "env.vector_mode=sync"))
    assert EmbodiedRunner(config(tmp_path, unpicklable, "env.vector_mode=sync",
                                 "runner.checkpoint_every=0")).run()["iterations"] == 6  # fmt: skip


def test_multi_process_runs_resume_bit_for_bit(tmp_path):
    """2 data-parallel ranks, each stepping the envs of its own env process: weights and
    optimiser from rank 0, RNGs and carry-over from each rank, envs from the env processes."""
    from rlcore.placement import plan_for_config
    from rlcore.runners.data_parallel import run_data_parallel

    placement = "{env:0-1,rollout:2-3,actor:2-3}"
    cluster = ("cluster.devices_per_node=4", f"cluster.component_placement={placement}")

    def run(*extra):
        cfg = config(tmp_path, *cluster, *extra)
        return run_data_parallel(cfg, plan_for_config(cfg))

    assert run("runner.run_name=full")["actor_ranks"] == 2
    stopped = tmp_path / "stopped" / "checkpoints"
    shutil.copytree(tmp_path / "full" / "checkpoints" / "iter_000003", stopped / "iter_000003")
    run(f"runner.resume_dir={stopped.parent}")
    a = load_file(tmp_path / "full" / "checkpoints" / "iter_000006" / "model.safetensors")
    b = load_file(stopped / "iter_000006" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].equal(b[key]), key
