"""``rollout.pipeline_stage_num``: an env rank's envs in stages, stepped one stage at a time, so
that the env process steps one stage while the rollout acts on the next. Stepped stage by stage
they are the same envs as one vector env (same seeds, same transitions, same episode sums); a
staged worker resumes bit for bit; layouts where stages cannot overlap are refused."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rlcore.config import ConfigError, load_config
from rlcore.placement import plan_for_config
from rlcore.placement.checks import check_plan
from rlcore.workers.embodied.env_worker import EnvWorker

SMALL = [
    "env.num_envs=6",
    "env.vector_mode=sync",
    "env.normalize_obs=false",
    # the running statistics take a step's returns a stage at a time (below)
    "env.normalize_reward=false",
    "actor.ppo_mini_batch_size=48",
]


def worker(*extra: str) -> EnvWorker:
    config = load_config("embodied/cartpole_ppo", [*SMALL, *extra])
    return EnvWorker(SimpleNamespace(rank=0, world_size=1, in_driver=True), config)


def step(env: EnvWorker, actions: torch.Tensor, stages: int) -> dict[str, torch.Tensor]:
    """One step of every env, stage by stage, joined as one vector env's step."""
    parts = [env.step(a, stage=s) for s, a in enumerate(actions.chunk(stages))]
    names = ("rewards", "terminated", "truncated", "valid", "next_obs")
    return {n: torch.cat([getattr(p, n) for p in parts]) for n in names}


def actions(steps: int, seed: int = 0) -> torch.Tensor:
    return torch.as_tensor(np.random.default_rng(seed).integers(0, 2, (steps, 6)))


def test_three_stages_step_the_envs_as_one_vector_env_does():
    one, three = worker(), worker("rollout.pipeline_stage_num=3")
    try:
        assert one.observe().equal(three.observe())  # each env seeded as without stages
        for a in actions(120):  # CartPole episodes end and reset within these steps
            whole, staged = step(one, a, 1), step(three, a, 3)
            assert all(whole[k].equal(staged[k]) for k in whole)
        ended = one.finished_episodes()
        assert ended["episode_count"].sum() > 0
        assert all(ended[k].equal(v) for k, v in three.finished_episodes().items())
        assert one.steps_taken == three.steps_taken == 120
    finally:
        one.close()
        three.close()


def test_staged_reward_scaling_merges_a_stage_at_a_time_and_fades_to_the_whole_vectors():
    """``env.normalize_reward`` in stages: each stage's returns join the statistics when it
    steps and its rewards are scaled by them (SB3's order), so a stage sees the returns of the
    stages before it in the step, not after; everything else is one vector env's, the
    statistics after each whole step equal to rounding, and the rewards' difference fades as
    the statistics grow (15% at the second step, under 1% after 60)."""
    one = worker("env.normalize_reward=true")
    three = worker("env.normalize_reward=true", "rollout.pipeline_stage_num=3")
    try:
        for t, a in enumerate(actions(120)):
            whole, staged = step(one, a, 1), step(three, a, 3)
            assert all(whole[k].equal(staged[k]) for k in whole if k != "rewards")
            a_stats, b_stats = one.reward_scaler.stats, three.reward_scaler.stats
            assert float(b_stats.var) == pytest.approx(float(a_stats.var), rel=1e-12)
            zero = whole["rewards"] == 0  # (a reset step's)
            assert staged["rewards"][zero].eq(0).all()
            gap = (staged["rewards"] - whole["rewards"])[~zero].abs() / whole["rewards"][~zero]
            assert float(gap.abs().max()) < (0.2 if t < 60 else 0.01), t
    finally:
        one.close()
        three.close()


def test_staged_observation_normalisation_fades_to_the_whole_vectors():
    """``env.normalize_obs`` in stages likewise: each stage's observations join the statistics
    when it steps and are normalised by them, so they differ from one vector env's early (0.6
    in normalised units at the first step) and less as the statistics grow (under 0.05 after 60
    steps); the statistics after each whole step equal to rounding."""
    one = worker("env.normalize_obs=true")
    three = worker("env.normalize_obs=true", "rollout.pipeline_stage_num=3")
    try:
        assert one.observe().equal(three.observe())  # the resets' observations: one merge each
        for t, a in enumerate(actions(120)):
            whole, staged = step(one, a, 1), step(three, a, 3)
            assert all(whole[k].equal(staged[k]) for k in whole if k != "next_obs")
            a_stats, b_stats = one.obs_norm.stats, three.obs_norm.stats
            np.testing.assert_allclose(b_stats.var, a_stats.var, rtol=1e-12)
            gap = (staged["next_obs"] - whole["next_obs"]).abs().max()
            assert float(gap) < (1.0 if t < 60 else 0.05), t
    finally:
        one.close()
        three.close()


def test_staged_groups_reset_from_their_group_s_seed_as_without_stages():
    """Embodied GRPO's grouped resets (a seed per group of envs) split over 2 stages: each env
    starts where it starts without stages, each stage holding whole groups."""
    grpo = [
        "env.id=color_reach",
        "algorithm.adv_type=grpo",
        "algorithm.group_size=3",
        "algorithm.value_coef=0",
        "runner.rollout_steps=30",
        "actor.ppo_mini_batch_size=180",
    ]
    one, two = worker(*grpo), worker(*grpo, "rollout.pipeline_stage_num=2")
    try:
        first, staged = one.observe(), two.observe()
        assert first.equal(staged) and first[0].equal(first[2]) and not first[0].equal(first[3])
    finally:
        one.close()
        two.close()


def test_stages_scale_rewards_with_each_stage_s_own_running_returns():
    """Reward scaling keeps a running return per env: staged, each stage updates its own
    envs' returns (the statistics see them a stage at a time, as a vector env of that size)."""
    env = worker("rollout.pipeline_stage_num=2", "env.normalize_reward=true")
    try:
        env.observe()
        for a in actions(3):
            step(env, a, 2)
        # CartPole pays 1 a step; 3 steps with gamma g: 1 + g + g^2 in every env
        g = env.reward_scaler.gamma
        assert np.allclose(env.reward_scaler.returns, 1 + g + g**2)
    finally:
        env.close()


def test_a_staged_env_worker_resumes_bit_for_bit(tmp_path):
    extra = (
        "rollout.pipeline_stage_num=2",
        "env.checkpoint_state=pickle",
        "env.normalize_obs=true",
    )
    first = worker(*extra)
    try:
        first.observe()
        for a in actions(15):
            step(first, a, 2)
        first.save_checkpoint(str(tmp_path))
        later = [step(first, a, 2) for a in actions(40, seed=1)]
    finally:
        first.close()
    second = worker(*extra)
    try:
        second.load_checkpoint(str(tmp_path))
        again = [step(second, a, 2) for a in actions(40, seed=1)]
        assert all(x[k].equal(y[k]) for x, y in zip(later, again, strict=True) for k in x)
    finally:
        second.close()
    one = worker("env.checkpoint_state=pickle")
    try:
        with pytest.raises(ConfigError, match="holds the envs of 2 stage"):
            one.load_checkpoint(str(tmp_path))
    finally:
        one.close()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "the env shares a process with the rollout"),
        (
            [
                "cluster.devices_per_node=2",
                "cluster.component_placement={env:0,rollout:1,actor:1}",
                "cluster.fuse_collocated=false",
                "env.num_envs=9",
                "actor.ppo_mini_batch_size=72",
            ],
            "each env rank's 9 envs cannot form 2 equal stages",
        ),
    ],
)
def test_stages_that_cannot_overlap_or_split_are_refused(extra, message):
    config = load_config("embodied/cartpole_ppo", ["rollout.pipeline_stage_num=2", *extra])
    with pytest.raises(ConfigError, match=message):
        check_plan(config, plan_for_config(config))
