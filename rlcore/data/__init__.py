"""Prompts for reasoning runs: the shipped arithmetic task, and parquet/jsonl files.

Names are imported on first use, so ``rlcore.data.answers`` (which the scoring processes read
answers with) comes without the config package and torch.
"""

from __future__ import annotations

from rlcore.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "prompts": ("DataError", "PromptSet", "load_prompt_rows"),
        "arith": ("arithmetic_problems",),
        "answers": ("extract_gsm8k_answer", "parse_number"),
    },
)
