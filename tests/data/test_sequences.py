"""Batch helpers: padding, positions and the response mask, against hand-written values."""

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from rlcore.data.sequences import left_pad, position_ids, response_mask
from rlcore.scheduler.handles import concat, split_batch


def test_left_pad_right_aligns_prompts():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert position_ids(mask).tolist() == [[0, 1, 2], [0, 0, 0]]


def test_response_mask_keeps_tokens_up_to_and_including_the_first_eos():
    responses = torch.tensor([[4, 5, 2, 2, 2], [4, 2, 7, 2, 9], [4, 5, 6, 7, 8], [2, 0, 0, 0, 0]])
    assert response_mask(responses, 2).tolist() == [
        [1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0],
    ]  # fmt: skip
    assert response_mask(torch.tensor([[4, 3, 9]]), [2, 3]).tolist() == [[1, 1, 0]]


def test_a_batch_splits_over_ranks_and_joins_back_with_its_answers_alongside():
    batch = TensorDict({"x": torch.arange(6)}, batch_size=[6])
    batch["answers"] = NonTensorStack(*"abcdef")
    shards = split_batch(batch, 3, "test")
    assert [list(s["answers"]) for s in shards] == [["a", "b"], ["c", "d"], ["e", "f"]]
    assert [s["x"].tolist() for s in shards] == [[0, 1], [2, 3], [4, 5]]
    merged = concat(shards)
    assert merged["x"].tolist() == list(range(6)) and list(merged["answers"]) == list("abcdef")


def test_a_batch_that_ranks_cannot_share_evenly_is_refused_naming_the_call():
    with pytest.raises(ValueError, match=r"actor.update: a batch of 5 cannot be split evenly"):
        split_batch(TensorDict({"x": torch.arange(5)}, batch_size=[5]), 2, "actor.update")
