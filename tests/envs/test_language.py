"""An observation that breaks its language env's own spaces (an instruction too long or with a
character outside the ``Text`` space's set, a state of another size) is named in one line, with
what its space expects, where it is flattened, instead of a numpy error mid-run."""

import numpy as np
import pytest

from rlcore.envs import EnvError
from rlcore.envs.color_reach import CHARSET, ColorReach
from rlcore.envs.language import TextObservation, decode_instructions


class _Saying(ColorReach):
    """color_reach whose observations are changed by ``change`` after each reset."""

    def __init__(self, change):
        super().__init__()
        self.change = change

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return self.change(obs), info


def test_a_well_formed_observation_flattens_and_reads_back():
    env = TextObservation(_Saying(lambda obs: obs))
    flat, _ = env.reset(seed=0)
    raw, _ = ColorReach().reset(seed=0)
    assert decode_instructions(flat[None, :32], CHARSET) == [raw["instruction"]]
    assert np.array_equal(flat[32:], raw["state"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda obs: {**obs, "instruction": "reach " * 6},
            r"its instruction has 36 characters \('reach reach .*'\.\.\.\), its Text space's "
            r"max_length is 32; shorten it, or raise the space's max_length$",
        ),
        (
            lambda obs: {**obs, "instruction": "reach the RED target!"},
            r"its instruction 'reach the RED target!' holds '!DER', outside its Text space's "
            r"character set \('abcdefghijklmnopqrstuvwxyz '\); add them to the space's charset, "
            r"or leave them out of the instruction$",
        ),
        (
            lambda obs: {**obs, "state": obs["state"][:3]},
            r"its 'state' holds 3 values per observation \(shape \(3,\)\), its space 8; give the "
            r"'state' the space's shape$",
        ),
        (
            lambda obs: {"state": obs["state"]},
            r"has no 'instruction' entry; give a Dict observation with 'instruction'",
        ),
    ],
    ids=["too-long", "outside-charset", "state-size", "no-instruction"],
)
def test_an_observation_outside_its_spaces_is_named_in_one_line(change, message):
    assert CHARSET == "abcdefghijklmnopqrstuvwxyz "  # (the messages above quote it)
    env = TextObservation(_Saying(change))
    with pytest.raises(EnvError, match=r"^env _Saying's observation:? " + message) as refused:
        env.reset(seed=0)
    assert "\n" not in str(refused.value)
