"""verl's and RLinf's key lists, read from their data files: one dotted key a line, none given
twice (a set would merge a repeated line without a word), comments not read as keys."""

from importlib.resources import files

import pytest

from rlcore.config.foreign.key_lists import RLINF_KEYS, VERL_KEYS


@pytest.mark.parametrize(
    ("name", "keys"), [("verl_keys.txt", VERL_KEYS), ("rlinf_keys.txt", RLINF_KEYS)]
)
def test_every_line_of_a_key_list_is_one_dotted_key_given_once(name, keys):
    text = files("rlcore.config.foreign").joinpath(name).read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(lines) == len(set(lines)) == len(keys)
    assert all("." in key and key == key.strip() and " " not in key for key in keys)


def test_the_key_lists_hold_the_keys_the_aliases_are_named_after():
    assert {"actor_rollout_ref.rollout.n", "trainer.logger", "algorithm.lam"} <= VERL_KEYS
    assert {"runner.val_check_interval", "algorithm.update_epoch"} <= RLINF_KEYS
