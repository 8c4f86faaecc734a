"""The values that follow from the keys: computed once, by ``derive_keys``, when a config is
validated, and kept in its ``derived`` section, which no YAML or override sets and nothing
changes afterwards (the config is frozen).

- ``loss_type``: the mode's (embodied: ``actor_critic``, the policy and its value head in one
  backward pass; reasoning: ``actor``, the policy alone, beside a separate critic model);
- ``value_head``: the policy has a value head (embodied);
- ``critic_model``: a separate critic model is trained (reasoning: the estimator reads values);
- ``iterations``: the run's iterations (embodied: ``runner.total_env_steps`` over one
  iteration's steps, all ranks' envs together; reasoning: ``runner.total_iterations``);
- ``critic_update``, ``critic_token_budget``: the critic's update sizes and micro-batch token
  budget, each unset one taken from the actor's (reasoning);
- ``bypass_mode``: the old log-probs are the rollout's (``algorithm.rollout_correction.
  bypass_mode``, or where it is null: an asynchronous reasoning run that asks for no
  correction and no recompute pass; reasoning).

rlcore's earlier keys ``algorithm.loss_type`` and ``actor.model.add_value_head`` are accepted
with a line on stderr (``foreign/earlier.py``) when they say what is derived, and refused otherwise.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rlcore.config.sections import UpdateConfig


@dataclass(kw_only=True, frozen=True)
class Derived:
    loss_type: Literal["actor", "actor_critic"]
    value_head: bool
    critic_model: bool
    iterations: int
    critic_update: UpdateConfig | None = None
    critic_token_budget: int | None = None
    bypass_mode: bool = False


def derived_section() -> Any:
    """The ``derived`` field of a mode's top level: not a key (the validator refuses it as
    input), filled in by ``derive_keys``."""
    return dataclasses.field(
        default=None,
        metadata={"derived": True, "doc": "values that follow from the keys (derived.py)"},
    )


def is_derived(field: dataclasses.Field) -> bool:
    return bool(field.metadata.get("derived"))


def derive_keys(config: Any) -> tuple[Any, list[str]]:
    """``config`` with its ``derived`` section, and the problems of keys that contradict a
    derived value (``critic.use_critic_model`` set against the estimator)."""
    if config.mode == "embodied":
        run, env = config.runner, config.env
        iterations = max(1, run.total_env_steps // (run.rollout_steps * env.num_envs))
        derived = Derived(
            loss_type="actor_critic", value_head=True, critic_model=False, iterations=iterations
        )
        return dataclasses.replace(config, derived=derived), []
    problems: list[str] = []
    critic_model = _reads_values(config.algorithm.adv_type)
    given = config.critic.use_critic_model
    if critic_model is not None and given is not None and given != critic_model:
        adv_type = config.algorithm.adv_type
        problems.append(
            f"critic.use_critic_model: {str(given).lower()}, but adv_type {adv_type} "
            f"{'reads values from a critic' if critic_model else 'never reads values'}; "
            "leave use_critic_model out (it follows algorithm.adv_type)"
            + ("" if critic_model else ", or pick an estimator that reads values, such as gae")
        )
    derived = Derived(
        loss_type="actor",
        value_head=False,
        critic_model=bool(critic_model),
        iterations=config.runner.total_iterations,
        critic_update=_critic_update(config),
        critic_token_budget=_critic_token_budget(config),
        bypass_mode=_bypass_mode(config),
    )
    return dataclasses.replace(config, derived=derived), problems


def _reads_values(adv_type: str) -> bool | None:
    """Whether the estimator reads a critic's values; None for an unknown one (the algorithm
    checks name it)."""
    from rlcore.algorithms import ADVANTAGES

    if adv_type not in ADVANTAGES:
        return None
    return bool(ADVANTAGES.entry(adv_type).traits.get("needs_values", False))


def _bypass_mode(config: Any) -> bool:
    """``rollout_correction.bypass_mode`` as given, or when null: bypass in an asynchronous run
    that asks for no correction, no recompute pass and no estimator reading that pass (over 80
    iterations of the default task, seeds 1-3, decoupled PPO without a correction ended up to
    15 points below the synchronous run, bypass within 3 on each: docs/async.md)."""
    from rlcore.algorithms import ADVANTAGES

    corr = config.algorithm.rollout_correction
    if corr.bypass_mode is not None:
        return corr.bypass_mode
    adv = config.algorithm.adv_type
    inputs = ADVANTAGES.entry(adv).traits["inputs"] if adv in ADVANTAGES else ()
    return (
        config.runner.max_staleness > 0
        and not corr.corrects
        and not config.actor.recompute_log_probs
        and "sum_pi_squared" not in inputs
    )


def _critic_update(config: Any) -> UpdateConfig:
    """The critic's update sizes, each unset one taken from the actor's (and the actor's
    shuffle)."""
    from rlcore.config.sections import UpdateConfig

    critic, actor = config.critic, config.actor

    def pick(own: int | None, actors: int | None) -> int | None:
        return actors if own is None else own

    return UpdateConfig(
        ppo_epochs=pick(critic.ppo_epochs, actor.ppo_epochs),
        ppo_mini_batch_size=pick(critic.ppo_mini_batch_size, actor.ppo_mini_batch_size),
        ppo_micro_batch_size=pick(critic.ppo_micro_batch_size, actor.ppo_micro_batch_size),
        shuffle=actor.shuffle,
    )


def _critic_token_budget(config: Any) -> int | None:
    """The critic's micro-batch token budget: its own, or the actor's unless the critic sets
    its own micro-batch size."""
    critic = config.critic
    if critic.max_tokens_per_micro_batch is not None or critic.ppo_micro_batch_size:
        return critic.max_tokens_per_micro_batch
    return config.actor.max_tokens_per_micro_batch
