"""gymnasium's own ways in: an id that a user's module registers, named ``module:Id`` as
``gym.make`` reads it; rlcore's envs made by ``gym.make``; MultiBinary actions trained with one
Bernoulli per bit; a space rlcore cannot act in refused in one line with the way on."""

import sys

import gymnasium as gym
import numpy as np
import pytest

from rlcore.config import ConfigError, load_config
from rlcore.envs import EnvError
from rlcore.envs.registry import resolve_env
from rlcore.envs.vector import make_vector_env, space_spec
from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner
from rlcore.runners.preflight import preflight

REGISTERED = "tests.envs.registered_envs:BitMatch-v0"


def test_an_id_the_users_module_registers_is_made_as_gym_make_makes_it():
    sys.modules.pop("tests.envs.registered_envs", None)  # registered by the import below
    assert resolve_env(REGISTERED) == "BitMatch-v0"
    envs = make_vector_env(REGISTERED, 2, "sync")
    spec = space_spec(envs, REGISTERED)
    assert (spec.action_kind, spec.action_dims) == ("multi_binary", (4,))
    assert type(gym.make(REGISTERED).unwrapped).__name__ == "BitMatch"  # gymnasium's reading
    envs.close()


def test_an_id_the_module_does_not_register_is_named_with_the_fix():
    with pytest.raises(
        EnvError,
        match=r"^env.id: module 'tests.envs.registered_envs' registers "
        r"no gymnasium id 'BitMach-v0' \(did you mean "
        r"'tests.envs.registered_envs:BitMatch-v0'\?\); register it there",
    ):
        resolve_env("tests.envs.registered_envs:BitMach-v0")
    with pytest.raises(EnvError, match=r"cannot import module 'no_such_envs' "):
        resolve_env("no_such_envs:Walk-v0")


def test_rlcore_envs_are_gymnasium_ids():
    import rlcore.envs  # noqa: F401  (registers them)

    env = gym.make("color_reach")
    obs, _ = env.reset(seed=0)
    assert env.unwrapped.__class__.__name__ == "ColorReach" and env.observation_space.contains(obs)
    # rlcore itself still makes its own factory's env (no gymnasium wrappers around it)
    assert not isinstance(resolve_env("color_reach"), str)


class GridActions(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.MultiBinary([2, 2])


class DictActions(GridActions):
    action_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2)})


@pytest.mark.parametrize(
    ("name", "way_on"),
    [
        ("GridActions", "flatten the action to 1-D in a gymnasium.ActionWrapper"),
        ("DictActions", "gymnasium.spaces.flatten_space"),
    ],
)
def test_a_space_rlcore_cannot_act_in_is_named_with_what_it_takes(name, way_on):
    env_id = f"tests.envs.test_gymnasium:{name}"
    envs = gym.vector.SyncVectorEnv([lambda: resolve_env(env_id)()])
    with pytest.raises(EnvError) as error:
        space_spec(envs, env_id)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"env.id: '{env_id}' acts in ")
    assert "Discrete, MultiDiscrete, 1-D MultiBinary and 1-D Box actions" in message
    assert way_on in message


def test_the_dry_run_refuses_what_the_run_refuses_for_a_registered_id(tmp_path):
    config = load_config(
        "embodied/cartpole_ppo",
        ["env.id=tests.envs.registered_envs:NoSuch-v0", f"runner.output_dir={tmp_path}"],
    )
    with pytest.raises(ConfigError, match="registers no gymnasium id 'NoSuch-v0'"):
        preflight(config, plan_for_config(config))


def test_multi_binary_actions_learn_the_target_bits(tmp_path):
    config = load_config(
        "embodied/cartpole_ppo",
        [
            f"env.id={REGISTERED}",
            "env.num_envs=4",
            "runner.rollout_steps=32",
            "runner.total_env_steps=2048",
            "actor.ppo_mini_batch_size=64",
            "runner.progress=false",
            "logger.tensorboard=false",
            "env.solved_threshold=null",
            f"runner.output_dir={tmp_path}",
        ],
    )
    preflight(config, plan_for_config(config))  # the dry run takes it as the run does
    summary = EmbodiedRunner(config, plan_for_config(config)).run()
    # a random policy returns 16 (each of 32 bit-steps right half the time), the best 32
    assert summary["eval_return_mean"] >= 30, summary
