"""An env step stuck in C code in the driver's own process ends the process in one line naming
the env, the limit and the stuck frame (last_words.py's watcher), not 30 lines of stacks."""

import inspect
import os
import sys
from pathlib import Path

from rlcore.scheduler.last_words import LAST_WORDS_ENV
from tests import forked
from tests.scheduler.components import StuckInC

REPO = Path(__file__).resolve().parents[2]

# The driver's side of a run with in-process envs: no last-words folder, the step under
# env.step_timeout_s (1 s: a loaded machine can take 0.2 s before the stuck step's C call, and
# the timer would then end it in Python), the watchdog 1 s after it.
STUCK_DRIVER = """
import gymnasium as gym, numpy as np
from rlcore.envs.vector import reset_within, step_within
from rlcore.scheduler import last_words
from tests.scheduler.components import StuckInC
last_words.WATCHDOG_GRACE_S = 0.3
envs = gym.vector.SyncVectorEnv([StuckInC])
reset_within(envs, 0, 1.0, "env 'StuckInC' rank 0, reset")
for step in range(5):
    step_within(envs, np.zeros(1, np.int64), 1.0, f"env 'StuckInC' rank 0, step {step}")
print("never reached", flush=True)
"""


def test_a_step_stuck_in_c_in_the_drivers_process_ends_it_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != LAST_WORDS_ENV}
    done = forked.run(
        [sys.executable, "-c", STUCK_DRIVER],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1  # faulthandler's exit
    assert "never reached" not in done.stdout
    line = inspect.getsourcelines(StuckInC.step)[1] + 3  # the sum(...) line
    pid = done.stderr.split("pid ", 1)[1].split(")", 1)[0]
    assert done.stderr.splitlines() == [
        f"rlcore: error: env 'StuckInC' rank 0 (in the driver's process, pid {pid}): its "
        "watchdog ended it: a call was still running after 2 s at "
        f"{inspect.getsourcefile(StuckInC)}:{line} in step, in code that a timeout cannot "
        "interrupt (C code holding the GIL); fix that code, or raise the limit "
        "(env.step_timeout_s)"
    ]
