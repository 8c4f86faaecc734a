"""The vocabularies foreign to rlcore's schema, and their translation into it.

- ``verl.py``, ``rlinf.py``: verl's and RLinf's spellings of rlcore keys (full key paths, each
  the rlcore key(s) it means, with a conversion and a note where the meaning differs);
- ``earlier.py``: rlcore's own earlier spellings, the keys that now follow from the mode, and
  ``current_keys`` for a config a run folder kept;
- ``key_lists.py``: every key verl's PPO trainer and RLinf's example read, from the data files
  ``verl_keys.txt`` and ``rlinf_keys.txt``, so a key with no counterpart is named as theirs;
- ``unmapped.py``: the validator's line for their keys with no rlcore counterpart;
- ``near_misses.py``: other frameworks' option names written under rlcore's sections, for
  "rlcore calls it ..." hints (not accepted);
- ``translate.py``: the loader's passes that rewrite a composed config's foreign spellings into
  rlcore's keys, each said in one line.

``ALIASES`` gathers every accepted spelling, in the order the loader applies them.
"""

from rlcore.config.foreign.alias import Alias
from rlcore.config.foreign.earlier import DERIVED_KEYS, EARLIER_ALIASES, current_keys
from rlcore.config.foreign.rlinf import RLINF_ALIASES
from rlcore.config.foreign.verl import TOKEN_BUDGETS, VERL_ALIASES, foreign_section

ALIASES: dict[str, Alias] = VERL_ALIASES | RLINF_ALIASES | EARLIER_ALIASES

__all__ = ["ALIASES", "DERIVED_KEYS", "TOKEN_BUDGETS", "Alias", "current_keys", "foreign_section"]
