"""Reward functions written as TRL's (``def f(completions, **kwargs) -> list[float]``), for
tests/rewards/test_trl_rewards.py: TRL calls them batched, with ``prompts``, ``completions`` and
the dataset's columns as keyword arguments."""


def ends_with_answer(completions, answer, **kwargs):
    return [1.0 if c.strip().endswith(a) else 0.0 for c, a in zip(completions, answer, strict=True)]


def prompt_and_completion_lengths(prompts, completions, **kwargs):
    return [100.0 * len(p) + len(c) for p, c in zip(prompts, completions, strict=True)]


def by_solution_column(completions, solution, **kwargs):
    return [{"score": 2.0, "correct": c == s} for c, s in zip(completions, solution, strict=True)]


def every_keyword(completions, **kwargs):
    return [float(len(kwargs["data_source"][0] or "")) for _ in completions]


def needs_completion_ids(completions, completion_ids):
    return [float(len(ids)) for ids in completion_ids]


def two_for_one(completions, **kwargs):
    return [1.0, 2.0]


def one_argument(text):
    return 1.0
