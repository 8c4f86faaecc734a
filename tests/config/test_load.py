"""The loader's own passes, each alone (``rlcore.config.load``): a composed config in, the config
and the lines said out, the expected values written out by hand."""

import pytest
from omegaconf import OmegaConf

from rlcore.config.composition import parse_overrides
from rlcore.config.errors import ConfigError
from rlcore.config.load import (
    apply_overrides,
    env_file_made_absolute,
    no_warmup_for_a_given_model,
    resolved,
)


def test_apply_overrides_sets_deletes_and_translates_an_alias_in_order():
    cfg = OmegaConf.create({"algorithm": {"gamma": 1.0, "gae_lambda": 0.95}})
    overrides = parse_overrides(
        ["algorithm.gamma=0.9", "~algorithm.gae_lambda", "actor_rollout_ref.rollout.n=4"]
    )
    said = apply_overrides(cfg, overrides)
    assert OmegaConf.to_container(cfg) == {"algorithm": {"gamma": 0.9, "group_size": 4}}
    assert said == ["actor_rollout_ref.rollout.n (verl) is algorithm.group_size here"]


def test_apply_overrides_refuses_to_delete_a_key_that_is_not_set():
    cfg = OmegaConf.create({"algorithm": {"gamma": 1.0}})
    with pytest.raises(ConfigError) as err:
        apply_overrides(cfg, parse_overrides(["~algorithm.nope"]))
    assert str(err.value) == "~algorithm.nope: 'algorithm.nope' is not set, nothing to delete"


def test_no_warmup_for_a_given_model_turns_the_warm_up_off_in_reasoning_mode_only():
    tree = {
        "mode": "reasoning",
        "actor": {"model": {"path": "/m"}},
        "warmup": {"steps": 50, "examples": "/e.jsonl"},
    }
    cfg = OmegaConf.create(tree)
    said = no_warmup_for_a_given_model(cfg)
    assert OmegaConf.to_container(cfg)["warmup"] == {"steps": 0, "examples": None}
    assert said == [
        "warmup.steps: 50 set to 0 (and warmup.examples to null): the supervised warm-up trains "
        "the tiny model only, and actor.model.path names a model (/m)"
    ]
    embodied = OmegaConf.create({**tree, "mode": "embodied"})
    assert no_warmup_for_a_given_model(embodied) == []
    assert OmegaConf.to_container(embodied) == {**tree, "mode": "embodied"}


def test_env_file_made_absolute_reads_a_python_file_from_where_the_run_starts(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    for given, expected in [
        ("envs/my.py:MyEnv", f"{tmp_path}/envs/my.py:MyEnv"),
        ("CartPole-v1", "CartPole-v1"),  # a registered id
        ("pkg.module:Env", "pkg.module:Env"),  # a module, found on the path
    ]:
        cfg = OmegaConf.create({"env": {"id": given}})
        env_file_made_absolute(cfg)
        assert cfg.env.id == expected


def test_resolved_gives_a_plain_dict_and_names_an_interpolation_it_cannot_resolve():
    assert resolved(OmegaConf.create({"a": 1, "b": "${a}"}), "mine") == {"a": 1, "b": 1}
    with pytest.raises(ConfigError, match=r"^mine: .*not defaults\)$"):
        resolved(OmegaConf.create({"b": "${nowhere}"}), "mine")
