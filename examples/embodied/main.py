"""Embodied RL: policies acting in simulators.

    python examples/embodied/main.py [--config NAME|PATH] [key=value ...]

The default config is configs/embodied/cartpole_ppo.yaml;
overrides are Hydra-style (``algorithm.gamma=0.98``).
"""

import sys

from rlcore.cli import run_entry_point

if __name__ == "__main__":
    sys.exit(run_entry_point("embodied/cartpole_ppo"))
