"""Composition and overrides: what a valid config turns into."""

import dataclasses

import pytest

from rlcore.cli import main as cli_main
from rlcore.cli import run_entry_point
from rlcore.config import (
    CONFIG_DIR,
    AlgorithmConfig,
    ConfigError,
    EmbodiedConfig,
    ReasoningConfig,
    build_config,
    config_names,
    load_config,
)
from rlcore.config.foreign import current_keys
from rlcore.config.load import validate_config


@pytest.mark.parametrize("name", config_names())
def test_every_shipped_config_is_valid(name):
    config = load_config(name)
    assert config.mode == name.split("/")[0]


def test_shipped_configs_are_found():
    assert {"embodied/cartpole_ppo", "reasoning/tiny_arith_ppo"} <= set(config_names())
    assert (CONFIG_DIR / "embodied" / "cartpole_ppo.yaml").is_file()


def test_yaml_values_and_schema_defaults_are_both_applied():
    config = load_config("embodied/cartpole_ppo")
    assert isinstance(config, EmbodiedConfig)
    assert config.algorithm.gamma == 0.99  # from the YAML
    assert config.algorithm.kl_ctrl.horizon == AlgorithmConfig().kl_ctrl.horizon  # schema default
    assert config.env.id == "CartPole-v1"


def test_a_key_absent_from_the_yaml_is_overridden_without_plus():
    config = load_config("embodied/cartpole_ppo", ["env.clip_obs=5"])
    assert config.env.clip_obs == 5.0


def test_integers_are_accepted_for_float_keys():
    config = load_config("embodied/cartpole_ppo", ["algorithm.gamma=1"])
    assert config.algorithm.gamma == 1.0 and isinstance(config.algorithm.gamma, float)


def test_null_turns_optional_features_off_and_tilde_restores_the_default():
    config = load_config("reasoning/tiny_arith_ppo", ["algorithm.value_clip=null"])
    assert config.algorithm.value_clip is None
    config = load_config("reasoning/tiny_arith_ppo", ["~algorithm.clip_ratio_c"])
    assert config.algorithm.clip_ratio_c is AlgorithmConfig().clip_ratio_c is None


def test_yaml_path_outside_configs(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "mode: reasoning\n"
        "data: {train_batch_size: 4}\n"
        "actor: {ppo_mini_batch_size: 2}\n"
        "critic: {use_critic_model: true}\n"
        "algorithm: {gae_lambda: 0.9, gamma: '${algorithm.gae_lambda}'}\n"
    )
    config = load_config(str(path))
    assert isinstance(config, ReasoningConfig)
    assert config.algorithm.gamma == config.algorithm.gae_lambda == 0.9  # interpolation resolved


def test_critic_update_sizes_fall_back_to_the_actor():
    config = load_config(
        "reasoning/tiny_arith_ppo", ["critic.ppo_mini_batch_size=8", "actor.ppo_micro_batch_size=4"]
    )
    update = config.derived.critic_update
    assert update.ppo_mini_batch_size == 8
    assert update.ppo_micro_batch_size == config.actor.ppo_micro_batch_size == 4
    assert update.ppo_epochs == config.actor.ppo_epochs


ASYNC = [
    "runner.max_staleness=1",
    "cluster.devices_per_node=2",
    "cluster.component_placement={actor:0,ref:0,critic:1,rollout:1,reward:1}",
]
RC = "algorithm.rollout_correction"


@pytest.mark.parametrize(
    ("overrides", "bypass"),
    [
        ([], False),  # synchronous: the old log-probs as before
        (ASYNC, True),  # asynchronous, nothing asked: bypass (measured best, docs/async.md)
        ([*ASYNC, f"{RC}.rollout_is=token"], False),  # a correction needs the recompute
        ([*ASYNC, f"{RC}.rollout_rs=token_k1", f"{RC}.rollout_rs_threshold=2.0"], False),
        ([*ASYNC, "actor.recompute_log_probs=true"], False),  # asked for the recompute
        ([*ASYNC, f"{RC}.bypass_mode=false"], False),  # as given
        ([f"{RC}.bypass_mode=true"], True),
    ],
)
def test_bypass_mode_null_means_bypass_in_an_asynchronous_run_that_asks_nothing_else(
    overrides, bypass
):
    config = load_config("reasoning/tiny_arith_ppo", overrides)
    assert config.algorithm.rollout_correction.bypass_mode is (
        None if f"{RC}.bypass_mode" not in " ".join(overrides) else bypass
    )
    assert config.derived.bypass_mode is bypass


def test_bypass_mode_null_keeps_the_pass_an_estimator_reads_and_is_false_when_embodied():
    config = load_config(
        "reasoning/tiny_arith_ppo",
        [*ASYNC, "algorithm.adv_type=optimal_token_baseline", "algorithm.group_size=2"],
    )
    assert config.derived.bypass_mode is False  # it reads the recompute's sum_pi_squared
    assert load_config("embodied/mujoco_halfcheetah_ppo_async").derived.bypass_mode is False


def test_build_config_from_a_plain_dict_round_trips():
    raw = {"mode": "embodied", "env": {"id": "Pendulum-v1"}, "actor": {"ppo_mini_batch_size": 64}}
    config = build_config(raw)
    assert build_config(dataclasses.asdict(config)) == config
    # a validated config's dict (its derived values in) reads back as the same config
    validated = validate_config(raw)
    assert validated.derived is not None
    assert validate_config(current_keys(dataclasses.asdict(validated))) == validated


def test_a_copied_config_file_anywhere_composes_with_the_package_groups(tmp_path):
    """Copy a shipped config, edit it, run it: its defaults list (`/cluster: local`) and
    `cluster=NAME` come from the package's configs/ (issue: "Could not find 'cluster/local'")."""
    source = CONFIG_DIR / "embodied" / "cartpole_ppo.yaml"
    copy = tmp_path / "mine" / "my_copy.yaml"
    copy.parent.mkdir()
    copy.write_text(source.read_text().replace("rollout_steps: 8 ", "rollout_steps: 16"))
    config = load_config(str(copy))
    assert config.runner.rollout_steps == 16 and config.cluster.device == "auto"
    on_gpus = load_config(str(copy), ["cluster=gpu_2x8"])
    assert on_gpus.cluster.num_nodes == 2 and on_gpus.cluster.devices_per_node == 8
    # a cluster folder next to the file is searched first
    (copy.parent / "cluster").mkdir()
    (copy.parent / "cluster" / "mybox.yaml").write_text(
        "# @package cluster\nnum_nodes: 1\ndevices_per_node: 3\ndevice: cpu\n"
    )
    assert load_config(str(copy), ["cluster=mybox"]).cluster.devices_per_node == 3
    with pytest.raises(ConfigError, match=r"cluster=nope: no 'nope' in .*known: .*gpu_2x8"):
        load_config(str(copy), ["cluster=nope"])


def test_the_entry_points_take_a_config_file_with_a_defaults_list(tmp_path, capsys):
    copy = tmp_path / "copy.yaml"
    copy.write_text((CONFIG_DIR / "embodied" / "cartpole_ppo.yaml").read_text())
    assert cli_main(["placement", str(copy)]) == 0
    assert capsys.readouterr().out.startswith("placement: collocated")
    assert (
        run_entry_point("embodied/cartpole_ppo", ["--config", str(copy), "runner.dry_run=true"])
        == 0
    )


def test_a_config_folder_edited_between_loads_is_read_again(tmp_path):
    """Compositions are kept per process (load.py), keyed by the folder's YAML files: a file
    edited in place, or a group choice added, gives what a first load gives."""
    import shutil

    from rlcore.config.load import CONFIG_DIR

    folder = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, folder)
    path = folder / "embodied" / "cartpole_ppo.yaml"
    first = load_config("embodied/cartpole_ppo", config_dir=folder)
    again = load_config("embodied/cartpole_ppo", ["algorithm.gamma=0.9"], config_dir=folder)
    assert (first.algorithm.gamma, again.algorithm.gamma) == (0.99, 0.9)  # each its own copy
    path.write_text(path.read_text().replace("gamma: 0.99", "gamma: 0.95"))
    assert load_config("embodied/cartpole_ppo", config_dir=folder).algorithm.gamma == 0.95
    # a group file edited (picked by cluster=NAME), then the same config with another choice
    group = folder / "cluster" / "local.yaml"
    assert group.is_file()
    before = load_config("embodied/cartpole_ppo", config_dir=folder).cluster.collective_timeout_s
    group.write_text(group.read_text() + "\ncollective_timeout_s: 123.0\n")
    after = load_config("embodied/cartpole_ppo", config_dir=folder).cluster.collective_timeout_s
    assert (before != 123.0, after) == (True, 123.0)
