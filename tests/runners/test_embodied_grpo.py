"""Embodied GRPO (``algorithm.group_size`` > 1): each collection is one episode per env, the envs of
a group reset alike; each episode is scored by its return against its group; estimators that do
not fit episodes are refused."""

from types import SimpleNamespace

import pytest
import torch

from rlcore.config import ConfigError, load_config
from rlcore.placement import plan_for_config
from rlcore.placement.checks import check_plan
from rlcore.runners.advantages import embodied_advantages
from rlcore.workers.env_worker import EnvWorker

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
    batch = {"rewards": rewards, "valid": valid}
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
