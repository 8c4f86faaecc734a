"""Reading prompt files (parquet or jsonl, through ``datasets``) and turning rows into token ids.

Every problem with the data is a ``DataError`` naming the file and the key or row: a missing
file, an empty one, a missing field, a GSM8K answer with no number. Prompts longer than
``data.max_prompt_length`` tokens are dropped and counted, never truncated (a truncated question
is a different question).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcore.data.answers import extract_gsm8k_answer, parse_number

READERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}


class DataError(ValueError):
    """Bad data: the message names the file and the key or row, and the fix."""


def _read(path: str, what: str) -> list[dict[str, Any]]:
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(f"{what}: {path} does not exist (or is not a file)")
    reader = READERS.get(file.suffix)
    if reader is None:
        raise DataError(f"{what}: {path} is neither .parquet nor .jsonl; convert it to one")
    if file.stat().st_size == 0:
        raise DataError(f"{what}: {path} is empty")
    import datasets

    datasets.disable_progress_bars()
    try:
        table = datasets.load_dataset(reader, data_files=str(file), split="train")
    except Exception as error:  # datasets raises many types for one cause: an unreadable file
        raise DataError(f"{what}: cannot read {path} as {reader}: {error}") from None
    if len(table) == 0:
        raise DataError(f"{what}: {path} has no rows")
    return table.to_list()


def load_prompt_rows(
    files: list[str], what: str, prompt_key: str, answer_key: str, answer_format: str
) -> list[dict[str, str]]:
    """``[{"prompt": ..., "answer": ...}]`` from ``files``; ``what`` names the config key."""
    rows = []
    for path in files:
        for number, row in enumerate(_read(path, what)):
            for field in (prompt_key, answer_key):
                if field not in row:
                    have = ", ".join(sorted(row))
                    setting = "data.prompt_key" if field == prompt_key else "data.answer_key"
                    raise DataError(
                        f"{path}: row {number} has no field '{field}' ({setting}); "
                        f"its fields: {have}"
                    )
                value = row[field]
                if value is None or (isinstance(value, str) and not value.strip()):
                    raise DataError(
                        f"{path}: row {number}: the '{field}' field is "
                        f"{'null' if value is None else 'empty'}; give every row a "
                        f"{'prompt' if field == prompt_key else 'answer'} or drop it"
                    )
                if isinstance(value, bool):  # (an int to Python: str() would give "True")
                    raise DataError(
                        f"{path}: row {number}: the '{field}' field is the boolean "
                        f'{str(value).lower()}, not text; write it as a string ("yes", '
                        '"true", ...) as the reward compares it'
                    )
                if not isinstance(value, str | int | float):
                    hint = (
                        (
                            " (chat messages, as in verl's files? rlcore reads the text and "
                            "applies the chat template itself: point data.prompt_key at the "
                            "question's text)"
                        )
                        if isinstance(value, list)
                        else ""
                    )
                    raise DataError(
                        f"{path}: row {number}: the '{field}' field is a "
                        f"{type(value).__name__}, not text{hint}"
                    )
            answer = str(row[answer_key])
            if answer_format == "gsm8k":
                written = extract_gsm8k_answer(answer)
                if written is None or parse_number(written) is None:
                    raise DataError(
                        f"{path}: row {number}: the {answer_key} field has no number after "
                        f"'####' ({answer[-60:]!r}); set data.answer_format=plain if the field "
                        "is the answer itself"
                    )
                answer = written
            rows.append({"prompt": str(row[prompt_key]), "answer": answer})
    return rows


@dataclass
class PromptSet:
    """Tokenised prompts with their reference answers; ``dropped`` counts the over-long ones."""

    prompts: list[list[int]]
    answers: list[str]
    dropped: int

    def __len__(self) -> int:
        return len(self.prompts)

    @classmethod
    def build(
        cls,
        rows: list[dict[str, str]],
        tokenizer: Any,
        *,
        suffix: str,
        chat_template: bool,
        max_length: int,
        what: str,
    ) -> PromptSet:
        texts = [row["prompt"] + suffix for row in rows]
        if chat_template:
            if getattr(tokenizer, "chat_template", None) is None:
                raise DataError(
                    "data.chat_template: the tokenizer has no chat template; set it to false"
                )
            texts = [
                tokenizer.apply_chat_template(
                    [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False
                )
                for t in texts
            ]
        # The chat template already holds any special tokens the model wants.
        ids = tokenizer(texts, add_special_tokens=not chat_template)["input_ids"]
        kept = [i for i, row_ids in enumerate(ids) if len(row_ids) <= max_length]
        if not kept:
            raise DataError(
                f"{what}: every prompt is longer than data.max_prompt_length={max_length} tokens "
                f"(the shortest has {min(len(r) for r in ids)}); raise the limit"
            )
        return cls(
            prompts=[ids[i] for i in kept],
            answers=[rows[i]["answer"] for i in kept],
            dropped=len(rows) - len(kept),
        )
