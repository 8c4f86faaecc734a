"""GSM8K in verl's layout: ``train.parquet`` and ``test.parquet`` as verl's preprocessing script
(examples/data_preprocess/gsm8k.py) writes them, from a local copy of GSM8K.

    python examples/reasoning/prepare_gsm8k.py --local_dataset_path ~/gsm8k \\
        --local_save_dir ~/data/gsm8k
    python examples/reasoning/main.py --config reasoning/qwen2.5-0.5b_gsm8k_ppo \\
        data.train_files=~/data/gsm8k/train.parquet data.val_files=~/data/gsm8k/test.parquet

The local copy is either a ``datasets`` folder (``DatasetDict.save_to_disk``: a
``dataset_dict.json`` beside ``train/`` and ``test/``) or the hub repository's files (openai/gsm8k:
``main/train-*.parquet`` and ``main/test-*.parquet``, e.g. from ``hf download openai/gsm8k
--repo-type dataset``). Each row becomes:

    data_source   "openai/gsm8k"   (rlcore's reward.kind auto scores it with gsm8k's rule)
    prompt        [{"role": "user", "content": question + " " + INSTRUCTION}]
    ability       "math"
    reward_model  {"style": "rule", "ground_truth": the number after '####', commas removed}
    extra_info    {"split", "index", "answer", "question"}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rlcore.data.answers import extract_gsm8k_answer
from rlcore.data.local_copy import local_splits
from rlcore.data.prompts import DataError

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def verl_row(row: dict[str, Any], index: int, split: str) -> dict[str, Any]:
    """One GSM8K row (``question``, ``answer``) in verl's layout."""
    written = extract_gsm8k_answer(row["answer"])
    if written is None:
        raise ValueError(f"{split} row {index}: no '####' answer in {row['answer'][-60:]!r}")
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{row['question']} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": written.replace(",", "").rstrip(".")},
        "extra_info": {
            "split": split,
            "index": index,
            "answer": row["answer"],
            "question": row["question"],
        },
    }


def load_local_gsm8k(path: Path) -> dict[str, Any]:
    """``{"train": Dataset, "test": Dataset}`` from a local copy (see the module docstring)."""
    try:
        return local_splits(path, "GSM8K", columns=("question", "answer"))
    except DataError as error:
        raise SystemExit(f"prepare_gsm8k: {error}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local_dataset_path", required=True, type=Path)
    parser.add_argument("--local_save_dir", default="~/data/gsm8k", type=Path)
    args = parser.parse_args(argv)
    import datasets

    out = args.local_save_dir.expanduser()
    out.mkdir(parents=True, exist_ok=True)
    for split, table in load_local_gsm8k(args.local_dataset_path.expanduser()).items():
        rows = [verl_row(row, index, split) for index, row in enumerate(table)]
        datasets.Dataset.from_list(rows).to_parquet(str(out / f"{split}.parquet"))
        print(f"{out / f'{split}.parquet'}: {len(rows)} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
