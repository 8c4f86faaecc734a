"""An embodied mini-batch the user did not write follows their batch (``rlcore/config/
batch_sizes.py``): the config's number of mini-batches is kept, said in one line; one they wrote
is refused where it does not fit, naming the sizes that do. Expected sizes worked out by hand."""

import json

import pytest
from omegaconf import OmegaConf

from rlcore.cli import run_entry_point
from rlcore.config import ConfigError, load_config
from rlcore.config.batch_sizes import (
    MINI_BATCH,
    divisors,
    given_by_user,
    name_values,
    nearest_divisor,
)
from rlcore.config.composition import CONFIG_DIR, parse_overrides, read_request
from rlcore.placement import plan_for_config

CARTPOLE = "embodied/cartpole_ppo"  # 64 envs x 8 steps, one mini-batch of 512
HOPPER = "embodied/mujoco_hopper_ppo"  # 1 env x 2048 steps, 32 mini-batches of 64
DATA_PARALLEL = [
    "cluster.devices_per_node=2",
    "cluster.component_placement={env:all,rollout:all,actor:all}",
]


def planned(config, overrides):
    loaded = load_config(config, overrides)
    plan_for_config(loaded)  # (the placement's checks, as a start runs them)
    return loaded


def test_divisors_and_the_nearest_one():
    assert divisors(1) == [1]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(128) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert divisors(49) == [1, 7, 49]
    for n in range(1, 300):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
    assert nearest_divisor(1000, 32) == 25  # 25 is 7 away, 40 is 8
    assert nearest_divisor(1008, 32) == 28  # 28 and 36 are both 4 away: the smaller
    assert nearest_divisor(100, 8) == 10  # 10 is 2 away, 5 is 3


def test_name_values_lists_all_or_the_nearest():
    assert name_values([1, 2, 4], 3) == "1, 2, 4"
    twenty = list(range(1, 21))
    assert name_values(twenty, 20, most=3) == "18, 19, 20 (the 3 nearest to 20, of 20)"


@pytest.mark.parametrize(
    ("overrides", "mini"),
    [
        (["env.num_envs=16"], 128),  # 16 x 8, one mini-batch as the config's
        (["env.num_envs=32"], 256),
        (["runner.seed=2", "env.num_envs=16"], 128),
        (["runner.rollout_steps=5"], 320),  # 64 x 5
    ],
)
def test_a_changed_batch_keeps_the_configs_one_mini_batch_and_says_so(capsys, overrides, mini):
    config = planned(CARTPOLE, overrides)
    assert config.actor.ppo_mini_batch_size == mini
    envs, steps = config.env.num_envs, config.runner.rollout_steps
    assert capsys.readouterr().err.splitlines() == [
        f"rlcore: {MINI_BATCH}: 512 does not divide the batch of {envs * steps} (runner."
        f"rollout_steps {steps} x env.num_envs {envs}), so it is {mini} here: 1 mini-batch per "
        "epoch, the config's 1 (CleanRL's num_minibatches); set actor.ppo_mini_batch_size to "
        "choose another"
    ]


def test_a_batch_the_mini_batch_still_divides_keeps_it_silently(capsys):
    assert planned(CARTPOLE, ["env.num_envs=128"]).actor.ppo_mini_batch_size == 512
    assert planned(HOPPER, ["env.num_envs=3"]).actor.ppo_mini_batch_size == 64  # 6144 / 96
    assert capsys.readouterr().err == ""


def test_a_count_that_does_not_divide_the_steps_takes_the_nearest_divisor(capsys):
    # 4 envs x 1000 steps: 32 does not divide 1000; its divisors 25 and 40 are 7 and 8 away
    config = planned(HOPPER, ["runner.rollout_steps=1000", "env.num_envs=4"])
    assert config.actor.ppo_mini_batch_size == 4000 // 25
    err = capsys.readouterr().err
    assert "so it is 160 here: 25 mini-batches per epoch, the divisor of" in err
    assert len(err.splitlines()) == 1


def test_a_derived_mini_batch_splits_over_data_parallel_actor_ranks():
    # 2 envs x 1008 steps = 2016 = 32 x 63: 32 mini-batches of 63 could not be shared by the 2
    # actor ranks; 28 (the divisor of 1008 nearest 32, with 36) gives 72 = 2 x 36
    config = planned(HOPPER, [*DATA_PARALLEL, "env.num_envs=2", "runner.rollout_steps=1008"])
    assert config.actor.ppo_mini_batch_size == 72


@pytest.mark.parametrize(
    "given",
    [
        "actor.ppo_mini_batch_size=512",
        "actor_rollout_ref.actor.ppo_mini_batch_size=512",  # verl's spelling of the key
    ],
)
def test_a_mini_batch_the_user_wrote_is_refused_naming_the_divisors(given):
    with pytest.raises(ConfigError) as caught:
        planned(CARTPOLE, ["env.num_envs=16", given])
    assert str(caught.value) == (
        "actor.ppo_mini_batch_size: 512 does not divide the batch of 128 (runner.rollout_steps "
        "8 x env.num_envs 16); pick a divisor of 128: 1, 2, 4, 8, 16, 32, 64, 128"
    )


def test_the_refusal_names_only_the_sizes_the_actor_ranks_share():
    # 6 envs x 8 steps = 48 on 2 actor ranks: the even divisors of 48
    with pytest.raises(ConfigError) as caught:
        planned(CARTPOLE, [*DATA_PARALLEL, "env.num_envs=6", "actor.ppo_mini_batch_size=15"])
    assert str(caught.value).endswith(
        "pick a divisor of 48 that 2 actor ranks share: 2, 4, 6, 8, 12, 16, 24, 48"
    )
    with pytest.raises(ConfigError) as caught:  # divides the batch, but not by the ranks
        planned(CARTPOLE, [*DATA_PARALLEL, "env.num_envs=6", "actor.ppo_mini_batch_size=3"])
    assert str(caught.value).endswith(
        "use a multiple of 2 that divides the batch: 2, 4, 6, 8, 12, 16, 24, 48"
    )


def test_a_mini_batch_in_the_users_own_yaml_is_theirs(tmp_path):
    copy = tmp_path / "mine.yaml"  # a copy of the shipped file: its mini-batch is the user's now
    copy.write_text((CONFIG_DIR / "embodied" / "cartpole_ppo.yaml").read_text())
    with pytest.raises(ConfigError, match="pick a divisor of 128: 1, 2, 4"):
        planned(str(copy), ["env.num_envs=16"])
    # a file of the user's that leaves the mini-batch to a shipped config follows the batch
    child = tmp_path / "child.yaml"
    child.write_text(
        "# @package _global_\ndefaults:\n  - /embodied/cartpole_ppo\n  - _self_\n"
        "env:\n  num_envs: 16\n"
    )
    assert planned(str(child), []).actor.ppo_mini_batch_size == 128


def test_given_by_user_reads_the_command_line_sections_and_deletions():
    empty = OmegaConf.create({})

    def given(*overrides: str) -> bool:
        parsed = parse_overrides(list(overrides))
        return given_by_user(MINI_BATCH, parsed, empty, users_own_file=False)

    assert given("actor.ppo_mini_batch_size=64")
    assert given("actor={ppo_mini_batch_size:64}")
    assert not given("actor={ppo_epochs:2}")
    assert not given("~actor.ppo_mini_batch_size")
    assert not given("env.num_envs=16")


def test_the_dry_run_says_what_the_run_derives_and_the_run_trains_with_it(tmp_path, capsys):
    said = []
    for extra in (["runner.dry_run=true"], [f"runner.output_dir={tmp_path}"]):
        args = [
            "env.num_envs=16",
            "runner.total_env_steps=256",
            "runner.progress=false",
            "runner.eval_episodes=1",
            *extra,
        ]
        assert run_entry_point(CARTPOLE, args) == 0
        said.append([line for line in capsys.readouterr().err.splitlines() if MINI_BATCH in line])
    assert said[0] == said[1] and len(said[0]) == 1 and "so it is 128 here" in said[0][0]
    (run_dir,) = tmp_path.iterdir()
    written = json.loads((run_dir / "config.json").read_text())
    assert written["actor"]["ppo_mini_batch_size"] == 128


def test_a_shipped_config_is_not_the_users_own_file_named_or_given_by_its_path(tmp_path):
    shipped = CONFIG_DIR / "embodied" / "cartpole_ppo.yaml"
    assert not read_request("embodied/cartpole_ppo", []).users_own_file
    assert not read_request(str(shipped), []).users_own_file  # (its folder is configs/embodied)
    mine = tmp_path / "mine.yaml"
    mine.write_text(shipped.read_text())
    assert read_request(str(mine), []).users_own_file
