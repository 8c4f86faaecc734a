"""One config vocabulary: every shipped config loads to the effective values it had before the
runner and optimiser sections were made one (resolved_before.json: each config's resolved keys,
and its cluster section under each cluster file, as rlcore 0.1 wrote them), rlcore's earlier
spellings are accepted with a line, and a validated config cannot be changed."""

import dataclasses
import json
from pathlib import Path

import pytest

from rlcore.config import load_config, replace_keys
from rlcore.config.fields import as_plain
from rlcore.envs.registry import solved_threshold

BEFORE = json.loads((Path(__file__).parent / "resolved_before.json").read_text())

# rlcore 0.1's key -> this version's
RENAMED = {
    "actor.optim.lr_schedule": "actor.optim.decay",
    "actor.optim.adam_eps": "actor.optim.eps",
    "actor.optim.lr_warmup_steps": "actor.optim.warmup_steps",
    "critic.optim.lr_warmup_steps": "critic.optim.warmup_steps",
    # the reward section's flat keys, now in subsections by kind
    "reward.gsm8k_mode": "reward.rules.gsm8k_mode",
    "reward.correct_score": "reward.rules.correct_score",
    "reward.format_score": "reward.rules.format_score",
    "reward.custom_fn": "reward.rules.custom_fn",
    "reward.timeout_s": "reward.rules.timeout_s",
    "reward.num_processes": "reward.rules.num_processes",
}
# rlcore 0.1's keys whose values follow from the mode or the estimator, and where they are now
# (critic.use_critic_model is still a key, left as given: null in every shipped config)
DERIVED = {
    "algorithm.loss_type": "derived.loss_type",
    "actor.model.add_value_head": "derived.value_head",
    "critic.use_critic_model": "derived.critic_model",
}
# keys new to a mode, at the value that does what rlcore 0.1 did without them (embodied: Adam
# with no weight decay and no warm-up; reasoning: AdamW at torch's eps, no decay)
IMPLICIT = {
    "embodied": {
        "derived.critic_model": False,
        "actor.optim.name": "adam",
        "actor.optim.weight_decay": 0.0,
        "actor.optim.warmup_steps": 0,
    },
    "reasoning": {
        "critic.use_critic_model": None,
        "derived.value_head": False,
        "actor.optim.name": "adamw",
        "critic.optim.name": "adamw",
        "actor.optim.eps": 1e-8,
        "critic.optim.eps": 1e-8,
        "actor.optim.decay": "constant",
        "critic.optim.decay": "constant",
    },
}
# keys added after the vocabulary change, at their defaults: they refuse what 0.1 allowed, and
# change no computed value (runner.resume_changed_data: 0.1 resumed on changed data unchecked;
# runner.eval_max_steps: 0.1 raised after a million steps, and no shipped env runs 27000;
# reward.rules.max_timeout_share: 0.1 went on however many timed out;
# reward.score_range: 0.1 trained on NaN or 1e308 rewards by skipping every step;
# reward.rules.batch_timeout_s: 0.1 spent a deadline and a process restart per response that timed
# out, minutes per batch (a batch of these shipped tasks scores in well under a second);
# cluster.worker_timeout_s: 0.1 waited for a silent worker forever;
# algorithm.rollout_correction and rollout.calculate_log_probs: off, 0.1 corrected nothing;
# bypass_mode null is bypass only where runner.max_staleness >= 1, which 0.1 did not have)
ROLLOUT_CORRECTION = {
    "algorithm.rollout_correction.rollout_is": None,
    "algorithm.rollout_correction.rollout_is_threshold": 2.0,
    "algorithm.rollout_correction.rollout_is_batch_normalize": False,
    "algorithm.rollout_correction.rollout_rs": None,
    "algorithm.rollout_correction.rollout_rs_threshold": None,
    "algorithm.rollout_correction.bypass_mode": None,
    "derived.bypass_mode": False,
    "algorithm.rollout_correction.loss_type": "ppo_clip",
}
ADDED_IN_BOTH_MODES = {
    "runner.resume_changed_data": False,
    "runner.eval_max_steps": 27_000,
    "cluster.worker_timeout_s": 1800.0,
    "runner.max_staleness": 0,  # (0.1's lockstep loop)
    "algorithm.bootstrap_type": "standard",  # (0.1's: truncations only)
    "logger.project": "rlcore",  # (the W&B project 0.1 logged to)
}
ADDED_SINCE = {
    # actor.model.cls: a user's policy class (0.1 had the built-in heads only)
    # actor.model.type / .lm: the LM policy
    "embodied": {
        **ADDED_IN_BOTH_MODES,
        **ROLLOUT_CORRECTION,
        "actor.model.cls": None,
        "actor.model.type": "actor_critic",
        "actor.model.lm.path": None,
        "actor.model.lm.action_bins": 32,
        "actor.model.lm.tiny.hidden_size": 64,
        "actor.model.lm.tiny.num_layers": 2,
        "actor.model.lm.tiny.num_heads": 4,
        "actor.model.lm.tiny.intermediate_size": 256,
        "actor.model.lm.vision.image_size": None,
        "actor.model.lm.vision.patch_size": 4,
        "rollout.pipeline_stage_num": 1,
        "actor.model.lm.lora.rank": 0,
        "actor.model.lm.lora.alpha": 16.0,
        "actor.model.lm.lora.target_modules": [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
    },
    "reasoning": {
        **ADDED_IN_BOTH_MODES,
        **ROLLOUT_CORRECTION,
        # mixture-of-experts models (issue 53)
        "actor.model.tiny.num_experts": 0,
        "actor.model.tiny.experts_per_token": 2,
        "actor.model.tiny.expert_intermediate_size": None,
        "actor.router_aux_loss_coef": None,
        "rollout.routing_replay": False,
        "actor.ulysses_sequence_parallel_size": 1,
        "critic.ulysses_sequence_parallel_size": 1,
        # the visual arithmetic task (issue 54)
        "data.synthetic.images": False,
        "actor.model.freeze_vision_tower": True,
        "reward.rules.max_timeout_share": 0.5,
        "reward.score_range": [-1e4, 1e4],
        "reward.rules.batch_timeout_s": 60.0,
        "rollout.calculate_log_probs": False,
        # reward.kind remote's and model's keys (0.1 had neither kind)
        "reward.model.path": None,
        "reward.judge.template": None,
        "reward.judge.parser": "(-?\\d+(?:\\.\\d+)?)",
        "reward.judge.max_new_tokens": 16,
        "reward.judge.backend": "hf",
        "reward.model.micro_batch_size": 64,
        "reward.model.backend": "torch",
        "rollout.partial_rollout": False,
        "actor.entropy_from_logits_with_chunking": False,
        "actor.entropy_from_logits_chunk_size": 2048,
        "actor.entropy_checkpointing": False,
        "rollout.partial_rollout_tokens": None,
        "reward.model.score_clip": None,
        "reward.model.score_normalize": False,
        "reward.model.rule": "auto",
        "reward.model.combine": "rule_only_for_accuracy",
        "reward.model.model_weight": 1.0,
        "reward.model.rule_weight": 1.0,
        "reward.remote.url": None,
        "reward.remote.batch_size": 64,
        "reward.remote.concurrency": 4,
        "reward.remote.timeout_s": 30.0,
        "reward.remote.retries": 3,
        "reward.remote.on_error": "raise",
        # multi-turn rollouts with tools (0.1 had one turn)
        "rollout.tools": [],
        "rollout.max_turns": 4,
        "rollout.tool_call_regex": None,
        "rollout.tool_timeout_s": 10.0,
        "rollout.tool_processes": 2,
        "rollout.interaction": None,
        "warmup.examples": None,
        # the hf engine's static-cache decode loop and the fused log-probs (issue 51)
        "rollout.hf.static_cache": False,
        "rollout.hf.cuda_graph": True,
        "rollout.hf.compile": False,
        "rollout.hf.batch_bucket": 32,
        "rollout.hf.length_bucket": 64,
        "rollout.hf.max_buckets": 2,
        "actor.model.use_fused_kernels": False,
        "actor.use_torch_compile": False,
        "critic.use_torch_compile": False,
    },
}
# the one runner section's keys of the other mode (not read, at their defaults)
OTHER_MODE = {
    "embodied": {"total_iterations", "val_every", "val_n", "log_val_generations"},
    "reasoning": {"rollout_steps", "total_env_steps", "eval_every", "eval_episodes"}
    | {"stop_at_threshold"},
}


# env.solved_threshold: 0.1's number or null is now `env` in the shipped configs (the default):
# the env's own spec.reward_threshold, resolved by the runner. CartPole-v1's is the 475 its YAML
# wrote; the MuJoCo tasks' (gymnasium's 4800 and 3800, none for ManiSkill) now time
# time_to_threshold_s where 0.1 had no threshold (none of them stops at it)
THRESHOLDS = {
    "embodied/cartpole_ppo": 475.0,
    "embodied/maniskill_pickcube_ppo": None,
    "embodied/mujoco_halfcheetah_ppo": 4800.0,
    "embodied/mujoco_hopper_ppo": 3800.0,
}


# defaults that changed, each at a value that computes what 0.1's did on 0.1's data: reward.kind
# auto scores a row without a data_source (every 0.1 file, the synthetic task) by gsm8k's rule;
# data.chat_template null wraps only chat prompts (verl's files), which 0.1 refused
NEW_DEFAULTS = {"reward.kind": ("gsm8k", "auto"), "data.chat_template": (False, None)}


# the default embodied job took the design card's actor-critic (issue 31): a shared trunk and a
# Huber value loss; its earlier settings are embodied/cartpole_ppo_separate_trunks. Then (issue
# 50 point 7) rewards normalised by the return's running std and the value loss weighed 2.0, so
# that the card's shape trains other envs as well as a trunk per head
RETUNED = {
    "embodied/cartpole_ppo": {
        "actor.model.shared_backbone": True,
        "algorithm.huber_delta": 10.0,
        "algorithm.value_coef": 2.0,
        "env.normalize_reward": True,
    },
    # the MuJoCo tasks likewise (issue 31), their earlier settings beside them
    "embodied/mujoco_halfcheetah_ppo": {
        "actor.model.shared_backbone": True,
        "algorithm.huber_delta": 1.0,
    },
    "embodied/mujoco_hopper_ppo": {
        "actor.model.shared_backbone": True,
        "algorithm.huber_delta": 10.0,
        "algorithm.value_coef": 0.1,
    },
    "embodied/maniskill_pickcube_ppo": {
        "actor.model.shared_backbone": True,
        "algorithm.huber_delta": 1.0,
        "algorithm.value_clip": 0.2,
    },
}
# the 0.5B GPU recipe takes issue 51's paths: the same distribution sampled by rlcore's decode
# loop (other random draws, so other tokens than generate's), the same log-probs and gradients
RETUNED["reasoning/qwen2.5-0.5b_gsm8k_ppo"] = {
    "rollout.hf.static_cache": True,
    "actor.model.use_fused_kernels": True,
}
# changed in both shapes on purpose: PickCube bootstraps at success, as ManiSkill's baseline
FIXED = {"embodied/maniskill_pickcube_ppo": {"algorithm.bootstrap_type": "always"}}


def flat(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and key != "component_placement":
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def effective_before(config: str, now: dict, retuned: bool = True) -> dict:
    """``now``'s keys with the values rlcore 0.1 resolved ``config`` to (renamed, derived and
    implicit ones mapped; with ``retuned``, the settings changed since on purpose)."""
    retune = (RETUNED.get(config, {}) if retuned else {}) | FIXED.get(config, {})
    before = flat(BEFORE[config]["resolved"]) | retune
    mode = before["mode"]
    out = {RENAMED.get(k, DERIVED.get(k, k)): v for k, v in before.items()}
    out |= IMPLICIT[mode] | ADDED_SINCE[mode]
    out |= {k: v for k, v in retune.items() if k in ADDED_SINCE[mode]}  # (added, then retuned)
    if mode == "embodied":
        given = out["env.solved_threshold"]
        assert given in (None, THRESHOLDS[config]), "0.1's threshold was its env's or none"
        out["env.solved_threshold"] = "env"
    for key, (was, default) in NEW_DEFAULTS.items():
        if out.get(key, default) == was and now.get(key) == default:
            out[key] = default
    for key in now:
        if key.startswith("runner.") and key.split(".")[1] in OTHER_MODE[mode]:
            out[key] = now[key]  # not read in this mode (the validator refuses it set)
    return out


@pytest.mark.parametrize("config", sorted(BEFORE))
def test_every_shipped_config_loads_to_its_earlier_effective_values(config, capsys):
    loaded = load_config(config)
    assert capsys.readouterr().err == ""  # written in this version's keys: no line to say
    now = flat(as_plain(loaded))
    # new derived values, of keys compared themselves
    new = ("derived.iterations", "derived.critic_update", "derived.critic_token_budget")
    now = {k: v for k, v in now.items() if not k.startswith(new)}
    assert now == effective_before(config, now)
    if loaded.mode == "embodied":  # (ManiSkill's id: registered by rlcore, made only when run)
        assert solved_threshold(loaded.env.id, "env") == THRESHOLDS[config]
        assert not loaded.runner.stop_at_threshold or config == "embodied/cartpole_ppo"
    added = {
        k.removeprefix("cluster."): v for k, v in ADDED_IN_BOTH_MODES.items() if "cluster." in k
    }
    for cluster, section in BEFORE[config]["cluster"].items():
        assert as_plain(load_config(config, [f"cluster={cluster}"]).cluster) == section | added


@pytest.mark.parametrize(
    ("config", "earlier", "now", "value"),
    [
        ("embodied/cartpole_ppo", "actor.optim.lr_schedule=constant", "decay", "constant"),
        ("embodied/cartpole_ppo", "actor.optim.adam_eps=0.001", "eps", 0.001),
        ("reasoning/tiny_arith_ppo", "actor.optim.lr_warmup_steps=7", "warmup_steps", 7),
    ],
)
def test_an_earlier_spelling_is_read_with_a_line(config, earlier, now, value, capsys):
    loaded = load_config(config, [earlier])
    assert getattr(loaded.actor.optim, now) == value
    key = earlier.split("=")[0]
    assert f"rlcore: {key} (rlcore's earlier key) is actor.optim.{now} here" in (
        capsys.readouterr().err
    )


def test_a_validated_config_cannot_be_changed():
    config = load_config("reasoning/tiny_arith_ppo")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.runner.seed = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.derived = None
    with pytest.raises(AttributeError):  # lists are tuples
        config.data.synthetic.operations.append("-")
    placed = load_config("embodied/cartpole_ppo").cluster.component_placement
    with pytest.raises(TypeError, match="a validated config is not changed in place"):
        placed["env"] = 1
    # another config is built instead, validated again, its derived values following
    changed = replace_keys(
        config, {"runner.seed": 2, "algorithm.adv_type": "grpo", "algorithm.group_size": 2}
    )
    assert (changed.runner.seed, config.runner.seed) == (2, 1)
    assert (changed.derived.critic_model, config.derived.critic_model) == (False, True)


@pytest.mark.parametrize("config", sorted(c for c in RETUNED if c.startswith("embodied/")))
def test_the_settings_before_the_design_cards_shape_are_kept_beside_it(config, capsys):
    now = flat(as_plain(load_config(f"{config}_separate_trunks")))
    assert capsys.readouterr().err == ""
    new = ("derived.iterations", "derived.critic_update", "derived.critic_token_budget")
    now = {k: v for k, v in now.items() if not k.startswith(new)}
    assert now == effective_before(config, now, retuned=False)


# the reward section as rlcore wrote it before its subsections by kind: flat, at its defaults
FLAT_REWARD = {
    "gsm8k_mode": "strict",
    "correct_score": 1.0,
    "format_score": 0.0,
    "custom_fn": None,
    "timeout_s": 2.0,
    "num_processes": 2,
    "max_timeout_share": 0.5,
    "batch_timeout_s": 60.0,
    "model_path": None,
    "judge_template": None,
    "judge_parser": "(-?\\d+(?:\\.\\d+)?)",
    "judge_max_new_tokens": 16,
    "judge_backend": "hf",
    "model_micro_batch_size": 64,
    "model_backend": "torch",
    "score_normalize": False,
    "score_clip": None,
    "rule": "auto",
    "combine": "rule_only_for_accuracy",
    "model_weight": 1.0,
    "rule_weight": 1.0,
    "url": None,
    "remote_batch_size": 64,
    "remote_concurrency": 4,
    "remote_timeout_s": 30.0,
    "remote_retries": 3,
    "on_error": "raise",
}


JUDGE = ["reward.kind=judge", "reward.model.path=/m", "reward.judge.template=/t"]
REMOTE = ["reward.kind=remote", "reward.remote.url=http://127.0.0.1:1/x"]


@pytest.mark.parametrize(
    ("kind", "earlier", "now", "value"),
    [
        ([], "reward.gsm8k_mode=flexible", "rules.gsm8k_mode", "flexible"),
        ([], "reward.timeout_s=3", "rules.timeout_s", 3.0),
        ([], "reward.model_micro_batch_size=8", "model.micro_batch_size", 8),
        (JUDGE, "reward.judge_max_new_tokens=4", "judge.max_new_tokens", 4),
        (REMOTE, "reward.remote_retries=0", "remote.retries", 0),
    ],
)
def test_an_earlier_flat_reward_key_is_read_with_a_line(kind, earlier, now, value, capsys):
    loaded = load_config("reasoning/tiny_arith_ppo", [*kind, earlier])
    section, leaf = now.split(".")
    assert getattr(getattr(loaded.reward, section), leaf) == value
    key = earlier.split("=")[0]
    assert f"rlcore: {key} (rlcore's earlier key) is reward.{now} here" in (capsys.readouterr().err)


def test_a_config_file_with_the_flat_reward_section_loads_as_its_subsections(tmp_path, capsys):
    """The shipped reward-model config as it was written before the subsections."""
    (tmp_path / "rm.yaml").write_text(
        "# @package _global_\n"
        "defaults:\n  - /reasoning/tiny_arith_ppo\n  - _self_\n"
        "reward:\n  kind: model\n  model_path: .cache/rlcore/tiny-rm\n  rule: gsm8k\n"
        "  combine: rule_only_for_accuracy\n"
    )
    earlier = load_config(str(tmp_path / "rm.yaml"))
    said = capsys.readouterr().err
    assert earlier == load_config("reasoning/tiny_arith_rm_ppo")
    assert (earlier.reward.model.path, earlier.reward.model.rule) == (
        ".cache/rlcore/tiny-rm",
        "gsm8k",
    )
    for key, now in [("model_path", "model.path"), ("rule", "model.rule")]:
        assert f"reward.{key} (rlcore's earlier key) is reward.{now} here" in said


def test_a_checkpoint_written_with_the_flat_reward_section_resumes(tmp_path):
    from rlcore.config.errors import ConfigError
    from rlcore.runners.checkpoint import check_same_run

    current = dataclasses.asdict(load_config("reasoning/tiny_arith_ppo"))
    saved = json.loads(json.dumps(current))
    for section in ("rules", "model", "judge", "remote"):
        del saved["reward"][section]
    saved["reward"] |= FLAT_REWARD
    check_same_run(saved, current, tmp_path)  # the same run: it resumes
    saved["reward"]["timeout_s"] = 5.0  # another run: refused, naming the key as it is now
    with pytest.raises(ConfigError, match=r"other values of reward\.rules\.timeout_s;"):
        check_same_run(saved, current, tmp_path)
