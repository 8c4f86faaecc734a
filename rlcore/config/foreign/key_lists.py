"""The other frameworks' full key lists, kept as data files beside this module (one key a line,
``#`` comments): every key verl's PPO trainer and RLinf's embodied PPO example read. rlcore maps
those it has a counterpart for (``verl.py``, ``rlinf.py``); the validator names the rest as the
other framework's keys with no counterpart, where it would otherwise call them unknown or guess
at a near rlcore key (tests/config/test_verl_keys.py walks them all)."""

from __future__ import annotations

from importlib.resources import files

VERL_VERSION = "0.9.1"
RLINF_SOURCE = "RLinf's examples/embodiment/config/maniskill_ppo_mlp.yaml"


def read_key_list(name: str) -> frozenset[str]:
    """The keys of the data file ``name`` in this package: every line but blanks and ``#``
    comments, stripped."""
    text = files(__package__).joinpath(name).read_text(encoding="utf-8")
    lines = (line.strip() for line in text.splitlines())
    return frozenset(line for line in lines if line and not line.startswith("#"))


VERL_KEYS: frozenset[str] = read_key_list("verl_keys.txt")
RLINF_KEYS: frozenset[str] = read_key_list("rlinf_keys.txt")
