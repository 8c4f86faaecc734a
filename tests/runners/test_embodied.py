"""The embodied runner: bootstrapping, masking, env plug-ins and the run summary."""

import json
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlcore.columns import LOSS_MASK
from rlcore.config import load_config
from rlcore.envs import EnvError, check_output, make_vector_env, space_spec
from rlcore.placement import plan_for_config
from rlcore.runners.advantages import embodied_advantages
from rlcore.runners.embodied import EmbodiedRunner
from rlcore.workers.weight_version import StaleWeightsError
from tests import forked

REPO = Path(__file__).resolve().parents[2]
CORRIDOR = "tests.runners.corridor:Corridor"


def corridor_config(tmp_path, *extra):
    return load_config(
        "embodied/cartpole_ppo",
        [
            f"env.id={CORRIDOR}",
            "env.num_envs=1",
            "env.vector_mode=sync",
            "env.solved_threshold=null",
            "runner.rollout_steps=4",
            "runner.total_env_steps=8",
            "runner.eval_episodes=1",
            "runner.progress=false",
            f"runner.output_dir={tmp_path}",
            "logger.tensorboard=false",
            "actor.ppo_mini_batch_size=4",
            "actor.ppo_epochs=1",
            *extra,
        ],
    )


def runner_for(config):
    return EmbodiedRunner(config, plan_for_config(config))


def one_env_batch(rewards, values, terminated, truncated, valid):
    """One env's rollout as the collect stage returns it: ``values`` has T + 1 entries, the last
    being V(observation after the last step)."""
    row = lambda x, dtype=torch.float32: torch.tensor([x], dtype=dtype)  # noqa: E731
    return TensorDict(
        {
            "values": row(values[:-1]),
            "last_value": torch.tensor([values[-1]]),
            "rewards": row(rewards),
            "terminated": row(terminated, torch.bool),
            "truncated": row(truncated, torch.bool),
            LOSS_MASK: row(valid, torch.bool),
        },
        batch_size=[1],
    )


@pytest.mark.parametrize(
    "ended_by, bootstrap_type",
    [("truncated", "standard"), ("terminated", "standard"), ("terminated", "always")],
)
def test_time_limits_bootstrap_from_the_final_observation_and_terminations_do_not(
    tmp_path, ended_by, bootstrap_type
):
    runner = runner_for(
        corridor_config(
            tmp_path,
            "algorithm.gamma=0.5",
            "algorithm.gae_lambda=1.0",
            "algorithm.normalize_advantages=false",
            f"algorithm.bootstrap_type={bootstrap_type}",
        )
    )
    # Steps: 0 and 1 end an episode at 1; step 2 only resets (masked); step 3 starts anew.
    # values[2] is V(final obs of the episode); values[4] bootstraps after the rollout.
    truncated = [False, ended_by == "truncated", False, False]
    terminated = [False, ended_by == "terminated", False, False]
    batch = one_env_batch(
        rewards=[1.0, 1.0, 0.0, 1.0],
        values=[0.2, 0.4, 8.0, 0.3, 6.0],
        terminated=terminated,
        truncated=truncated,
        valid=[True, True, False, True],
    )
    embodied_advantages(runner.config.algorithm, batch)
    runner.close()
    advantages, returns = batch["advantages"], batch["returns"]
    # r1 (+ gamma V(s_final) at a time limit, and with bootstrap_type always at a termination)
    bootstrapped = ended_by == "truncated" or bootstrap_type == "always"
    tail = 1.0 + 0.5 * 8.0 if bootstrapped else 1.0
    expected_returns = [1.0 + 0.5 * tail, tail, 0.0, 1.0 + 0.5 * 6.0]
    assert returns[0].tolist() == pytest.approx(expected_returns)
    assert advantages[0].tolist() == pytest.approx(
        [expected_returns[0] - 0.2, expected_returns[1] - 0.4, 0.0, expected_returns[3] - 0.3]
    )


def test_collect_masks_the_reset_step_and_reads_v_of_the_final_observation(tmp_path):
    runner = runner_for(
        corridor_config(tmp_path, "runner.rollout_steps=7", "actor.ppo_mini_batch_size=7")
    )
    runner.sync()
    batch = runner.rollout.collect(runner.version)
    runner.close()
    # limit 3: steps 0-2 are an episode, 3 only resets, 4-6 the next episode
    assert batch[LOSS_MASK][0].tolist() == [True, True, True, False, True, True, True]
    assert batch["truncated"][0].tolist() == [False, False, True, False, False, False, True]
    final_obs = batch["obs"][0, 3]  # the reset step starts from the episode's final observation
    assert final_obs.item() == batch["obs"][0, 2].item() + batch["actions"][0, 2].item()
    with torch.no_grad():
        v_final = runner.actor.model.value(final_obs).item()
    assert batch["values"][0, 3].item() == pytest.approx(v_final)
    # two episodes ended (steps 2 and 6), each 3 steps of reward 1
    assert batch["episode_count"].tolist() == [2]
    assert batch["episode_return_sum"].tolist() == [6.0]
    assert batch["episode_length_sum"].tolist() == [6]


def test_the_decoupled_correction_compares_the_recomputed_log_probs_and_weights_the_loss(
    tmp_path,
):
    """rollout_is=token: the actor recomputes the old log-probs (the same weights here, so the
    mismatch is ~0 and every weight ~1); an IcePop interval that 1 is outside zeroes every
    transition's policy loss (the weights reach the actor's loss)."""
    runner = runner_for(
        corridor_config(
            tmp_path,
            "runner.rollout_steps=7",
            "actor.ppo_mini_batch_size=7",
            "algorithm.rollout_correction.rollout_is=token",
            "algorithm.rollout_correction.rollout_is_threshold=2.0_3.0",
        )
    )
    try:
        metrics = runner.iterate(1)
    finally:
        runner.close()
    assert abs(metrics["rollout_corr/kl"]) < 1e-6
    assert metrics["rollout_corr/rollout_is_oob_ratio"] == 1.0
    assert metrics["actor/pg_loss"] == 0.0 and "time/recompute_s" in metrics


def test_env_plug_in_by_module_path_trains_and_writes_the_summary(tmp_path):
    config = corridor_config(
        tmp_path,
        "runner.total_env_steps=64",
        "runner.rollout_steps=8",
        "actor.ppo_mini_batch_size=8",
        "runner.run_name=plug-in",
    )
    assert config.runner.stop_at_threshold  # from the CartPole config, but no threshold: no stop
    summary = runner_for(config).run()
    assert summary["env_steps"] == 64 and summary["iterations"] == 8
    assert summary["eval_return_mean"] == 3.0  # the corridor's 3-step time limit, reward 1/step
    assert summary["time_to_threshold_s"] is None and summary["steps_to_threshold"] is None
    written = json.loads((tmp_path / "plug-in" / "summary.json").read_text())
    assert written == summary


def test_stop_at_threshold_ends_the_run_at_the_first_eval_that_reaches_it(tmp_path, capsys):
    stops = (
        "runner.run_name=stops",
        "runner.total_env_steps=64",
        "runner.rollout_steps=8",
        "actor.ppo_mini_batch_size=8",
        "env.solved_threshold=3",
        "runner.stop_at_threshold=true",
        "runner.eval_every=2",
    )
    config = corridor_config(tmp_path, *stops)
    summary = runner_for(config).run()
    # every corridor episode returns 3, so the first eval (iteration 2, 16 steps) reaches it
    assert summary["iterations"] == 2 and summary["env_steps"] == 16
    assert summary["steps_to_threshold"] == 16 and summary["eval_return_mean"] == 3.0
    checkpoints = tmp_path / "stops" / "checkpoints"
    assert [p.name for p in checkpoints.iterdir()] == ["iter_000002"]  # the stop is saved
    # resumed, it ends at once, as the unbroken run did, and says why in one line
    resumed = corridor_config(tmp_path, *stops[1:], f"runner.resume_dir={tmp_path / 'stops'}")
    again = runner_for(resumed).run()
    assert again["iterations"] == 2 and again["env_steps"] == 16
    assert again["steps_to_threshold"] == 16
    said = [line for line in capsys.readouterr().err.splitlines() if "solved threshold" in line]
    assert said == [
        "rlcore: resumed at iteration 2: the run reached its solved threshold (3) after 16 "
        "samples and runner.stop_at_threshold is set, so it trains no further"
    ]


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("CartPole-v2", "no environment 'CartPole-v2'; did you mean 'CartPole-v1'"),
        (
            "tests.runners.corridor:Coridor",
            "has no 'Coridor' (did you mean 'tests.runners.corridor:Corridor'?)",
        ),
        ("tests.runners.corridor:DictObs", "rlcore's policies take Box observations"),
    ],
)
def test_bad_envs_are_named_with_the_fix(env_id, message):
    with pytest.raises(EnvError) as caught:
        envs = make_vector_env(env_id, 1, "sync")
        space_spec(envs, env_id)
    assert str(caught.value).startswith("env.id: ") and message in str(caught.value)


@pytest.mark.parametrize(("env", "where"), [("NanEnv", "step 1"), ("NanReset", "reset")])
def test_an_env_returning_nan_stops_the_run_with_its_name(tmp_path, env, where):
    message = rf"{env}' returned a non-finite observation .* from {where}$"
    with pytest.raises(EnvError, match=message):
        runner_for(corridor_config(tmp_path, f"env.id=tests.runners.corridor:{env}")).run()


def test_an_env_whose_step_fails_is_named_in_one_line(tmp_path):
    runner = runner_for(corridor_config(tmp_path, "env.id=tests.runners.corridor:WrongShape"))
    with pytest.raises(
        EnvError,
        match=r"env.id: env 'tests.runners.corridor:WrongShape' rank 0, "
        r"step 1 failed: ValueError: ",
    ):
        runner.run()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_env_that_raises_is_one_line_naming_where(tmp_path, mode):
    config = corridor_config(
        tmp_path,
        "env.id=tests.runners.corridor:Raises",
        f"env.vector_mode={mode}",
        "env.checkpoint_state=reseed",
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(EnvError) as failed:
            runner_for(config).run()
    line = re.escape(str(REPO / "tests" / "runners" / "corridor.py"))
    assert re.fullmatch(
        r"env.id: env 'tests.runners.corridor:Raises' rank 0, step 2 failed: "
        rf"RuntimeError: corridor exploded \(at {line}:\d+ in step\)",
        str(failed.value),
    ), failed.value
    # the env's own warning reaches the user (async: in its subprocess's stderr); gymnasium's
    # report of the failure, with the traceback the line above sums up, does not
    said = [str(w.message) for w in caught]
    assert not [m for m in said if "Received the following error" in m or "Traceback" in m]
    assert ("corridor: about to fail" in said) == (mode == "sync")


def test_an_env_whose_reset_returns_another_shape_than_its_space_is_named(tmp_path):
    env = "tests.runners.corridor:WrongShapeReset"
    with pytest.raises(EnvError, match=rf"env.id: env '{env}' rank 0, reset failed: ValueError"):
        runner_for(corridor_config(tmp_path, f"env.id={env}")).run()


def test_observations_of_another_shape_than_the_space_declares_are_refused():
    # a native vector env hands its arrays over unchecked; the worker's check names the env
    with pytest.raises(
        EnvError,
        match=r"'E' returned observations of shape \(3,\) from step 2, "
        r"and its observation_space declares \(4,\)",
    ):
        check_output("E", "step 2", np.zeros((2, 3)), np.zeros(2), (4,))
    with pytest.raises(EnvError, match=r"'E' returned a non-finite reward .* from reset"):
        check_output("E", "reset", np.zeros((2, 4)), np.array([0.0, np.inf]), (4,))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_env_that_hangs_ends_the_run_at_the_step_timeout_naming_it(tmp_path, mode):
    config = corridor_config(
        tmp_path,
        "env.id=tests.runners.corridor:Stuck",
        f"env.vector_mode={mode}",
        "env.step_timeout_s=1",
        "env.checkpoint_state=reseed",
    )
    runner = runner_for(config)
    start = time.monotonic()
    with pytest.raises(
        EnvError,
        match=r"env.step_timeout_s: env 'tests.runners.corridor:Stuck' "
        r"rank 0, step \d+ took over 1 s",
    ):
        runner.run()
    assert time.monotonic() - start < 10


def test_default_job_prints_the_summary_as_the_last_line(tmp_path):
    done = forked.run(
        [
            sys.executable,
            "examples/embodied/main.py",
            "runner.total_env_steps=2560",
            "runner.progress=false",
            f"runner.output_dir={tmp_path}",
            "runner.eval_every=5",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    keys = {
        "eval_return_mean",
        "eval_return_std",
        "env_steps",
        "wall_s",
        "time_to_threshold_s",
        "steps_to_threshold",
    }
    assert keys <= set(summary) and summary["env_steps"] == 2560
    assert (Path(summary["run_dir"]) / "summary.json").is_file()
    assert list((Path(summary["run_dir"]) / "tensorboard").iterdir())


def test_the_custom_env_example_trains_by_config_alone(tmp_path):
    done = forked.run(
        [
            sys.executable,
            "main.py",
            "env.id=custom_env:PointReach",
            "env.vector_mode=sync",
            "runner.total_env_steps=512",
            "runner.progress=false",
            f"runner.output_dir={tmp_path}",
        ],
        cwd=REPO / "examples" / "embodied",
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["env_id"] == "custom_env:PointReach"


@pytest.mark.parametrize("name", ["mujoco_halfcheetah_ppo", "mujoco_hopper_ppo"])
def test_mujoco_configs_run(tmp_path, name):
    pytest.importorskip("mujoco", reason="MuJoCo configs need the 'mujoco' extra")
    config = load_config(
        f"embodied/{name}",
        [
            "runner.rollout_steps=64",
            "runner.total_env_steps=128",
            "actor.ppo_mini_batch_size=32",
            "runner.eval_episodes=1",
            "runner.progress=false",
            f"runner.output_dir={tmp_path}",
            "logger.tensorboard=false",
        ],
    )
    summary = runner_for(config).run()
    assert summary["env_steps"] == 128 and summary["eval_return_mean"] is not None


def test_an_image_env_trains_through_the_cnn(tmp_path):
    config = corridor_config(
        tmp_path, "env.id=tests.runners.corridor:Pixels", "actor.model.hidden_sizes=[32]"
    )
    summary = runner_for(config).run()
    assert summary["env_steps"] == 8 and summary["eval_return_mean"] is not None


def test_async_subprocess_envs_step_like_in_process_ones():
    pendulum = [make_vector_env("Pendulum-v1", 2, mode) for mode in ("sync", "async")]
    try:
        first = [envs.reset(seed=3)[0] for envs in pendulum]
        assert (first[0] == first[1]).all()
        action = np.full((2, 1), 0.5, dtype=np.float32)
        for _ in range(5):
            (a, ra, *_), (b, rb, *_) = (envs.step(action) for envs in pendulum)
            assert (a == b).all() and (ra == rb).all()
    finally:
        for envs in pendulum:
            envs.close()


def test_the_rollout_refuses_to_act_with_weights_it_was_not_synced(tmp_path):
    runner = runner_for(corridor_config(tmp_path))
    try:
        with pytest.raises(StaleWeightsError, match="holds policy weights of version -1"):
            runner.rollout.collect(0)  # nothing synced yet
        runner.sync()
        with pytest.raises(StaleWeightsError, match="version 0, but the driver expects version 1"):
            runner.rollout.evaluate(seed=0, version=1)
        assert runner.rollout.collect(0).batch_size[0] == 1
    finally:
        runner.close()


LM_POLICY = [  # the LM policy on its task (tests/models/test_lm_policy.py)
    "env.id=color_reach",
    "actor.model.type=lm",
    "actor.model.lm.action_bins=4",
    "actor.model.lm.tiny.hidden_size=32",
    "actor.model.lm.tiny.intermediate_size=64",
]


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize("policy", [[], LM_POLICY], ids=["mlp", "lm"])
def test_fsdp2_actor_on_two_ranks_trains_and_the_rollout_acts_with_whole_weights(tmp_path, policy):
    config = load_config(
        "embodied/cartpole_ppo",
        [
            *policy,
            "cluster.devices_per_node=2",
            "cluster.component_placement={actor:all,rollout:all,env:all}",
            "actor.training_backend=fsdp2",
            "runner.total_env_steps=1024",
            "runner.eval_every=1",
            "runner.progress=false",
            f"runner.output_dir={tmp_path}",
            "logger.tensorboard=false",
        ],
    )
    runner = runner_for(config)
    try:
        group = runner.components.group
        runner.iterate(1)
        runner.sync()
        trained = group("actor").call_all("weights")  # a collective: every rank gathers
        for rank in (0, 1):
            synced = group("rollout").call_rank(rank, "weights")
            assert all(torch.equal(trained[0][k], synced[k]) for k in synced)
        evaluated = runner.evaluate(1)  # rank 0 alone acts: a whole copy
        if policy:  # (color_reach's returns may be negative; it reports successes)
            assert 0.0 <= evaluated["eval/success_rate"] <= 1.0
        else:
            assert evaluated["eval/return_mean"] > 0
    finally:
        runner.close()
