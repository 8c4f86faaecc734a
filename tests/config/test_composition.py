"""Hydra's side of loading, pass by pass: what ``read_request`` sorts where, and how
``settle_placement`` leaves one component placement (each checked against a config written out
here)."""

import re

import pytest
from omegaconf import OmegaConf

from rlcore.config import ConfigError, load_config
from rlcore.config.composition import CONFIG_DIR, parse_overrides, read_request, settle_placement


def test_read_request_sends_group_choices_to_hydra_and_keeps_plain_keys_for_later():
    request = read_request("embodied/cartpole_ppo", ["cluster=local", "algorithm.gamma=0.9"])
    assert (request.directory, request.name) == (CONFIG_DIR, "embodied/cartpole_ppo")
    assert request.hydra_overrides == ("cluster=local",)
    assert [o.input_line for o in request.plain] == ["algorithm.gamma=0.9"]


def test_read_request_puts_the_packages_groups_on_the_search_path_of_a_file_elsewhere(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("defaults:\n  - /embodied/cartpole_ppo\n  - _self_\n")
    request = read_request(str(path), ["cluster=gpu_1x8"])
    assert request.searched == (tmp_path.resolve(), CONFIG_DIR)
    assert request.hydra_overrides == ("cluster=gpu_1x8", f"hydra.searchpath=[file://{CONFIG_DIR}]")
    assert request.plain == ()


def test_settle_placement_keeps_the_files_own_placement_and_a_cluster_files_section(tmp_path):
    # Hydra merged the file's placement with one from its defaults list: the file's alone stays
    cfg = OmegaConf.create({"cluster": {"component_placement": {"env,actor": 0, "rollout": 1}}})
    own = OmegaConf.create({"cluster": {"component_placement": {"env,actor": 0}}})
    request = read_request("embodied/cartpole_ppo", [])
    settle_placement(cfg, own, request, None)
    assert OmegaConf.to_container(cfg) == {"cluster": {"component_placement": {"env,actor": 0}}}
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text("cluster:\n  num_nodes: 2\n")
    settle_placement(cfg, own, request, cluster_file)
    assert OmegaConf.to_container(cfg) == {"cluster": {"num_nodes": 2}}


def test_a_value_hydra_refuses_unquoted_but_can_only_be_one_string_is_that_string(monkeypatch):
    # Hydra's lexer refuses `~` and `(` in an unquoted value (its own answer to `key=~/x`)
    overrides = [
        "data.train_files=~/data/gsm8k/train.parquet",
        "reward.judge.parser=Score:\\s*(\\d+)",  # as the shell passes 'reward.judge.parser=...'
        "algorithm.gamma=0.9",
    ]
    parsed = parse_overrides(overrides)
    assert [o.value() for o in parsed] == ["~/data/gsm8k/train.parquet", "Score:\\s*(\\d+)", 0.9]
    assert re.search(parsed[1].value(), "Score: 7").group(1) == "7"
    monkeypatch.setenv("HOME", "/home/reader")  # a path key expands the home folder
    config = load_config("reasoning/tiny_arith_ppo", overrides[:1])
    assert list(config.data.train_files) == ["/home/reader/data/gsm8k/train.parquet"]
    # a value with Hydra's own syntax is still Hydra's, and its mistakes one line each
    for bad, found in [("a=[1,2", "no viable alternative"), ("a=${x", "mismatched input")]:
        with pytest.raises(ConfigError) as caught:
            parse_overrides([bad])
        assert found in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="sweeps are not supported"):
        parse_overrides(["a=1,2"])
