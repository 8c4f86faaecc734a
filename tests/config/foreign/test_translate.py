"""The loader's translation passes, each alone: a composed config in (a dict as Hydra gives it),
the config and the lines said out, the expected values written out by hand from verl's, RLinf's
and rlcore's documented meanings."""

import pytest
from omegaconf import OmegaConf

from rlcore.config.composition import parse_overrides
from rlcore.config.errors import ConfigError
from rlcore.config.foreign import ALIASES
from rlcore.config.foreign.translate import (
    drop_derived_keys,
    keys_at_hand,
    rename_aliases,
    set_alias,
    verl_custom_reward,
    verl_token_budgets,
)


def run(translate, tree, *args):
    """``(the config after the pass, as a dict, the lines it said)``."""
    cfg = OmegaConf.create(tree)
    said = translate(cfg, *args)
    return OmegaConf.to_container(cfg), said


def test_rename_aliases_moves_verl_keys_to_rlcores_and_drops_the_emptied_sections():
    tree = {
        "mode": "reasoning",
        "actor_rollout_ref": {"rollout": {"n": 4, "top_k": -1}},
        "algorithm": {"gamma": 1.0},
    }
    out, said = run(rename_aliases, tree, OmegaConf.create(tree))
    assert out == {
        "mode": "reasoning",
        "algorithm": {"gamma": 1.0, "group_size": 4},
        "rollout": {"top_k": 0},
    }
    assert said == [
        "actor_rollout_ref.rollout.n (verl) is algorithm.group_size here",
        "actor_rollout_ref.rollout.top_k (verl) is rollout.top_k here; verl's -1 (no limit) is 0",
    ]


def test_rename_aliases_lets_the_files_own_key_beat_an_alias_from_a_config_below_it():
    composed = {"actor_rollout_ref": {"rollout": {"n": 4}}, "algorithm": {"group_size": 8}}
    own = OmegaConf.create({"algorithm": {"group_size": 8}})  # the alias came from its defaults
    out, said = run(rename_aliases, composed, own)
    assert out == {"algorithm": {"group_size": 8}}
    assert said == ["actor_rollout_ref.rollout.n (verl) is algorithm.group_size here"]


def test_rename_aliases_refuses_a_file_that_sets_one_key_in_both_spellings_differently():
    tree = {"actor_rollout_ref": {"rollout": {"n": 4}}, "algorithm": {"group_size": 5}}
    with pytest.raises(ConfigError) as err:
        run(rename_aliases, tree, OmegaConf.create(tree))
    assert str(err.value) == (
        "actor_rollout_ref.rollout.n: set to 4, which is algorithm.group_size here, but the "
        "config also sets algorithm.group_size to 5; keep one of the two"
    )


def test_rename_aliases_lets_verls_clip_ratio_shorthand_give_way_to_the_specific_bound():
    # clip_ratio sets both bounds; clip_ratio_high, the specific one, decides the upper bound
    tree = {"actor_rollout_ref": {"actor": {"clip_ratio": 0.2, "clip_ratio_high": 0.28}}}
    out, _ = run(rename_aliases, tree, OmegaConf.create(tree))
    assert out == {"algorithm": {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28}}


def test_rename_aliases_reads_rlinfs_and_rlcores_earlier_spellings():
    tree = {"algorithm": {"update_epoch": 3}, "actor": {"optim": {"lr_schedule": "cosine"}}}
    out, said = run(rename_aliases, tree, OmegaConf.create(tree))
    assert out == {"actor": {"ppo_epochs": 3, "optim": {"decay": "cosine"}}}
    assert said == [
        "algorithm.update_epoch (RLinf) is actor.ppo_epochs here",
        "actor.optim.lr_schedule (rlcore's earlier key) is actor.optim.decay here",
    ]


def test_set_alias_converts_verls_logger_list_into_rlcores_three_switches():
    cfg = OmegaConf.create({"logger": {"console": False}})
    (override,) = parse_overrides(["trainer.logger=[console,wandb]"])
    line = set_alias(cfg, override, ALIASES["trainer.logger"], {})
    assert OmegaConf.to_container(cfg) == {
        "logger": {"console": True, "tensorboard": False, "wandb": True}
    }
    assert line.startswith("trainer.logger (verl) is logger.console and logger.tensorboard and ")


def test_set_alias_refuses_two_aliases_of_one_key_with_different_values():
    cfg, by_alias = OmegaConf.create({}), {}
    first, second = parse_overrides(
        ["actor_rollout_ref.rollout.n=4", "actor_rollout.ref.rollout.n=5"]
    )
    set_alias(cfg, first, ALIASES[first.key_or_group], by_alias)
    with pytest.raises(ConfigError, match=r"^actor_rollout.ref.rollout.n=5: actor_rollout_ref"):
        set_alias(cfg, second, ALIASES[second.key_or_group], by_alias)


def test_verl_token_budgets_give_verls_default_lengths_and_the_critic_follows_the_actors_switch():
    out, said = run(verl_token_budgets, {"actor_rollout_ref": {"actor": {"use_dynamic_bsz": True}}})
    # verl's defaults: 16384 tokens for the actor's passes, 32768 for the critic's
    assert out == {
        "actor": {"max_tokens_per_micro_batch": 16384},
        "critic": {"max_tokens_per_micro_batch": 32768},
    }
    assert len(said) == 2 and said[1].endswith("(its switch follows the actor's, as in verl)")


def test_verl_token_budgets_ignore_a_length_without_its_switch_and_say_so():
    out, said = run(
        verl_token_budgets, {"critic": {"ppo_max_token_len_per_gpu": 100, "ppo_epochs": 1}}
    )
    assert out == {"critic": {"ppo_epochs": 1}}
    assert said == [
        "critic.ppo_max_token_len_per_gpu (verl) has no effect without "
        "critic.use_dynamic_bsz=true, as in verl: ignored"
    ]


def test_verl_token_budgets_refuse_two_lengths_for_one_budget():
    tree = {
        "actor_rollout_ref": {
            "actor": {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 4096},
            "ref": {"log_prob_use_dynamic_bsz": True, "log_prob_max_token_len_per_gpu": 2048},
        }
    }
    with pytest.raises(ConfigError, match="one token budget here"):
        run(verl_token_budgets, tree)


def test_verl_custom_reward_is_the_custom_reward_kind_with_verls_default_function_name():
    out, said = run(verl_custom_reward, {"custom_reward_function": {"path": "/r.py", "name": None}})
    assert out == {"reward": {"rules": {"custom_fn": "/r.py:compute_score"}, "kind": "custom"}}
    assert len(said) == 1


def test_drop_derived_keys_accepts_what_the_mode_does_and_refuses_the_rest():
    tree = {"mode": "embodied", "algorithm": {"loss_type": "actor_critic", "gamma": 0.9}}
    out, said = run(drop_derived_keys, tree)
    assert out == {"mode": "embodied", "algorithm": {"gamma": 0.9}}
    assert said == [
        "algorithm.loss_type (rlcore's earlier key) is derived.loss_type here, which follows from "
        "the mode (embodied: actor_critic); leave it out"
    ]
    with pytest.raises(ConfigError, match=r"^algorithm.loss_type: actor_critic; reasoning mode"):
        run(drop_derived_keys, {**tree, "mode": "reasoning"})


def test_keys_at_hand_says_no_only_where_select_finds_nothing():
    """Its "no" is a promise (the alias passes skip those paths unlooked-up): every path that
    ``OmegaConf.select`` finds, through a section written as an interpolation or a list
    included, it may hold; the paths that are not there and have nothing opaque above them,
    it does not."""
    cfg = OmegaConf.create(
        {
            "other": {"x": 1, "deep": {"y": None}},
            "linked": "${other}",  # (select goes through it: linked.x is 1)
            "rows": [{"z": 2}],
            "empty": {},
            "missing": "???",
        }
    )
    may_hold = keys_at_hand(cfg)
    found = ["other", "other.x", "other.deep", "other.deep.y", "linked.x", "linked.deep.y"]
    found += ["rows.0.z", "empty", "missing"]
    for path in found:
        assert may_hold(path), path
    assert OmegaConf.select(cfg, "linked.x") == 1 and OmegaConf.select(cfg, "rows.0.z") == 2
    for path in ("nowhere", "other.nowhere", "other.x.below", "empty.nowhere", "other.deep.q"):
        assert OmegaConf.select(cfg, path, default="absent") == "absent", path
        assert not may_hold(path), path
