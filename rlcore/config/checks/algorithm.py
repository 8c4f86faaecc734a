"""Checks of the algorithm section: registered estimators and losses, the options a loss
reads, the KL terms, groups for group estimators, and GDPO's reward components."""

from __future__ import annotations

import math

from rlcore.algorithms import ADVANTAGES, POLICY_LOSSES
from rlcore.config.schema import AlgorithmConfig, ReasoningConfig


def _check_policy_loss(alg: AlgorithmConfig, mode: str) -> list[str]:
    """The registered policy loss against the mode and the ``policy_loss_options`` set."""
    problems: list[str] = []
    loss, name = POLICY_LOSSES.entry(alg.policy_loss), alg.policy_loss
    why_not = loss.traits.get("not_embodied")
    if mode == "embodied" and why_not:
        problems.append(f"algorithm.policy_loss: {name} cannot run in embodied mode: {why_not}")
    # An option is a loss's keyword-only parameter (Entry.extra_kwargs); the others are unread.
    options = alg.policy_loss_options
    defaults = vars(type(options)())
    for option, value in vars(options).items():
        if value == defaults[option] or option in loss.extra_kwargs:
            continue
        readers = [
            n for n in POLICY_LOSSES.names() if option in POLICY_LOSSES.entry(n).extra_kwargs
        ]
        problems.append(
            f"algorithm.policy_loss_options.{option}: {value}, but algorithm.policy_loss "
            f"{name} does not read it (read by {', '.join(readers) or 'no loss'}); remove it, "
            "or pick a loss that reads it"
        )
    if name == "dro" and options.dro_beta is None:
        problems.append(
            "algorithm.policy_loss_options.dro_beta: dro needs the weight of its log-ratio "
            "penalty (verl's has no default either); set it > 0, e.g. 0.05"
        )
    if name == "clip_cov" and options.clip_cov_lb >= options.clip_cov_ub:
        problems.append(
            f"algorithm.policy_loss_options.clip_cov_lb: {options.clip_cov_lb} is not below "
            f"clip_cov_ub {options.clip_cov_ub}, so clip_cov would cut no token; keep lb < ub"
        )
    return problems


def check_algorithm(alg: AlgorithmConfig, mode: str) -> list[str]:
    problems: list[str] = []
    for name, registry, value in (
        ("adv_type", ADVANTAGES, alg.adv_type),
        ("policy_loss", POLICY_LOSSES, alg.policy_loss),
    ):
        try:
            registry.entry(value)
        except KeyError as unknown:
            problems.append(f"algorithm.{name}: {unknown.args[0]}")
    if alg.policy_loss in POLICY_LOSSES:
        problems += _check_policy_loss(alg, mode)
    if alg.use_kl_in_reward and alg.use_kl_loss:
        problems.append(
            "algorithm.use_kl_in_reward: true together with algorithm.use_kl_loss: the reference "
            "KL would be penalised twice; keep one"
        )
    if alg.kl_penalty == "full" and alg.use_kl_in_reward:
        problems.append(
            "algorithm.kl_penalty: 'full' needs the whole vocabulary distribution, not the "
            "sampled token's log-prob the reward sees; use kl, abs, mse or low_var_kl"
        )
    if alg.kl_loss_type == "full" and alg.use_kl_loss:
        problems.append(
            "algorithm.kl_loss_type: 'full' (the KL over the whole vocabulary) is not built; the "
            "actor's loss sees the sampled tokens' log-probs: use kl, abs, mse or low_var_kl"
        )
    if alg.adv_type in ADVANTAGES:
        traits = ADVANTAGES.entry(alg.adv_type).traits
        if traits.get("needs_groups") and alg.group_size < 2 and mode == "reasoning":
            problems.append(
                f"algorithm.group_size: adv_type {alg.adv_type} compares samples within a group, "
                f"but group_size is {alg.group_size}; set group_size >= 2"
            )
    return problems


BUILT_IN_COMPONENTS = ("score", "correct", "format")  # rlcore/rewards/verdicts.py's Verdict


def check_gdpo(config: ReasoningConfig) -> list[str]:
    """GDPO's reward components: named when it runs, known to the reward, one weight each, and
    nothing else changing the reward that its components would leave out."""
    alg, reward = config.algorithm, config.reward
    keys, weights = alg.gdpo_reward_keys, alg.gdpo_reward_weights
    if alg.adv_type != "gdpo":
        given = [name for name, value in (("keys", keys), ("weights", weights)) if value]
        return [
            f"algorithm.gdpo_reward_{name}: set, but adv_type is {alg.adv_type}, and only gdpo "
            "reads it; remove it, or set algorithm.adv_type=gdpo"
            for name in given
        ]
    shaped = reward.overlong_buffer.enable
    known = [*BUILT_IN_COMPONENTS, *(["overlong_penalty"] if shaped else [])]
    if not keys:
        given = (
            "the numbers in the dict reward.rules.custom_fn returns"
            if reward.kind == "custom"
            else ", ".join(known)
        )
        return [
            "algorithm.gdpo_reward_keys: adv_type gdpo normalises each component of the reward "
            f"apart; name them, e.g. [correct, format] (kind {reward.kind} gives {given})"
        ]
    problems = []
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        problems.append(
            f"algorithm.gdpo_reward_keys: {', '.join(repeated)} named twice; name "
            "each component once (gdpo_reward_weights weighs it)"
        )
    unknown = [k for k in keys if k not in known]
    if reward.kind != "custom" and unknown:
        problems.append(
            f"algorithm.gdpo_reward_keys: {', '.join(unknown)} not given by reward.kind "
            f"{reward.kind}, which gives {', '.join(known)}"
            + ("" if shaped else " (overlong_penalty with reward.overlong_buffer.enable)")
        )
    if weights is not None:
        if len(weights) != len(keys):
            problems.append(
                f"algorithm.gdpo_reward_weights: {len(weights)} weights for "
                f"{len(keys)} gdpo_reward_keys; give one per key, in the same order"
            )
        elif not all(math.isfinite(w) for w in weights):
            problems.append(f"algorithm.gdpo_reward_weights: {weights}: weights must be finite")
    if shaped and "overlong_penalty" not in keys:
        problems.append(
            "reward.overlong_buffer.enable: gdpo's advantage is made of the components in "
            "algorithm.gdpo_reward_keys only, so the overlong penalty would be ignored; add "
            "overlong_penalty to gdpo_reward_keys, or disable the buffer"
        )
    if alg.use_kl_in_reward:
        problems.append(
            "algorithm.use_kl_in_reward: gdpo's advantage is made of the reward components "
            "only, so an in-reward KL penalty would be ignored; use algorithm.use_kl_loss=true"
        )
    return problems
