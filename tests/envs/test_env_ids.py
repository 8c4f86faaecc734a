"""Envs as users write them: named by a module path (importable: the error says how to make it
so) or by a file, as ``reward.custom_fn`` names one; observing Discrete spaces (one-hot)."""

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlcore.config import load_config
from rlcore.envs import EnvError
from rlcore.envs.vector import make_vector_env, space_spec
from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner

ENV_FILE = '''
import gymnasium as gym
import numpy as np


class Walk(gym.Env):
    """Reward 1 for action 1, episodes of 8 steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), float(action), False, self.t >= 8, {}
'''


# a run of 128 steps, 4 envs
SHORT = [
    "env.num_envs=4",
    "runner.rollout_steps=16",
    "runner.total_env_steps=128",
    "actor.ppo_mini_batch_size=32",
    "runner.progress=false",
    "logger.tensorboard=false",
    "env.solved_threshold=null",
]


def test_an_env_class_in_a_file_trains_named_by_its_path(tmp_path, monkeypatch):
    (tmp_path / "walk.py").write_text(ENV_FILE)
    monkeypatch.chdir(tmp_path)  # a path relative to where the run starts
    config = load_config(
        "embodied/cartpole_ppo",
        [
            "env.id=walk.py:Walk",
            *SHORT,
            f"runner.output_dir={tmp_path / 'out'}",
        ],
    )
    assert config.env.id == f"{tmp_path / 'walk.py'}:Walk"  # absolute: every process reads it
    summary = EmbodiedRunner(config, plan_for_config(config)).run()
    assert summary["env_steps"] == 128 and summary["eval_return_mean"] is not None
    assert Path(summary["run_dir"]).parent == tmp_path / "out"
    assert Path(summary["run_dir"]).name.startswith("walk.Walk-s1-")


def test_a_module_that_does_not_import_says_how_to_make_it_import(tmp_path):
    from rlcore.envs.registry import resolve_env

    with pytest.raises(EnvError, match=r"cannot import module 'no_such_envs' .* PYTHONPATH, or "):
        resolve_env("no_such_envs:Walk")
    with pytest.raises(EnvError, match=r"env.id: .*missing.py \(of '.*missing.py:W'\) does not"):
        resolve_env(f"{tmp_path / 'missing.py'}:W")
    (tmp_path / "broken.py").write_text("class W(:\n")
    with pytest.raises(EnvError, match=r"broken.py cannot be loaded: SyntaxError: .*\(line 1\)"):
        resolve_env(f"{tmp_path / 'broken.py'}:W")


class DialDiscrete(gym.Env):
    """Observes a dial position in Discrete(5, start=-2): -2 at reset, then -1, 0, ..."""

    observation_space = gym.spaces.Discrete(5, start=-2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 0.0, False, self.t >= 4, {}

    def _obs(self):
        return -2 + self.t


class DialMulti(DialDiscrete):
    """Observes (t % 2, t % 3) in MultiDiscrete([2, 3])."""

    observation_space = gym.spaces.MultiDiscrete([2, 3])

    def _obs(self):
        return np.array([self.t % 2, self.t % 3])


@pytest.mark.parametrize(
    ("name", "at_reset", "after_a_step"),
    [
        ("DialDiscrete", [1, 0, 0, 0, 0], [0, 1, 0, 0, 0]),  # index = position + 2
        ("DialMulti", [1, 0, 1, 0, 0], [0, 1, 0, 1, 0]),  # a one-hot of 2, then one of 3
    ],
)
def test_discrete_observations_are_one_hot(name, at_reset, after_a_step):
    env_id = f"tests.envs.test_env_ids:{name}"
    envs = make_vector_env(env_id, 2, "sync")
    obs, _ = envs.reset(seed=0)
    assert space_spec(envs, env_id).obs_shape == (5,)
    step1, *_ = envs.step(np.zeros(2, np.int64))
    assert obs.tolist() == [at_reset] * 2 and step1.tolist() == [after_a_step] * 2
    envs.close()


def test_frozen_lake_trains_on_one_hot_observations(tmp_path):
    config = load_config(
        "embodied/cartpole_ppo",
        [
            "env.id=FrozenLake-v1",
            *SHORT,
            f"runner.output_dir={tmp_path}",
            "runner.checkpoint_every=1",
        ],
    )
    summary = EmbodiedRunner(config, plan_for_config(config)).run()
    assert summary["env_steps"] == 128
    # exported, the policy takes the env's own observations (cell numbers), one or a batch
    from rlcore import load_policy
    from rlcore.export import export

    export(summary["run_dir"], tmp_path / "policy")
    policy = load_policy(tmp_path / "policy")
    one, batch = policy(np.int64(0)), policy(np.arange(16))
    assert np.asarray(one).shape == () and np.asarray(batch).shape == (16,)
    assert batch[0] == one  # the same cell, the same (deterministic) action
    assert set(np.asarray(batch).tolist()) <= {0, 1, 2, 3}
