"""Batch helpers: padding, positions and the response mask, against hand-written values."""

import torch

from rlcore.workers.lm_batch import concat, left_pad, position_ids, response_mask, split


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


def test_split_and_concat_round_trip_with_lists_alongside():
    batch = {"x": torch.arange(6), "answers": list("abcdef")}
    shards = split(batch, 3)
    assert [s["answers"] for s in shards] == [["a", "b"], ["c", "d"], ["e", "f"]]
    merged = concat(shards)
    assert merged["x"].tolist() == list(range(6)) and merged["answers"] == list("abcdef")
