"""Every key of verl 0.9.1's PPO trainer config (rlcore/config/verl_keys.py, read from verl's
wheel) meets one of three answers: mapped to rlcore's key(s) with a line (``aliases.py`` and the
pairs ``load.py`` reads together), spelled as rlcore spells it, or refused as verl's key with no
rlcore counterpart; never "unknown key" or a guess at a near rlcore key. The keys with a
counterpart (the table below, by reading both) must be among the mapped ones."""

import textwrap

import pytest
import yaml

from rlcore.config import ConfigError, load_config
from rlcore.config.aliases import ALIASES, TOKEN_BUDGETS
from rlcore.config.schema import SCHEMAS
from rlcore.config.validate import schema_paths
from rlcore.config.verl_keys import VERL_KEYS

# verl keys read together with another by the loader (load.py): the token budgets and verl's
# custom reward function
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
    "custom_reward_function.path": "reward.custom_fn",
    "custom_reward_function.name": "reward.custom_fn",
    "actor_rollout_ref.actor.optim.lr": "actor.optim.lr",
    "actor_rollout_ref.actor.optim.clip_grad": "actor.optim.max_grad_norm",
    "actor_rollout_ref.actor.optim.lr_warmup_steps": "actor.optim.warmup_steps",
    "actor_rollout_ref.actor.optim.lr_scheduler_type": "actor.optim.decay",
    "critic.optim.clip_grad": "critic.optim.max_grad_norm",
    "critic.optim.lr_warmup_steps": "critic.optim.warmup_steps",
    "actor_rollout_ref.actor.use_remove_padding": "actor.model.use_remove_padding",
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
    return path in ALIASES or path in PAIRED


def the_rest():
    """The verl keys neither mapped nor spelled as rlcore does, and a YAML tree setting each."""
    rest = sorted(k for k in VERL_KEYS if not mapped(k) and k not in OWN)
    tree = {}
    for path in rest:
        *parents, leaf = path.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = 1
    return rest, tree


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
        assert verl in PAIRED and rlcore in {*TOKEN_BUDGETS, "reward.custom_fn"}
