"""``python3 -m verl.trainer.main_ppo KEY=VALUE ...`` as rlcore runs it: the overrides, verl's
spellings and all, given to rlcore's reasoning entry point (examples/reasoning/main.py's), on its
default config. On the path only in tests, so verl's example scripts run unchanged."""

import sys

from rlcore.cli import run_entry_point

if __name__ == "__main__":
    sys.exit(run_entry_point("reasoning/tiny_arith_ppo", sys.argv[1:]))
