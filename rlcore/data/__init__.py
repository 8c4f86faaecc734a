"""Prompts for reasoning runs: the shipped arithmetic task, and parquet/jsonl files."""

from rlcore.data.answers import extract_gsm8k_answer, parse_number
from rlcore.data.arith import arithmetic_problems
from rlcore.data.prompts import DataError, PromptSet, load_prompt_rows

__all__ = [
    "DataError",
    "PromptSet",
    "arithmetic_problems",
    "extract_gsm8k_answer",
    "load_prompt_rows",
    "parse_number",
]
