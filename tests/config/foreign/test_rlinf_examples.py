"""RLinf's embodied PPO MLP example (rlinf_examples/, unchanged, with its defaults folder) loads
as RLinf's users write it: interpolations resolved against RLinf's key names, its core keys
mapped, aliases fixed from the command line, refusals naming what rlcore lacks; and it trains
on a ManiSkill stand-in (maniskill_shim/) where ManiSkill is not installed."""

import json
import sys
from importlib.util import find_spec
from pathlib import Path

import gymnasium as gym
import pytest

from rlcore.cli import run_entry_point
from rlcore.config import load_config
from rlcore.config.errors import ConfigError

HERE = Path(__file__).resolve().parent
EXAMPLE = str(HERE / "rlinf_examples" / "maniskill_ppo_mlp.yaml")
# the one thing the file as written asks that one env section cannot hold (its eval env ignores
# terminations, its training env does not), fixed in RLinf's own spelling
ONE_ENV = ["env.eval.ignore_terminations=False"]
CLASH = (
    "env.eval.ignore_terminations: set to True, but env.train.ignore_terminations sets False; "
    "both are env.kwargs.ignore_terminations here, so keep one value"
)

pytestmark = pytest.mark.filterwarnings("ignore:In 'maniskill_ppo_mlp'")  # (Hydra on _self_)


def test_as_written_only_the_train_and_eval_envs_disagreement_is_refused():
    with pytest.raises(ConfigError) as refused:
        load_config(EXAMPLE)
    assert str(refused.value).splitlines() == [CLASH]


def test_its_core_keys_are_rlcores(capsys):
    config = load_config(EXAMPLE, ONE_ENV)
    # the file's values (maniskill_ppo_mlp.yaml and env/maniskill_pick_cube.yaml), by hand
    assert config.mode == "embodied"  # runner.task_type
    assert config.env.id == "maniskill/PickCube-v1"  # env_type maniskill, init_params.id
    assert config.env.num_envs == 1024 and config.runner.rollout_steps == 50
    assert config.actor.ppo_mini_batch_size == 6400  # global_batch_size, over all ranks
    assert config.actor.ppo_micro_batch_size == 6400
    assert config.actor.ppo_epochs == 8
    assert config.runner.total_env_steps == 1000 * 50 * 1024  # max_epochs iterations
    assert config.runner.eval_every == 50 and config.runner.checkpoint_every == 0
    assert config.runner.eval_episodes == 32
    assert config.actor.training_backend == "torch"  # fsdp, no_shard
    assert list(config.actor.model.hidden_sizes) == [256, 256, 256]
    assert config.actor.model.shared_backbone is False
    assert (config.actor.optim.name, config.actor.optim.weight_decay) == ("adamw", 0.01)
    assert config.actor.optim.max_grad_norm == 0.5
    assert config.env.kwargs["max_episode_steps"] == 50  # ${..max_episode_steps}
    assert config.env.kwargs["ignore_terminations"] is False
    said = capsys.readouterr().err
    assert "critic.use_critic_model: false (RLinf) is the policy's value head, as here" in said


def test_an_alias_on_the_command_line_beats_the_yaml_and_reaches_its_interpolations():
    config = load_config(
        EXAMPLE,
        [*ONE_ENV, "env.train.max_episode_steps=30", "runner.logger.log_path=/tmp/rlinf_runs"],
    )
    # init_params.max_episode_steps is ${..max_episode_steps}: the command line's 30, in both
    # env sections (one env here), where the YAML says 50
    assert config.env.kwargs["max_episode_steps"] == 30
    assert config.runner.output_dir == "/tmp/rlinf_runs"


def test_an_interpolation_to_an_rlinf_key_resolves_before_the_renaming(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "defaults:\n  - /embodied/cartpole_ppo\n  - _self_\n"
        "runner:\n  logger:\n    log_path: /tmp/somewhere\n"
        "  val_check_interval: ${runner.save_interval}\n  save_interval: 7\n"
    )
    config = load_config(str(mine))
    assert config.runner.eval_every == config.runner.checkpoint_every == 7
    assert config.runner.output_dir == "/tmp/somewhere"


def test_what_rlcore_lacks_is_refused_naming_why_in_one_pass():
    with pytest.raises(ConfigError) as refused:
        load_config(
            EXAMPLE,
            [
                *ONE_ENV,
                "env.train.env_type=libero",
                "actor.model.num_action_chunks=4",
                "actor.fsdp_config.amp_autocast.enabled=True",
                "critic.use_critic_model=true",
            ],
        )
    lines = str(refused.value).splitlines()
    assert lines[:4] == [
        "env.train.env_type: 'libero' (RLinf); rlcore's envs are gymnasium ids and ManiSkill's "
        "tasks (maniskill), so set env.id instead",
        "critic.use_critic_model: True; embodied mode trains a value head on the policy, not a "
        "separate critic model (reasoning mode's): give false",
        "actor.fsdp_config.amp_autocast.enabled: True (RLinf); the embodied policy trains in "
        "float32 here, without autocast",
        "actor.model.num_action_chunks: 4 (RLinf); the policy here acts one step at a time (no "
        "action chunks); give 1",
    ]
    assert not any("no rlcore counterpart" in line for line in lines)


@pytest.fixture
def maniskill_stand_in(monkeypatch):
    """ManiSkill's PickCube-v1 as the stand-in (maniskill_shim/) where ManiSkill is missing;
    its modules and gymnasium id removed after the test."""
    if find_spec("mani_skill") is not None:
        yield
        return
    monkeypatch.syspath_prepend(str(HERE / "maniskill_shim"))
    yield
    for name in [n for n in sys.modules if n == "mani_skill" or n.startswith("mani_skill.")]:
        del sys.modules[name]
    gym.registry.pop("PickCube-v1", None)


@pytest.mark.usefixtures("maniskill_stand_in")
def test_it_trains_two_iterations_on_the_cpu(tmp_path, capsys):
    overrides = [
        *ONE_ENV,
        "env.train.init_params.sim_backend=cpu",  # (RLinf's gpu: ManiSkill's CUDA sim)
        "env.train.total_num_envs=2",
        "env.train.max_steps_per_rollout_epoch=16",
        "actor.global_batch_size=16",
        "actor.micro_batch_size=8",
        "runner.max_epochs=2",
        "env.eval.total_num_envs=1",
        f"runner.logger.log_path={tmp_path}",
        "runner.logger.logger_backends=[]",
        "env.vector_mode=sync",  # (rlcore's: the envs in this process)
        "runner.progress=false",
    ]
    assert run_entry_point(EXAMPLE, overrides) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["iterations"] == 2
    assert summary["env_steps"] == 2 * 16 * 2  # iterations x steps x envs
    assert summary["run_dir"] == str(tmp_path / "maniskill_ppo_mlp")  # experiment_name
