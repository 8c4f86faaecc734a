"""Composition and overrides: what a valid config turns into."""

import dataclasses

import pytest

from rlcore.config import (
    CONFIG_DIR,
    AlgorithmConfig,
    EmbodiedConfig,
    ReasoningConfig,
    build_config,
    config_names,
    load_config,
)


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
    config = load_config("embodied/cartpole_ppo", ["algorithm.kl_ctrl.target_kl=0.5"])
    assert config.algorithm.kl_ctrl.target_kl == 0.5


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
    update = config.critic_update()
    assert update.ppo_mini_batch_size == 8
    assert update.ppo_micro_batch_size == config.actor.ppo_micro_batch_size == 4
    assert update.ppo_epochs == config.actor.ppo_epochs


def test_build_config_from_a_plain_dict_round_trips():
    raw = {"mode": "embodied", "env": {"id": "Pendulum-v1"}, "actor": {"ppo_mini_batch_size": 64}}
    config = build_config(raw)
    assert build_config(dataclasses.asdict(config)) == config
