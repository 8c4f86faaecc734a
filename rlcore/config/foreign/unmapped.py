"""verl's and RLinf's keys that rlcore has no counterpart for: the validator's one-line problem
for each, where it would otherwise call the key unknown or guess at a near rlcore key."""

from __future__ import annotations

import difflib

from rlcore.config.foreign import ALIASES
from rlcore.config.foreign.key_lists import RLINF_KEYS, RLINF_SOURCE, VERL_KEYS, VERL_VERSION
from rlcore.config.foreign.verl import WAYS_ON, foreign_section

# every section that holds verl's or RLinf's keys (``critic.profiler``, ``env.train`` ...): a
# mapping under one is named key by key
FOREIGN_KEY_SECTIONS = frozenset(
    key.rsplit(".", i)[0] for key in VERL_KEYS | RLINF_KEYS for i in range(1, key.count(".") + 1)
)


def in_foreign_section(path: str) -> str | None:
    """The problem for ``path``, a key under a top-level section only another framework has
    (``trainer.*``) that is not one of its aliases: no counterpart, with the alias beside it
    that it may misspell; ``None`` for a key under any other section."""
    origin = foreign_section(path)
    if origin is None:
        return None
    parent, _, leaf = path.rpartition(".")
    siblings = {a.rpartition(".")[2]: a for a in ALIASES if a.rpartition(".")[0] == parent}
    near = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.8)
    # (a key verl has is no misspelling of another)
    hint = f"; did you mean '{siblings[near[0]]}'?" if near and path not in VERL_KEYS else ""
    way = f"; {WAYS_ON[path]}" if WAYS_ON.get(path) else ""
    return (
        f"{path}: {origin}'s key has no rlcore counterpart{hint}{way} (the {origin} keys rlcore "
        "accepts are listed in docs/config.md)"
    )


def no_counterpart(path: str) -> str | None:
    """The problem for ``path`` when it is RLinf's or verl's key under a section rlcore has too
    (``actor``, ``env``, ``data``, ``critic`` ...); ``None`` for any other key."""
    if path in RLINF_KEYS:  # (under a section both have: actor, env, runner, rollout)
        return (
            f"{path}: RLinf's key ({RLINF_SOURCE}) has no rlcore counterpart (the RLinf keys "
            "rlcore accepts are listed in docs/config.md)"
        )
    if path in VERL_KEYS:  # (under a section both have: data, critic, algorithm, reward)
        way = f"; {WAYS_ON[path]}" if path in WAYS_ON else ""
        return (
            f"{path}: verl's key (verl {VERL_VERSION}) has no rlcore counterpart{way} (the verl "
            "keys rlcore accepts are listed in docs/config.md)"
        )
    return None
