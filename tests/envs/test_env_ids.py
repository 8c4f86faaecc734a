"""The ways ``env.id`` names an env a user wrote: a module path (importable: the error says how
to make it so), or a file, as ``reward.custom_fn`` names one."""

from pathlib import Path

import pytest

from rlcore.config import load_config
from rlcore.envs import EnvError
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


def test_an_env_class_in_a_file_trains_named_by_its_path(tmp_path, monkeypatch):
    (tmp_path / "walk.py").write_text(ENV_FILE)
    monkeypatch.chdir(tmp_path)  # a path relative to where the run starts
    config = load_config(
        "embodied/cartpole_ppo",
        [
            "env.id=walk.py:Walk",
            "env.num_envs=4",
            "runner.rollout_steps=16",
            "runner.total_env_steps=128",
            "actor.ppo_mini_batch_size=32",
            "runner.progress=false",
            "logger.tensorboard=false",
            "env.solved_threshold=null",
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
