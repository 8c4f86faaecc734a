"""Reasoning RL: an LLM trained with PPO/GRPO on rule rewards.

    python examples/reasoning/main.py [--config NAME|PATH] [key=value ...]

The default config is configs/reasoning/tiny_arith_ppo.yaml;
overrides are Hydra-style (``algorithm.gamma=0.98``).
"""

import sys

from rlcore.cli import run_entry_point

if __name__ == "__main__":
    sys.exit(run_entry_point("reasoning/tiny_arith_ppo"))
