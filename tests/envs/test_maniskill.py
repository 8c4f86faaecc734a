"""ManiSkill3 tasks (rlcore/envs/maniskill.py): the CPU env, PPO on it, the GPU path's autoreset.

Tests that simulate skip without ManiSkill (the 'maniskill' extra) or a Vulkan driver that SAPIEN
can use (.ci/install_vulkan.sh); the others run everywhere.
"""

import subprocess
import sys
from importlib.util import find_spec
from typing import ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlcore.config import load_config
from rlcore.envs import EnvError, make_vector_env, space_spec
from rlcore.envs.maniskill import NextStepVectorEnv, make_maniskill_env, make_maniskill_vector_env
from rlcore.placement import plan_for_config
from rlcore.runners.embodied import EmbodiedRunner

PICKCUBE = "maniskill/PickCube-v1"


@pytest.fixture(scope="module")
def maniskill():
    """Skips unless ManiSkill is installed and SAPIEN finds a Vulkan device to build scenes on."""
    if find_spec("mani_skill") is None:
        pytest.skip("ManiSkill envs need the 'maniskill' extra")
    # In a subprocess: a broken driver may crash the interpreter rather than raise.
    probe = "import sapien; sapien.render.RenderMaterial(base_color=[1, 0, 0, 1])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        pytest.skip(f"SAPIEN has no working Vulkan driver (.ci/install_vulkan.sh): {why}")


@pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")  # ManiSkill on numpy 2
def test_pickcube_steps_on_the_cpu_with_next_step_autoreset(maniskill):
    envs = make_vector_env(PICKCUBE, 1, "sync")
    try:
        spec = space_spec(envs, PICKCUBE)
        assert spec.action_kind == "box" and spec.action_dims == (8,)  # 7 joints + gripper
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (1, *spec.obs_shape) and obs.dtype == np.float32
        action = np.zeros((1, 8), dtype=np.float32)
        for t in range(1, 51):
            obs, reward, terminated, truncated, _ = envs.step(action)
            assert np.isfinite(obs).all() and 0.0 <= reward[0] <= 1.0  # normalized_dense
            assert not terminated[0] and truncated[0] == (t == 50)  # 50-step time limit
        obs, reward, terminated, truncated, _ = envs.step(action)  # the reset step
        assert reward[0] == 0.0 and not (terminated[0] or truncated[0])
    finally:
        envs.close()


def test_ppo_runs_on_pickcube_in_subprocess_envs(maniskill, tmp_path):
    config = load_config(
        "embodied/maniskill_pickcube_ppo",
        [
            "env.num_envs=2",
            "env.vector_mode=async",
            "runner.rollout_steps=32",
            "runner.total_env_steps=128",
            "runner.eval_episodes=1",
            "runner.eval_every=0",
            "actor.ppo_epochs=1",
            "actor.ppo_mini_batch_size=32",
            "actor.model.hidden_sizes=[32]",
            "runner.progress=false",
            f"runner.output_dir={tmp_path}",
            "logger.tensorboard=false",
        ],
    )
    summary = EmbodiedRunner(config, plan_for_config(config)).run()
    assert summary["env_steps"] == 128 and summary["eval_return_mean"] is not None


def test_gpu_backends_are_refused_where_they_cannot_run():
    with pytest.raises(EnvError, match="vector_mode native"):
        make_maniskill_env("PickCube-v1", sim_backend="gpu")
    if not torch.cuda.is_available():
        with pytest.raises(EnvError, match="needs CUDA"):
            make_maniskill_vector_env(2, "PickCube-v1", sim_backend="gpu")
    with pytest.raises(EnvError, match="sim_backend 'tpu'"):
        make_maniskill_env("PickCube-v1", sim_backend="tpu")


def test_without_mani_skill_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mani_skill", None)  # makes `import mani_skill` fail
    monkeypatch.setitem(sys.modules, "mani_skill.envs", None)
    with pytest.raises(EnvError, match=r"'maniskill' extra"):
        make_maniskill_env("PickCube-v1", sim_backend="cpu")


class Counters:
    """A stand-in for ManiSkillVectorEnv(auto_reset=False) on the GPU: torch tensors, batched,
    partial resets by ``options["env_idx"]``. Env i counts its steps; env 0 terminates at 3,
    env 1 is truncated at 2, env 2 never ends; the reward is the count."""

    num_envs = 3
    device = torch.device("cpu")
    single_observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    single_action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    metadata: ClassVar[dict] = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self):
        self.count = torch.zeros(3)
        self.closed = False

    def reset(self, *, seed=None, options=None):
        idx = torch.arange(3) if options is None else options["env_idx"]
        self.count[idx] = 0
        return self.count[:, None].clone(), {"reconfigure": torch.tensor(False)}

    def step(self, actions):
        assert actions.shape == (3, 2) and actions.dtype == torch.float32
        self.count += 1
        terminated = torch.tensor([self.count[0] == 3, False, False])
        truncated = torch.tensor([False, self.count[1] == 2, False])
        return self.count[:, None].clone(), self.count.clone(), terminated, truncated, {}

    def close(self):
        self.closed = True


def test_the_batched_gpu_env_gets_next_step_autoreset_and_numpy():
    inner = Counters()
    envs = NextStepVectorEnv(inner)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    assert envs.action_space.shape == (3, 2) and envs.observation_space.shape == (3, 1)
    obs, info = envs.reset(seed=0)
    assert isinstance(obs, np.ndarray) and isinstance(info["reconfigure"], np.ndarray)
    action = np.zeros((3, 2), dtype=np.float32)
    # count after each step: env 1 ends at step 2 and restarts at step 3; env 0 ends at step 3
    # and restarts at step 4, with reward 0 and neither flag on the restart step.
    expected = [
        ([1, 1, 1], [False, False, False], [False, False, False]),
        ([2, 2, 2], [False, False, False], [False, True, False]),
        ([3, 0, 3], [True, False, False], [False, False, False]),
        ([0, 1, 4], [False, False, False], [False, False, False]),
    ]
    for count, terminated, truncated in expected:
        obs, reward, term, trunc, _ = envs.step(action)
        assert obs[:, 0].tolist() == count and reward.tolist() == count
        assert reward.dtype == np.float32 and term.dtype == trunc.dtype == np.bool_
        assert term.tolist() == terminated and trunc.tolist() == truncated
    envs.close()
    assert inner.closed


class Cameras(Counters):
    """``Counters`` seen through ManiSkill's ``FlattenRGBDObservationWrapper``: each env's
    observation an image, under ``rgb``, whose pixels all hold its count."""

    single_observation_space = gym.spaces.Dict({"rgb": gym.spaces.Box(0, 255, (2, 2, 3), np.uint8)})

    def _images(self, counts):
        return {"rgb": counts.reshape(3, 1, 1, 1).expand(3, 2, 2, 3).to(torch.uint8)}

    def reset(self, *, seed=None, options=None):
        counts, info = super().reset(seed=seed, options=options)
        return self._images(counts), info

    def step(self, actions):
        counts, *rest = super().step(actions)
        return (self._images(counts), *rest)


def test_the_batched_gpu_env_keeps_the_camera_images_of_rgb_observations():
    envs = NextStepVectorEnv(Cameras(), key="rgb")
    assert envs.single_observation_space.shape == (2, 2, 3)
    assert envs.single_observation_space.dtype == np.uint8  # (the CNN scales it by 1/255)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (3, 2, 2, 3) and (obs == 0).all()
    for count in ([1, 1, 1], [2, 2, 2], [3, 0, 3]):  # env 1 restarts on the third step
        obs, *_ = envs.step(np.zeros((3, 2), dtype=np.float32))
        assert obs[:, 0, 0, 0].tolist() == count and obs.dtype == np.float32
    envs.close()


def test_visual_modes_no_policy_reads_are_refused_before_anything_is_made():
    with pytest.raises(EnvError, match="obs_mode 'pointcloud' for 'maniskill/PickCube-v1'"):
        make_maniskill_env("PickCube-v1", obs_mode="pointcloud")


@pytest.mark.filterwarnings("ignore:__array_wrap__:DeprecationWarning")
def test_rgb_observations_are_camera_images_the_cnn_acts_on(maniskill):
    from rlcore.workers.embodied.embodied_rollout import make_policy
    from rlcore.workers.embodied.env_worker import env_action

    kwargs = {"obs_mode": "rgb", "control_mode": "pd_ee_delta_pos"}
    envs = make_vector_env(PICKCUBE, 1, "sync", kwargs)
    try:
        spec = space_spec(envs, PICKCUBE)
        assert spec.obs_shape == (128, 128, 3) and spec.obs_scale == 1 / 255  # one camera
        obs, _ = envs.reset(seed=0)
        assert obs.dtype == np.uint8 and obs.std() > 0  # a rendered scene, not a blank
        rgb = ["env.kwargs={obs_mode:rgb}", "env.vector_mode=auto"]
        config = load_config("embodied/maniskill_pickcube_ppo", rgb)
        policy = make_policy(config, spec)
        assert type(policy.policy_trunk).__name__ == "ImageEncoder"  # the Nature-DQN CNN
        with torch.no_grad():  # (as the rollout acts)
            action, _, _ = policy.act(torch.as_tensor(obs, dtype=torch.float32))
        obs, reward, *_ = envs.step(env_action(spec, action))
        assert obs.shape == (1, 128, 128, 3) and np.isfinite(reward).all()
    finally:
        envs.close()
