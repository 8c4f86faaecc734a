"""DAPO's overlong reward shaping, by hand: no penalty up to the buffer, then linear to -factor."""

import pytest
import torch

from rlcore.config import load_config
from rlcore.config.errors import ConfigError
from rlcore.rewards.worker import overlong_penalty


def test_the_penalty_grows_linearly_through_the_buffer():
    # limit 20 tokens, buffer 8: free up to 12, then -0.5 per 8 tokens (factor 0.5)
    lengths = torch.tensor([1, 12, 13, 16, 20])
    expected = [0.0, 0.0, -0.5 / 8, -0.5 * 4 / 8, -0.5]
    assert overlong_penalty(lengths, 20, 8, 0.5).tolist() == pytest.approx(expected)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["reward.overlong_buffer.enable=true"], "reward.overlong_buffer.len: 0, but the buffer"),
        (
            ["reward.overlong_buffer.enable=true", "reward.overlong_buffer.len=100000"],
            "must hold 1 to data.max_response_length",
        ),
        (["reward.overlong_buffer.len=4"], "enable is false, so nothing would use them"),
    ],
)
def test_a_buffer_that_cannot_work_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("reasoning/tiny_arith_ppo", overrides)
