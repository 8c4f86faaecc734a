"""Envs as users write them: named by a module path (importable: the error says how to make it
so) or by a file, as ``reward.rules.custom_fn`` names one; observing Discrete spaces (one-hot);
their constructor's arguments from the config (``env.kwargs``, checked by name); a threshold that is
the env's own or the config's, never another env's."""

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlcore.config import ConfigError, load_config
from rlcore.envs import EnvError
from rlcore.envs.registry import accepted_arguments, solved_threshold
from rlcore.envs.vector import make_vector_env, space_spec
from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner
from rlcore.runners.preflight import preflight

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


class Corridor(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length=8):
        self.length = length


class Hall(Corridor):
    """Arguments of its own, and the rest passed on (``**kwargs``) to a base with a signature."""

    def __init__(self, *, width=1, **kwargs):
        self.width = width
        super().__init__(**kwargs)


class Open(Corridor):
    """Any argument, read by the env's own code (``**kwargs`` not passed on)."""

    def __init__(self, **kwargs):
        super().__init__(kwargs.pop("size", 8))


def test_env_kwargs_reach_the_constructor_from_the_command_line(tmp_path):
    config = load_config(
        "embodied/cartpole_ppo",
        [
            *SHORT,
            "env.kwargs={max_episode_steps:20,sutton_barto_reward:true}",
            f"runner.output_dir={tmp_path}",
        ],
    )
    assert config.env.kwargs == {"max_episode_steps": 20, "sutton_barto_reward": True}
    summary = EmbodiedRunner(config, plan_for_config(config)).run()
    # Sutton and Barto's reward: 0 a step, -1 when the pole falls (CartPole's own: +1 a step,
    # at least 8 before any pole falls)
    assert -1.0 <= summary["eval_return_mean"] <= 0.0
    envs = make_vector_env("CartPole-v1", 2, "sync", {"max_episode_steps": 3})
    envs.reset(seed=0)
    truncated = [envs.step(np.ones(2, np.int64))[3].tolist() for _ in range(3)]
    assert truncated == [[False, False], [False, False], [True, True]]


@pytest.mark.parametrize(
    ("env_id", "mode", "kwargs", "message"),
    [
        # the native vector env's signature (no gym.make around it)
        ("CartPole-v1", "auto", {"max_episode_step": 9}, "did you mean 'max_episode_steps'"),
        # copies made by gym.make: the env's signature and gym.make's own
        ("CartPole-v1", "sync", {"gravity": 9}, "disable_env_checker, max_episode_steps, "),
        ("tests.envs.test_env_ids:Corridor", "sync", {"lenght": 4}, "(did you mean 'length'?)"),
        ("CartPole-v1", "sync", {"num_envs": 3}, "copies is env.num_envs"),
    ],
)
def test_env_kwargs_the_constructor_does_not_take_are_refused_by_name(
    env_id, mode, kwargs, message
):
    with pytest.raises(EnvError, match=rf"env.kwargs.{next(iter(kwargs))}: .*{re.escape(message)}"):
        make_vector_env(env_id, 1, mode, kwargs)


def test_a_constructor_taking_any_argument_is_not_checked_but_its_refusal_is_named():
    # Open's **kwargs may be read by its own code (as they are), Hall's passed on: from the
    # signatures alone, either may take any name
    assert accepted_arguments(Open) is None and accepted_arguments(Hall) is None
    assert accepted_arguments(Corridor) == {"length"}
    # classes known to pass them on (ManiSkill's tasks): the names of the constructors together
    assert accepted_arguments(Hall, passed_on=True) == {"width", "length"}
    envs = make_vector_env("tests.envs.test_env_ids:Open", 1, "sync", {"size": 5})
    assert envs.envs[0].unwrapped.length == 5
    envs = make_vector_env("tests.envs.test_env_ids:Hall", 1, "sync", {"length": 3, "width": 2})
    assert (envs.envs[0].unwrapped.length, envs.envs[0].unwrapped.width) == (3, 2)
    with pytest.raises(EnvError, match=r"env.kwargs: .*Hall' refused \{'wide': 1\}: TypeError"):
        make_vector_env("tests.envs.test_env_ids:Hall", 1, "sync", {"wide": 1})


def test_the_dry_run_refuses_an_env_kwarg_before_anything_starts(tmp_path):
    config = load_config(
        "embodied/cartpole_ppo", [*SHORT, "env.kwargs={gravity:3}", f"runner.output_dir={tmp_path}"]
    )
    with pytest.raises(ConfigError, match=r"env\.kwargs\.gravity: 'CartPole-v1' takes no argument"):
        preflight(config, plan_for_config(config))
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("env_id", "given", "threshold"),
    [
        ("CartPole-v1", "env", 475.0),  # gymnasium's spec.reward_threshold
        ("Acrobot-v1", "env", -100.0),
        ("Pendulum-v1", "env", None),  # declares none
        ("tests.envs.test_env_ids:Hall", "env", None),  # not a gymnasium id: none
        ("Pendulum-v1", -200, -200.0),  # the config's number
        ("CartPole-v1", None, None),  # null: none
    ],
)
def test_a_threshold_comes_from_the_env_itself_or_the_config(env_id, given, threshold):
    assert solved_threshold(env_id, given) == threshold


def test_another_env_on_the_cartpole_config_does_not_inherit_its_threshold(tmp_path):
    config = load_config(
        "embodied/cartpole_ppo",
        [*SHORT, "env.solved_threshold=env", "env.id=Pendulum-v1", f"runner.output_dir={tmp_path}"],
    )
    summary = EmbodiedRunner(config, plan_for_config(config)).run()
    assert summary["solved_threshold"] is None and summary["time_to_threshold_s"] is None


def make_declared(**kwargs):
    return Corridor(kwargs.get("length", 8))


make_declared.env_arguments = lambda spec_kwargs: {"length", *spec_kwargs}


def test_an_entry_point_may_declare_the_names_it_takes():
    """As ManiSkill's entry points do (rlcore/envs/maniskill.py): their **kwargs reach ManiSkill's
    task classes, whose names the declaration lists."""
    gym.register("rlcore_test/Declared-v0", entry_point=make_declared, kwargs={"task": "T"})
    try:
        envs = make_vector_env("rlcore_test/Declared-v0", 1, "sync", {"length": 2})
        assert envs.envs[0].unwrapped.length == 2
        with pytest.raises(EnvError, match=r"env\.kwargs\.size: .* takes length, task"):
            make_vector_env("rlcore_test/Declared-v0", 1, "sync", {"size": 2})
    finally:
        del gym.registry["rlcore_test/Declared-v0"]
