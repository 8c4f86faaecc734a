"""Embodied GRPO (``algorithm.group_size`` > 1): each collection is one episode per env, the envs of
a group reset alike; each episode is scored by its return against its group; estimators that do
not fit episodes are refused."""

from types import SimpleNamespace

import pytest
import torch

from rlcore.columns import LOSS_MASK, REWARDS
from rlcore.config import ConfigError, load_config
from rlcore.placement import plan_for_config
from rlcore.placement.checks import check_plan
from rlcore.runners.advantages import embodied_advantages
from rlcore.workers.embodied.env_worker import EnvWorker

GRPO = [
    "env.id=color_reach",
    "algorithm.adv_type=grpo",
    "algorithm.group_size=4",
    "algorithm.value_coef=0",
    "env.num_envs=8",
    "runner.rollout_steps=30",
    "actor.ppo_mini_batch_size=240",
]


def worker(*extra: str) -> EnvWorker:
    config = load_config("embodied/cartpole_ppo", [*GRPO, *extra])
    return EnvWorker(SimpleNamespace(rank=0, world_size=1, in_driver=True), config)


def test_grouped_resets_start_a_group_alike_and_groups_and_collections_apart():
    env = worker()
    try:
        first = env.observe()
        assert all(first[i].equal(first[0]) for i in range(4))
        assert all(first[i].equal(first[4]) for i in range(4, 8))
        assert not first[0].equal(first[4])
        valid = []
        for _ in range(30):  # one collection: after an env's episode ends, no step is valid
            valid.append(env.step(torch.randint(4, (8,))).valid)
        valid = torch.stack(valid, 1)
        assert (valid[:, :-1].int() - valid[:, 1:].int() >= 0).all()  # valid, then never again
        assert (~valid[:, -1]).any()  # (30 steps: every color_reach episode has ended)
        second = env.observe()
        assert not second[0].equal(first[0])
        assert all(second[i].equal(second[0]) for i in range(4))
    finally:
        env.close()


def test_each_episode_is_scored_by_its_return_against_its_group():
    no_whitening = "algorithm.normalize_advantages=false"  # (GRPO's own normalisation only)
    alg = load_config("embodied/cartpole_ppo", [*GRPO, no_whitening]).algorithm
    first = [[1.0, 2.0, 9.0], [0.0, 0.0, 0.0], [3.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    second = [[0.5, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [4.5, 0.0, 0.0]]
    rewards = torch.tensor([*first, *second])
    valid = torch.tensor([[1, 1, 0]] * 4 + [[1, 0, 0]] * 4, dtype=torch.bool)
    batch = {REWARDS: rewards, LOSS_MASK: valid}
    embodied_advantages(alg, batch)
    returns = torch.tensor([3.0, 0.0, 3.0, 2.0, 0.5, 1.0, 2.0, 4.5])  # the 9 is past the end
    groups = returns.view(2, 4)
    expected = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-6)
    got = batch["advantages"]
    assert torch.allclose(got[:, 0], expected.flatten(), atol=1e-5)
    assert torch.allclose(got[:4, 1], expected.flatten()[:4], atol=1e-5)
    assert (got[~valid] == 0).all()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["algorithm.adv_type=gae"], "algorithm.adv_type: gae does not fit embodied groups"),
        (["algorithm.adv_type=remax"], "algorithm.adv_type: remax does not fit embodied groups"),
        (["algorithm.value_coef=0.5"], "algorithm.value_coef: 0.5, and a group baseline"),
        (["env.num_envs=6"], "env.num_envs: 6 envs do not make whole groups"),
        (["algorithm.group_size=1"], "or set algorithm.group_size > 1 for embodied GRPO"),
    ],
)
def test_what_does_not_fit_episodes_is_refused_in_one_line(extra, message):
    with pytest.raises(ConfigError, match=message):
        load_config("embodied/cartpole_ppo", [*GRPO, *extra])


def test_a_group_split_over_env_ranks_is_refused():
    config = load_config(
        "embodied/cartpole_ppo",
        [
            *GRPO,
            "algorithm.group_size=8",
            "cluster.devices_per_node=2",
            "cluster.component_placement={env:all,rollout:all,actor:all}",
        ],
    )
    with pytest.raises(ConfigError, match=r"not whole groups of algorithm\.group_size=8"):
        check_plan(config, plan_for_config(config))


def test_groups_need_a_seed_per_env_which_a_native_vector_env_cannot_take():
    import gymnasium as gym

    from rlcore.envs import EnvError, make_vector_env

    with pytest.raises(EnvError, match="native 'CartPole-v1' resets every env from one seed"):
        make_vector_env("CartPole-v1", 2, "native", seeds_per_env=True)
    envs = make_vector_env("CartPole-v1", 2, "auto", seeds_per_env=True)
    try:
        assert isinstance(envs, gym.vector.SyncVectorEnv)  # auto: copies, each seeded
        first, _ = envs.reset(seed=[5, 5])
        assert (first[0] == first[1]).all()
    finally:
        envs.close()


def test_the_successes_of_finished_episodes_are_counted_for_an_env_that_reports_them():
    from rlcore.envs.color_reach import COLOURS, MOVES
    from rlcore.envs.language import decode_instructions

    env = worker("algorithm.group_size=1", "algorithm.adv_type=gae", "algorithm.value_coef=0.5")
    try:
        obs = env.observe()
        for _ in range(60):  # head for the named target (the state after 32 text codes)
            agent, spots = obs[:, 32:34], obs[:, 34:].view(-1, 3, 2)
            texts = decode_instructions(obs[:, :32].numpy(), env.spec.obs_text[1])
            goal = torch.tensor([COLOURS.index(t.split()[2]) for t in texts])
            gap = spots[torch.arange(len(goal)), goal] - agent
            obs = env.step((torch.as_tensor(MOVES) @ gap.T).argmax(0)).next_obs
        stats = env.finished_episodes()
        assert stats["episode_count"].sum() > 8
        successes, count = stats["episode_success_sum"].sum(), stats["episode_count"].sum()
        assert 0.8 * count <= successes <= count  # (now and then another target is in the way)
    finally:
        env.close()
    cartpole = EnvWorker(
        SimpleNamespace(rank=0, world_size=1, in_driver=True), load_config("embodied/cartpole_ppo")
    )
    try:
        cartpole.observe()
        for _ in range(30):
            cartpole.step(torch.zeros(64, dtype=torch.long))
        assert "episode_success_sum" not in cartpole.finished_episodes()  # reports none
    finally:
        cartpole.close()
