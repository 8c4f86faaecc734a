"""ReMax's baseline: the reward of the greedy response to each prompt of a batch of groups."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict

from rlcore.columns import ANSWERS, ATTENTION_MASK, INDEX, INPUT_IDS, RESPONSES, SCORES


def greedy_baselines(
    batch: TensorDict,
    size: int,
    whole_shards: Callable[[list[int]], list[int]],
    generate: Callable[[TensorDict], TensorDict],
    score: Callable[[TensorDict], TensorDict],
) -> torch.Tensor:
    """``[B]``: the score of the greedy response to each row's prompt, generated once per
    group of ``size`` rows (greedy decoding draws nothing from the sampler's RNG).

    ``whole_shards``: the group rows padded to whole shards of the rollout and reward ranks;
    ``generate``: greedy responses to prompts; ``score``: their scores.
    """
    prompt_width = batch[INPUT_IDS].shape[1] - batch[RESPONSES].shape[1]
    firsts = batch[::size]
    prompts = TensorDict(
        {
            INPUT_IDS: firsts[INPUT_IDS][:, :prompt_width],
            ATTENTION_MASK: firsts[ATTENTION_MASK][:, :prompt_width],
            INDEX: firsts[INDEX],
        },
        batch_size=firsts.batch_size,
    )
    prompts[ANSWERS] = firsts[ANSWERS]
    groups = prompts.batch_size[0]
    padded = prompts[whole_shards(list(range(groups)))]
    greedy = padded.update(generate(padded))
    return score(greedy)[SCORES][:groups].repeat_interleave(size)
