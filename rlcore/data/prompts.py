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

import torch

from rlcore.data.answers import extract_gsm8k_answer, parse_number
from rlcore.data.images import MARKER, ImageError, ImageInputs, decode_image
from rlcore.log import say

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
    files: list[str],
    what: str,
    prompt_key: str,
    answer_key: str,
    answer_format: str,
    quiet: bool = False,
) -> list[dict[str, Any]]:
    """``[{"prompt": text or chat messages, "answer": ..., "source": ..., "extra": ...}]`` from
    ``files``; ``what`` names the config key. A file in verl's layout (see ``verl_layout``) is
    read as verl reads it, said once per file unless ``quiet`` (the dry run: the run says it)."""
    rows = []
    for path in files:
        table = _read(path, what)
        verl = verl_layout(table[0], prompt_key, answer_key)
        if verl and not quiet:
            say(
                f"{what}: {path} is in verl's layout: prompts from its 'prompt' chat messages, "
                "answers from reward_model.ground_truth, the scorer from data_source "
                "(reward.kind auto)"
            )
        for number, row in enumerate(table):
            rows.append(_row(path, number, row, prompt_key, answer_key, answer_format, verl))
    return rows


def verl_layout(row: dict[str, Any], prompt_key: str, answer_key: str) -> bool:
    """Whether ``row`` is written as verl's preprocessing scripts write them (no
    ``data.answer_key`` field, but ``reward_model.ground_truth``; the prompt a list of chat
    messages in ``prompt``, or in ``data.prompt_key``; ``data_source`` and ``extra_info``
    beside)."""
    reward_model = row.get("reward_model")
    return (
        answer_key not in row
        and isinstance(reward_model, dict)
        and "ground_truth" in reward_model
        and isinstance(row.get(prompt_key if prompt_key in row else "prompt"), list)
    )


def _row(
    path: str,
    number: int,
    row: dict[str, Any],
    prompt_key: str,
    answer_key: str,
    answer_format: str,
    verl: bool,
) -> dict[str, Any]:
    """A row's prompt, answer, source and extra (``_fields``), and its ``images`` decoded, in
    either layout (decoded once, here: each later batch reuses them)."""
    out = _fields(path, number, row, prompt_key, answer_key, answer_format, verl)
    if row.get("images"):
        where = f"{path}: row {number}"
        try:
            base = Path(path).expanduser().parent
            out["images"] = [decode_image(cell, base, where) for cell in row["images"]]
        except ImageError as error:
            raise DataError(str(error)) from None
    return out


def _fields(
    path: str,
    number: int,
    row: dict[str, Any],
    prompt_key: str,
    answer_key: str,
    answer_format: str,
    verl: bool,
) -> dict[str, Any]:
    if verl:
        field = prompt_key if prompt_key in row else "prompt"
        messages = _messages(path, number, field, row.get(field))
        answer = (
            row.get("reward_model", {}).get("ground_truth") if row.get("reward_model") else None
        )
        if answer is None or (isinstance(answer, str) and not answer.strip()):
            raise DataError(
                f"{path}: row {number}: reward_model.ground_truth is missing or empty (verl's "
                "layout); give every row its answer or drop it"
            )
        source = row.get("data_source")
        return {
            "prompt": messages,
            "answer": str(answer),  # (verl's ground truth is the answer itself: no '####')
            "source": None if source is None else str(source),
            "extra": row.get("extra_info"),
        }
    for field in (prompt_key, answer_key):
        if field not in row:
            have = ", ".join(sorted(row))
            setting = "data.prompt_key" if field == prompt_key else "data.answer_key"
            raise DataError(
                f"{path}: row {number} has no field '{field}' ({setting}); its fields: {have}"
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
        if isinstance(value, list) and field == prompt_key:
            continue  # chat messages (checked below)
        if not isinstance(value, str | int | float):
            raise DataError(
                f"{path}: row {number}: the '{field}' field is a {type(value).__name__}, not text"
            )
    prompt = row[prompt_key]
    prompt = (
        _messages(path, number, prompt_key, prompt) if isinstance(prompt, list) else str(prompt)
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
    return {"prompt": prompt, "answer": answer, "source": row.get("data_source"), "extra": None}


def _messages(path: str, number: int, field: str, value: Any) -> list[dict[str, str]]:
    """A prompt written as chat messages (``[{"role": "user", "content": ...}]``), checked."""
    ok = (
        isinstance(value, list)
        and value
        and all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in value
        )
    )
    if not ok or not any(m["role"] == "user" for m in value):
        raise DataError(
            f"{path}: row {number}: the '{field}' field is neither text nor a list of chat "
            "messages ({'role': ..., 'content': ...}) with a user turn"
        )
    return [{"role": m["role"], "content": m["content"]} for m in value]


@dataclass
class PromptSet:
    """Tokenised prompts with their reference answers and data sources (verl's
    ``data_source``, None where a row has none); ``dropped`` counts the over-long ones."""

    prompts: list[list[int]]
    answers: list[str]
    dropped: int
    sources: list[str | None] | None = None
    extras: list[Any] | None = None  # verl's extra_info, for a custom reward written as verl's
    images: list[torch.Tensor] | None = None  # each prompt's [images, C, H, W] pixels
    grids: list[torch.Tensor] | None = None  # each prompt's [images, 3] (a grid model's, else None)

    def __len__(self) -> int:
        return len(self.prompts)

    @classmethod
    def build(
        cls,
        rows: list[dict[str, Any]],
        tokenizer: Any,
        *,
        suffix: str,
        chat_template: bool | None,
        max_length: int,
        what: str,
        tools: list[dict[str, Any]] | None = None,
        images: ImageInputs | None = None,
    ) -> PromptSet:
        """``chat_template``: None = chat messages through the tokenizer's template, text as
        written (+ ``suffix``); True = both through it; False = neither (a chat prompt's last
        user turn as its text). Chat messages, as verl's preprocessing wrote them, take no
        ``suffix``. Rows with ``images`` (``rlcore.data.images``) need the model's ``images``:
        each ``<image>`` marker becomes its placeholder tokens (counted in ``max_length``)."""
        pictured = _pictured(rows, images, what)
        texts, templated = [], []
        for row in rows:
            prompt = row["prompt"]
            chat = isinstance(prompt, list)
            use = chat_template if chat_template is not None else chat
            if chat and not use:
                texts.append(next(m["content"] for m in reversed(prompt) if m["role"] == "user"))
            elif chat:
                texts.append(prompt)
            else:
                texts.append(prompt + suffix)
            templated.append(use)
        if any(templated) and getattr(tokenizer, "chat_template", None) is None:
            raise DataError(
                f"{what}: the tokenizer has no chat template to wrap the prompts in; set "
                "data.chat_template=false (a chat prompt's user turn is then its text)"
            )
        texts = [
            tokenizer.apply_chat_template(
                t if isinstance(t, list) else [{"role": "user", "content": t}],
                add_generation_prompt=True,
                tokenize=False,
                **({"tools": tools} if tools else {}),
            )
            if use
            else t
            for t, use in zip(texts, templated, strict=True)
        ]
        if pictured and images is not None and images.marker != MARKER:
            texts = [t.replace(MARKER, images.marker) for t in texts]  # (Qwen2-VL's tokens)
        # The chat template already holds any special tokens the model wants.
        ids: list[list[int]] = [[] for _ in texts]
        for use in (True, False):
            at = [i for i, flag in enumerate(templated) if flag is use]
            if at:
                encoded = tokenizer([texts[i] for i in at], add_special_tokens=not use)
                for i, row_ids in zip(at, encoded["input_ids"], strict=True):
                    ids[i] = row_ids
        pixels = grids = None
        if pictured:
            assert images is not None
            ids, pixels, grids = _with_images(ids, rows, images, what)
        kept = [i for i, row_ids in enumerate(ids) if len(row_ids) <= max_length]
        if not kept:
            raise DataError(
                f"{what}: every prompt is longer than data.max_prompt_length={max_length} tokens "
                f"(the shortest has {min(len(r) for r in ids)}); raise the limit"
            )
        sources = [rows[i].get("source") for i in kept]
        extras = [rows[i].get("extra") for i in kept]
        return cls(
            prompts=[ids[i] for i in kept],
            answers=[rows[i]["answer"] for i in kept],
            dropped=len(rows) - len(kept),
            sources=sources if any(s is not None for s in sources) else None,
            extras=extras if any(e is not None for e in extras) else None,
            images=None if pixels is None else [pixels[i] for i in kept],
            grids=None if grids is None else [grids[i] for i in kept],
        )


def _pictured(rows: list[dict[str, Any]], images: ImageInputs | None, what: str) -> bool:
    """Whether ``rows`` have images; refuses images for a text-only model, rows without them
    beside rows with them, and rows of different image counts."""
    pictured = [i for i, row in enumerate(rows) if row.get("images")]
    if pictured and images is None:
        raise DataError(
            f"{what}: prompts with images (row {pictured[0]} has "
            f"{len(rows[pictured[0]]['images'])}), but the model reads text only; "
            "set actor.model.path to a vision-language (LLaVA- or Qwen2-VL-family) model folder"
        )
    if pictured and len(pictured) < len(rows):
        plain = next(i for i in range(len(rows)) if i not in set(pictured))
        raise DataError(
            f"{what}: row {plain} has no image where row {pictured[0]} has; "
            "give every prompt its images, or split the files"
        )
    counts = {len(rows[i]["images"]) for i in pictured}
    if len(counts) > 1:
        raise DataError(
            f"{what}: rows with {sorted(counts)} images; every prompt needs the same number "
            "of images (a batch stacks them)"
        )
    return bool(pictured)


def _with_images(
    ids: list[list[int]], rows: list[dict[str, Any]], images: ImageInputs, what: str
) -> tuple[list[list[int]], list[torch.Tensor], list[torch.Tensor] | None]:
    """Each prompt's ids with its markers made the model's placeholders, its pixels, and its
    images' grids (a grid model's; None otherwise)."""
    counts = [len(row["images"]) for row in rows]  # (one processor call: faster than a row's)
    pixels, grids = images.pixels([image for row in rows for image in row["images"]])
    each = list(grids.split(counts)) if grids is not None else [None] * len(rows)
    try:
        ids = [
            images.expand(row_ids, images.placeholders(grid, n), f"{what}: row {i}")
            for i, (row_ids, grid, n) in enumerate(zip(ids, each, counts, strict=True))
        ]
    except ImageError as error:
        raise DataError(str(error)) from None
    return ids, list(pixels.split(counts)), None if grids is None else each
