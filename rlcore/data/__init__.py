"""Prompts for reasoning runs: the shipped arithmetic task, and parquet/jsonl files.

Names are imported on first use, so ``rlcore.data.answers`` (which the scoring processes read
answers with) comes without the config package and torch.
"""

from __future__ import annotations

from rlcore.lazy import lazy_exports

_WHERE = {
    "DataError": "rlcore.data.prompts",
    "PromptSet": "rlcore.data.prompts",
    "load_prompt_rows": "rlcore.data.prompts",
    "arithmetic_problems": "rlcore.data.arith",
    "extract_gsm8k_answer": "rlcore.data.answers",
    "parse_number": "rlcore.data.answers",
}

__all__ = sorted(_WHERE)

__getattr__ = lazy_exports("rlcore.data", _WHERE)
