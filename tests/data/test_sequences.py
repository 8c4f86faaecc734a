"""Batch helpers: padding, positions and the response mask, against hand-written values."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import NonTensorStack, TensorDict

from rlcore.data.packing import prompt_copies
from rlcore.data.sequences import (
    concat_generated,
    left_pad,
    position_ids,
    response_mask,
    token_budget_split,
    trim_padding,
)
from rlcore.scheduler.handles import concat, split_batch


def test_left_pad_right_aligns_prompts():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert position_ids(mask).tolist() == [[0, 1, 2], [0, 0, 0]]


def test_response_mask_keeps_tokens_up_to_and_including_the_first_eos():
    responses = torch.tensor([[4, 5, 2, 2, 2], [4, 2, 7, 2, 9], [4, 5, 6, 7, 8], [2, 0, 0, 0, 0]])
    assert response_mask(responses, 2).tolist() == [
        [1, 1, 1, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1],
        [1, 0, 0, 0, 0],
    ]
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


def layout(prompt_lengths, response_lengths, width=6):
    """A batch of left-padded prompts and right-padded responses of the given lengths."""
    ids, mask = left_pad([[7] * n for n in prompt_lengths], 0)
    responses = torch.zeros(len(prompt_lengths), width, dtype=torch.long)
    resp_mask = torch.zeros_like(responses)
    for row, n in enumerate(response_lengths):
        responses[row, :n], resp_mask[row, :n] = 5, 1
    attention = torch.cat([mask, resp_mask], 1)
    tensors = {
        "input_ids": torch.cat([ids, responses], 1),
        "attention_mask": attention,
        "position_ids": position_ids(attention),
        "responses": responses,
        "response_mask": resp_mask,
        "advantages": resp_mask.float(),
    }
    return TensorDict(tensors, batch_size=[len(prompt_lengths)])


@given(
    lengths=st.lists(st.tuples(st.integers(1, 9), st.integers(1, 6)), min_size=1, max_size=12),
    budget=st.integers(1, 60),
)
def test_token_micro_batches_hold_every_row_once_within_the_budget(lengths, budget):
    batch = layout([p for p, _ in lengths], [r for _, r in lengths])
    parts = token_budget_split(batch, budget)
    assert sorted(torch.cat(parts).tolist()) == list(range(len(lengths)))
    for rows in parts:
        whole, cut = batch[rows], trim_padding(batch[rows])
        mine = [lengths[i] for i in rows.tolist()]
        # the cut holds exactly the longest prompt and response of its rows, no more
        assert cut["input_ids"].shape[1] == max(p for p, _ in mine) + max(r for _, r in mine)
        assert cut["input_ids"].numel() <= budget or len(rows) == 1
        # no real token is lost, and the positions stay those of the uncut rows
        real, kept = whole["attention_mask"].bool(), cut["attention_mask"].bool()
        assert cut["position_ids"][kept].tolist() == whole["position_ids"][real].tolist()
        assert cut["advantages"].shape == cut["responses"].shape


def test_prompt_copies_name_each_rows_first_row_of_the_same_prompt():
    """Rows 0, 2 and 3 hold one prompt, rows 1 and 4 another, row 5 a third (whatever their
    responses); rows of distinct prompts have no copies."""
    batch = layout([3, 4, 3, 3, 4, 2], [1, 2, 3, 4, 5, 6])
    firsts, copy_of = prompt_copies(batch)
    assert [int(firsts[i]) for i in copy_of] == [0, 1, 0, 0, 1, 5]
    assert prompt_copies(batch[torch.tensor([0, 1, 5])]) is None


def test_generated_batches_with_prompts_of_other_widths_join_as_one():
    """Dynamic sampling joins generation batches whose longest prompts differ: each keeps its
    tokens and positions, left-padded to the widest."""
    short, wide = layout([2, 3], [4, 1]), layout([5, 1], [2, 6])
    joined = concat_generated([short, wide], pad_id=0)
    assert joined["input_ids"].shape == (4, 5 + 6) and joined["responses"].shape == (4, 6)
    for rows, part in ((slice(0, 2), short), (slice(2, 4), wide)):
        got, want = joined[rows], part
        real, kept = want["attention_mask"].bool(), got["attention_mask"].bool()
        assert got["input_ids"][kept].tolist() == want["input_ids"][real].tolist()
        assert got["position_ids"][kept].tolist() == want["position_ids"][real].tolist()
        assert torch.equal(got["responses"], want["responses"])


def test_packing_lays_sequences_end_to_end_with_positions_restarting():
    """Sequences of 5, 2 and 3 tokens (prompts of 2, 1 and 1; responses of 3, 1 and 2, width 3)
    in rows as long as the longest, first fit by decreasing length: 5 alone, then 3 and 2."""
    from rlcore.data.packing import pack

    ids = torch.tensor([[0, 11, 12, 13, 14, 15], [0, 0, 21, 22, 0, 0], [0, 0, 31, 32, 33, 0]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0], [0, 0, 1, 1, 1, 0]])
    batch = TensorDict(
        {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": position_ids(mask),
            "responses": ids[:, 3:],
            "response_mask": mask[:, 3:],
        },
        batch_size=[3],
    )
    packed = pack(batch, pad_id=9)
    assert packed.input_ids.tolist() == [[11, 12, 13, 14, 15], [31, 32, 33, 21, 22]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 0, 1]]
    # flat index of the token before each response token; past a response's end, its last one's
    assert packed.predictors.tolist() == [[1, 2, 3], [8, 8, 8], [5, 6, 6]]
    one = pack(batch, one_row=True, pad_id=9)
    assert one.input_ids.tolist() == [[11, 12, 13, 14, 15, 21, 22, 31, 32, 33]]
    assert one.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 0, 1, 2]]
    assert one.predictors.tolist() == [[1, 2, 3], [5, 5, 5], [7, 8, 8]]
    assert one.kept_columns().tolist() == [1, 2, 3, 5, 7, 8]
    # a partly filled row ends in padding with positions 0: each pad token its own sequence
    short = pack(batch[[0, 1]], pad_id=9)
    assert short.input_ids.tolist() == [[11, 12, 13, 14, 15], [21, 22, 9, 9, 9]]
    assert short.position_ids.tolist() == [[0, 1, 2, 3, 4], [0, 1, 0, 0, 0]]
    with pytest.raises(ValueError, match="no prompt token"):
        pack(
            batch[[1]]
            .apply(lambda t: t, batch_size=[1])
            .update({"attention_mask": torch.tensor([[0, 0, 0, 1, 0, 0]])})
        )
