"""Rule-based rewards for reasoning runs: GSM8K numbers, math answers via math-verify, or a
user's function. Model output is only parsed, never executed, and parsing has a time limit."""

from rlcore.rewards.rules import gsm8k_correct, load_custom_fn, math_correct
from rlcore.rewards.worker import RewardWorker

__all__ = ["RewardWorker", "gsm8k_correct", "load_custom_fn", "math_correct"]
