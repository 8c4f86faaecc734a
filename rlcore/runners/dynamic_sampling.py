"""DAPO's dynamic sampling (``algorithm.filter_groups``): a batch of groups whose responses
differ, generated batch by batch.

Groups whose responses all score alike give a group baseline no signal; with the rule enabled
they are dropped and more prompts generated until ``data.train_batch_size`` groups are kept, at
most ``max_num_gen_batches`` generation batches; the extra kept groups of the last batch are left
out (as verl does). Without it, one generation batch is the batch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict

from rlcore.columns import CORRECT, JUDGED, LOSS_MASK, SCORES
from rlcore.config.errors import ConfigError
from rlcore.config.sections import FilterGroupsConfig
from rlcore.data.sequences import concat_generated


def generate_groups(
    rule: FilterGroupsConfig,
    wanted: int,
    size: int,
    pad_id: int,
    prompts: Callable[[int], TensorDict],
    generate_and_score: Callable[[TensorDict], tuple[TensorDict, TensorDict]],
) -> tuple[TensorDict, TensorDict, dict[str, float]]:
    """``(batch, scored, metrics)`` of ``wanted`` groups of ``size`` responses.

    ``prompts(k)``: the prompts of generation batch ``k`` (from 0), ``wanted`` groups of ``size``
    rows, each group's ``index`` its own over all the batches; ``generate_and_score``: its
    responses and their scores. ``metrics``: ``sampling/generated_tokens`` (every batch's,
    dropped groups included) and, with the rule, how many batches it took and the share of
    groups kept.
    """
    kept: list[tuple[TensorDict, TensorDict]] = []
    groups = generations = generated = 0
    while True:
        batch, scored = generate_and_score(prompts(generations))
        generations += 1
        generated += int(batch[LOSS_MASK].sum())
        if not rule.enable:
            return batch, scored, {"sampling/generated_tokens": float(generated)}
        varied = varied_groups(scored, rule.metric, size)
        kept.append((batch[varied], scored[varied]))
        groups += int(varied.sum()) // size
        if groups >= wanted:
            break
        if rule.max_num_gen_batches and generations >= rule.max_num_gen_batches:
            raise ConfigError(
                f"algorithm.filter_groups: {generations} generation batches kept {groups} of "
                f"the {wanted} groups wanted with varied {rule.metric}; the prompts are too "
                "hard or too easy for the policy: raise max_num_gen_batches (0 = no limit) "
                "or change the data"
            )
    rows = wanted * size
    batch = concat_generated([b for b, _ in kept], pad_id)[:rows]
    scored = torch.cat([s for _, s in kept])[:rows]
    metrics = {
        "sampling/generation_batches": float(generations),
        "sampling/kept_group_share": groups / (generations * wanted),
        "sampling/generated_tokens": float(generated),
    }
    return batch, scored, metrics


def varied_groups(scored: TensorDict, metric: str, size: int) -> torch.Tensor:
    """``[B]`` bool: rows of groups (``size`` consecutive rows) whose ``metric`` differs within
    the group: ``acc`` the verdicts, ``score`` the scores (DAPO's dynamic sampling keeps them)."""
    if metric == "acc":
        if not bool(scored[JUDGED].all()):
            raise ConfigError(
                "algorithm.filter_groups.metric: acc needs the scorer's verdicts, and the custom "
                "reward returns bare numbers; use metric=score, or return {'score', 'correct'}"
            )
        values = scored[CORRECT].float()
    else:
        values = scored[SCORES].float()
    grouped = values.reshape(-1, size)
    varied = (grouped != grouped[:, :1]).any(-1)
    return varied.repeat_interleave(size)
