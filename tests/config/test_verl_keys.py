"""Every key of verl 0.9.1's PPO trainer config (rlcore/config/foreign/verl_keys.txt, read from
verl's wheel), and of RLinf's embodied PPO example (rlcore/config/foreign/rlinf_keys.txt), meets
one of three answers: mapped to rlcore's key(s) with a line (``foreign/verl.py``, ``rlinf.py``
and the pairs ``foreign/translate.py`` reads together), spelled as rlcore spells it, or refused
as verl's key with no rlcore counterpart; never "unknown key" or a guess at a near rlcore key.
The keys with a counterpart (the table below, by reading both) must be among the mapped ones."""

import textwrap

import pytest
import yaml

from rlcore.config import ConfigError, load_config
from rlcore.config.foreign import ALIASES, DERIVED_KEYS, TOKEN_BUDGETS
from rlcore.config.foreign.key_lists import RLINF_KEYS, VERL_KEYS
from rlcore.config.foreign.rlinf_read import read_here
from rlcore.config.foreign.verl import FIXED_CHOICES
from rlcore.config.foreign.verl_features import HANDLED_KEYS
from rlcore.config.schema import SCHEMAS
from rlcore.config.validate import schema_paths

# verl keys read together with another by the loader (foreign/translate.py): the token budgets
# and verl's custom reward function
PAIRED = {
    path
    for pairs in TOKEN_BUDGETS.values()
    for switch, length, _ in pairs
    for path in (switch, f"{switch.rpartition('.')[0]}.{length}")
} | {
    f"{prefix}.{leaf}"
    for prefix in ("custom_reward_function", "reward.custom_reward_function")
    for leaf in ("path", "name")
}
OWN = {path for path, _, _ in schema_paths(SCHEMAS["reasoning"])}  # spelled as rlcore does

# verl keys with an rlcore counterpart, by reading verl's config and rlcore's: each must be
# mapped (the twelve among them)
COUNTERPARTS = {
    "actor_rollout_ref.rollout.n": "algorithm.group_size",
    "actor_rollout_ref.model.path": "actor.model.path",
    "actor_rollout_ref.actor.strategy": "actor.training_backend",
    "critic.strategy": "critic.training_backend",
    "actor_rollout_ref.actor.fsdp_config.param_offload": "actor.fsdp.offload",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "actor.fsdp.offload",
    "actor_rollout_ref.actor.fsdp_config.offload_policy": "actor.fsdp.offload",
    "critic.fsdp.param_offload": "critic.fsdp.offload",
    "actor_rollout_ref.model.lora_rank": "actor.model.lora.rank",
    "actor_rollout_ref.model.lora_alpha": "actor.model.lora.alpha",
    "actor_rollout_ref.model.lora.rank": "actor.model.lora.rank",
    "actor_rollout_ref.model.lora.alpha": "actor.model.lora.alpha",
    "actor_rollout_ref.actor.use_dynamic_bsz": "actor.max_tokens_per_micro_batch",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": "actor.max_tokens_per_micro_batch",
    "critic.ppo_max_token_len_per_gpu": "critic.max_tokens_per_micro_batch",
    "trainer.resume_mode": "runner.resume",
    "trainer.resume_from_path": "runner.resume_dir",
    "trainer.max_actor_ckpt_to_keep": "runner.keep_checkpoints",
    "trainer.max_critic_ckpt_to_keep": "runner.keep_checkpoints",
    "trainer.default_local_dir": "runner.output_dir",
    "custom_reward_function.path": "reward.rules.custom_fn",
    "custom_reward_function.name": "reward.rules.custom_fn",
    "actor_rollout_ref.actor.entropy_from_logits_with_chunking": (
        "actor.entropy_from_logits_with_chunking"
    ),
    "actor_rollout_ref.actor.entropy_checkpointing": "actor.entropy_checkpointing",
    "actor_rollout_ref.actor.fsdp_config.entropy_checkpointing": "actor.entropy_checkpointing",
    "actor_rollout_ref.actor.optim.lr": "actor.optim.lr",
    "actor_rollout_ref.actor.optim.clip_grad": "actor.optim.max_grad_norm",
    "actor_rollout_ref.actor.optim.lr_warmup_steps": "actor.optim.warmup_steps",
    "actor_rollout_ref.actor.optim.lr_scheduler_type": "actor.optim.decay",
    "critic.optim.clip_grad": "critic.optim.max_grad_norm",
    "critic.optim.lr_warmup_steps": "critic.optim.warmup_steps",
    "actor_rollout_ref.actor.use_remove_padding": "actor.model.use_remove_padding",
    "actor_rollout_ref.model.use_fused_kernels": "actor.model.use_fused_kernels",
    "actor_rollout_ref.actor.use_fused_kernels": "actor.model.use_fused_kernels",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "actor.model.gradient_checkpointing",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_epochs": "actor.ppo_epochs",
    "actor_rollout_ref.actor.loss_agg_mode": "algorithm.loss_agg_func",
    "actor_rollout_ref.actor.policy_loss.loss_mode": "algorithm.policy_loss",
    "actor_rollout_ref.rollout.temperature": "rollout.temperature",
    "actor_rollout_ref.rollout.response_length": "data.max_response_length",
    "algorithm.adv_estimator": "algorithm.adv_type",
    "algorithm.lam": "algorithm.gae_lambda",
    "trainer.total_training_steps": "runner.total_iterations",
    "trainer.n_gpus_per_node": "cluster.devices_per_node",
    "trainer.nnodes": "cluster.num_nodes",
    "trainer.device": "cluster.device",
    "trainer.logger": "logger.console",
}


def mapped(path):
    # (HANDLED_KEYS: the reward model, multi-turn and async sections, read section by section)
    return path in ALIASES or path in PAIRED or path in HANDLED_KEYS or path in FIXED_CHOICES


def setting_each(paths):
    """A YAML tree that sets each of ``paths`` (dotted) to 1."""
    tree = {}
    for path in paths:
        *parents, leaf = path.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = 1
    return tree


def the_rest():
    """The verl keys neither mapped nor spelled as rlcore does, and a YAML tree setting each."""
    rest = sorted(k for k in VERL_KEYS if not mapped(k) and k not in OWN)
    return rest, setting_each(rest)


def test_the_rest_are_refused_as_verls_keys_with_no_counterpart(tmp_path):
    rest, tree = the_rest()
    assert len(rest) > 600  # (most of verl's config: engines, profilers, ...)
    config = tmp_path / "verl_everything.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            defaults:
              - /reasoning/tiny_arith_ppo
              - _self_
            """
        )
        + yaml.safe_dump(tree)
    )
    with pytest.raises(ConfigError) as refused:
        load_config(str(config))
    lines = str(refused.value).splitlines()
    named = {line.split(":", 1)[0] for line in lines}
    assert named == set(rest)
    for line in lines:
        assert "has no rlcore counterpart" in line, line
        assert "unknown key" not in line and "did you mean" not in line, line


@pytest.mark.parametrize(("verl", "rlcore"), sorted(COUNTERPARTS.items()))
def test_a_verl_key_with_a_counterpart_is_mapped_to_it(verl, rlcore):
    assert verl in VERL_KEYS  # (a key of verl 0.9.1's config)
    if verl in ALIASES:
        assert rlcore in ALIASES[verl].targets
    else:
        assert verl in PAIRED and rlcore in {*TOKEN_BUDGETS, "reward.rules.custom_fn"}


# RLinf keys with an rlcore counterpart (maniskill_ppo_mlp.yaml and the files it composes)
RLINF_COUNTERPARTS = {
    "runner.val_check_interval": "runner.eval_every",
    "runner.save_interval": "runner.checkpoint_every",
    "runner.logger.experiment_name": "runner.run_name",
    "runner.logger.log_path": "runner.output_dir",
    "runner.logger.logger_backends": "logger.tensorboard",
    "actor.optim.clip_grad": "actor.optim.max_grad_norm",
    "algorithm.update_epoch": "actor.ppo_epochs",
    "env.train.total_num_envs": "env.num_envs",
    "env.train.init_params.obs_mode": "env.kwargs.obs_mode",
    "env.train.init_params.control_mode": "env.kwargs.control_mode",
    "env.train.init_params.sim_backend": "env.kwargs.sim_backend",
    "env.eval.init_params.control_mode": "env.kwargs.control_mode",
    "env.train.ignore_terminations": "env.kwargs.ignore_terminations",
}
EVERY_MODE = OWN | {path for path, _, _ in schema_paths(SCHEMAS["embodied"])}
EMBODIED_SECTIONS = {path.split(".")[0] for path, _, _ in schema_paths(SCHEMAS["embodied"])}
EMBODIED_SECTIONS |= {"weight_syncer"}  # (RLinf's own top-level section)


def test_rlinfs_keys_are_mapped_spelled_as_here_or_read_in_context():
    """Every key of RLinf's example is one of: an alias, rlcore's own spelling, a key that
    follows from the mode, or one read in context (foreign/rlinf_read.py: the env's id, the
    backend, the switches accepted at one value and refused naming why at another); none is
    left for the validator to call unknown (tests/config/foreign/test_rlinf_examples.py loads
    the example itself)."""
    rest = sorted(
        k
        for k in RLINF_KEYS
        if k not in ALIASES
        and k not in EVERY_MODE
        and k not in DERIVED_KEYS  # (said: derived)
        # (a section of the reasoning mode only, reward: refused as that mode's, whole)
        and k.split(".")[0] in EMBODIED_SECTIONS
        and not read_here(k)
    )
    assert rest == []


@pytest.mark.parametrize(("rlinf", "rlcore"), sorted(RLINF_COUNTERPARTS.items()))
def test_an_rlinf_key_with_a_counterpart_is_mapped_to_it(rlinf, rlcore):
    assert rlinf in RLINF_KEYS and rlcore in ALIASES[rlinf].targets


def test_rlinfs_train_and_eval_envs_are_one_env_here(capsys):
    config = load_config(
        "embodied/cartpole_ppo",
        [
            "env.train.total_num_envs=16",
            "actor.ppo_mini_batch_size=128",
            "env.train.max_episode_steps=200",
            "env.eval.max_episode_steps=200",
            "runner.save_interval=-1",
            "runner.logger.logger_backends=[tensorboard]",
        ],
    )
    assert config.env.num_envs == 16 and config.env.kwargs == {"max_episode_steps": 200}
    assert config.runner.checkpoint_every == 0  # RLinf's -1: never
    assert (config.logger.console, config.logger.tensorboard, config.logger.wandb) == (
        False,
        True,
        False,
    )
    assert "env.train.total_num_envs (RLinf) is env.num_envs here" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"both are env.kwargs.max_episode_steps here"):
        load_config(
            "embodied/cartpole_ppo",
            ["env.train.max_episode_steps=200", "env.eval.max_episode_steps=100"],
        )
