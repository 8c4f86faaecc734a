"""A Discrete or MultiDiscrete space's ``start`` is honoured: the env receives start + index, in
training, evaluation and an exported policy; an evaluation whose episodes never end stops."""

import numpy as np
import pytest
import torch

import rlcore
from rlcore.cli import main
from rlcore.config import load_config
from rlcore.envs import make_vector_env, space_spec
from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner
from rlcore.workers.embodied.env_worker import env_action


def test_env_action_adds_the_start_to_each_index():
    envs = make_vector_env("tests.envs.start_env:StartDiscrete", 1, "sync")
    spec = space_spec(envs, "discrete")
    assert spec.action_start == (-1,)
    assert env_action(spec, torch.tensor([0, 1, 2])).tolist() == [-1, 0, 1]
    envs = make_vector_env("tests.envs.start_env:StartMultiDiscrete", 1, "sync")
    spec = space_spec(envs, "multi")
    assert spec.action_start == (-2, 5)
    assert env_action(spec, torch.tensor([[0, 0], [1, 2]])).tolist() == [[-2, 5], [-1, 7]]


@pytest.mark.parametrize("env", ["StartDiscrete", "StartMultiDiscrete"])
def test_a_run_and_its_export_act_inside_a_space_with_a_start(tmp_path, env):
    config = load_config(
        "embodied/cartpole_ppo",
        [
            f"env.id=tests.envs.start_env:{env}",
            "env.vector_mode=sync",
            "env.num_envs=2",
            "runner.rollout_steps=16",
            "runner.total_env_steps=64",
            "actor.ppo_mini_batch_size=16",
            "runner.eval_every=1",
            "runner.eval_episodes=2",
            "env.solved_threshold=null",
            "runner.progress=false",
            "logger.tensorboard=false",
            f"runner.output_dir={tmp_path}",
            "runner.run_name=r",
        ],
    )
    summary = EmbodiedRunner(config, plan_for_config(config)).run()  # every step in the space
    assert summary["iterations"] == 2
    out = tmp_path / "policy"
    assert main(["export", str(tmp_path / "r"), str(out), "--env", config.env.id]) == 0
    policy = rlcore.load_policy(out)
    actions = np.asarray(policy(np.zeros((5, 2), np.float32), deterministic=False))
    space = make_vector_env(config.env.id, 1, "sync").single_action_space
    assert all(space.contains(np.asarray(a, dtype=space.dtype)) for a in actions)


def test_an_env_that_never_ends_is_said_once_and_its_evaluation_stops_at_its_cap(tmp_path, capsys):
    config = load_config(
        "embodied/cartpole_ppo",
        [
            "env.id=tests.envs.start_env:Endless",
            "env.vector_mode=sync",
            "env.num_envs=2",
            "runner.rollout_steps=16",
            "runner.total_env_steps=64",
            "actor.ppo_mini_batch_size=16",
            "runner.eval_every=1",
            "runner.eval_episodes=3",
            "runner.eval_max_steps=7",
            "env.solved_threshold=null",
            "runner.progress=false",
            "logger.tensorboard=false",
            f"runner.output_dir={tmp_path}",
            "runner.run_name=r",
        ],
    )
    summary = EmbodiedRunner(config, plan_for_config(config)).run()
    assert summary["eval_return_mean"] == 7.0  # 7 steps of reward 1, each episode cut
    err = capsys.readouterr().err
    assert "evaluation: 3 of 3 episodes had not ended after 7 steps (runner.eval_max_steps)" in err
    # no training episode ended either: said once, before the first of the 2 evaluations
    said = [line for line in err.splitlines() if "has ended in" in line]
    assert said == [
        "rlcore: env.id: no episode of tests.envs.start_env:Endless has ended in 32 "
        "training steps (16 per env), so there are no episode statistics (env/episode_return); "
        "if its episodes never end, give it a time limit (env.kwargs.max_episode_steps) or an "
        "end; evaluation episodes stop after runner.eval_max_steps=7 steps"
    ]
    assert err.index("has ended in") < err.index("evaluation: 3 of 3")
