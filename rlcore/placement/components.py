"""Which components a config runs: required, optional, and those it does not use."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcore.config.schema import EmbodiedConfig, RLCoreConfig

COMPONENTS = {
    "embodied": ("actor", "rollout", "env"),
    "reasoning": ("actor", "critic", "ref", "rollout", "reward"),
}


@dataclass(frozen=True)
class ComponentRoles:
    """``required`` must be placed; ``optional`` may be; ``unused`` maps a name to why it is not."""

    mode: str
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    unused: dict[str, str] = field(default_factory=dict)

    @property
    def known(self) -> tuple[str, ...]:
        return COMPONENTS[self.mode]


def component_roles(config: RLCoreConfig) -> ComponentRoles:
    if isinstance(config, EmbodiedConfig):
        return ComponentRoles("embodied", ("actor", "rollout", "env"))
    alg = config.algorithm
    required = ["actor", "rollout", "reward"]
    unused = {}
    if config.derived.critic_model:
        required.insert(1, "critic")
    else:
        unused["critic"] = f"adv_type {alg.adv_type} needs no values"
    if (alg.kl_reward_on or alg.kl_loss_on) and config.actor.model.lora.rank:
        unused["ref"] = "the reference is the actor's base model with its LoRA adapters off"
    elif alg.kl_reward_on or alg.kl_loss_on:
        required.insert(2 if "critic" in required else 1, "ref")
    elif alg.use_kl_in_reward or alg.use_kl_loss:  # its pass would be multiplied by 0
        unused["ref"] = "the reference KL's coefficient (kl_loss_coef, kl_ctrl.kl_coef) is 0"
    else:
        unused["ref"] = "no reference KL (use_kl_in_reward and use_kl_loss are false)"
    return ComponentRoles("reasoning", tuple(required), unused=unused)
