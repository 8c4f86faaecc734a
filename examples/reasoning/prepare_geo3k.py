"""Geometry3K in verl's multimodal layout: ``train.parquet`` and ``test.parquet`` as verl's
preprocessing script (examples/data_preprocess/geo3k.py) writes them, from a local copy of
hiyouga/geometry3k.

    python examples/reasoning/prepare_geo3k.py --local_dataset_path ~/geometry3k \\
        --local_save_dir ~/data/geo3k
    rlcore reasoning --config reasoning/tiny_arith_ppo actor.model.path=A_VLM_FOLDER \\
        data.train_files=~/data/geo3k/train.parquet data.val_files=~/data/geo3k/test.parquet \\
        reward.kind=math algorithm.adv_type=grpo algorithm.group_size=5

The local copy is either a ``datasets`` folder (``DatasetDict.save_to_disk``: a
``dataset_dict.json`` beside ``train/`` and ``test/``) or the hub repository's files
(``data/train-*.parquet`` and ``data/test-*.parquet``, e.g. from ``hf download
hiyouga/geometry3k --repo-type dataset``). Each row (``images``, ``problem``, ``answer``)
becomes:

    data_source   "hiyouga/geometry3k"
    prompt        [{"role": "user", "content": problem + " " + INSTRUCTION}]
    images        the row's images, as they were (encoded image cells)
    ability       "math"
    reward_model  {"style": "rule", "ground_truth": answer}
    extra_info    {"split", "index", "answer", "question"}

Each image is placed where the problem says ``<image>``; a problem with fewer markers than
images gets the missing ones in front (counted on stderr), as a vision-language model's prompt
must name every image it is given. verl scores this source by its own geo3k rule (the boxed
answer's correctness, and a smaller share for the ``<think>...</think>`` format); rlcore's
``reward.kind=math`` scores the boxed answer alone (math-verify), so name it: ``reward.kind
auto`` refuses a source it has no scorer for.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rlcore.data.local_copy import local_splits
from rlcore.data.prompts import DataError

DATA_SOURCE = "hiyouga/geometry3k"
MARKER = "<image>"
INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the "
    "final answer. The reasoning process MUST BE enclosed within <think> </think> tags. The "
    "final answer MUST BE put in \\boxed{}."
)


def verl_row(row: dict[str, Any], index: int, split: str) -> dict[str, Any]:
    """One Geometry3K row (``images``, ``problem``, ``answer``) in verl's layout."""
    problem, images = row["problem"], row["images"]
    missing = len(images) - problem.count(MARKER)
    if missing < 0:
        raise ValueError(
            f"{split} row {index}: {problem.count(MARKER)} {MARKER} markers for {len(images)} "
            "images"
        )
    question = MARKER * missing + problem
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "images": images,
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": row["answer"]},
        "extra_info": {
            "split": split,
            "index": index,
            "answer": row["answer"],
            "question": problem,
        },
    }


def load_local_geo3k(path: Path) -> dict[str, Any]:
    """``{"train": Dataset, "test": Dataset}`` from a local copy (see the module docstring)."""
    try:
        return local_splits(path, "Geometry3K", columns=("images", "problem", "answer"))
    except DataError as error:
        raise SystemExit(f"prepare_geo3k: {error}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local_dataset_path", required=True, type=Path)
    parser.add_argument("--local_save_dir", default="~/data/geo3k", type=Path)
    args = parser.parse_args(argv)
    import datasets

    out = args.local_save_dir.expanduser()
    out.mkdir(parents=True, exist_ok=True)
    for split, table in load_local_geo3k(args.local_dataset_path.expanduser()).items():
        # images stay encoded (the cells' bytes written again, not decoded and re-encoded)
        table = table.cast_column("images", datasets.Sequence(datasets.Image(decode=False)))
        rows = [verl_row(row, index, split) for index, row in enumerate(table)]
        marked = sum(len(r["images"]) - r["extra_info"]["question"].count(MARKER) for r in rows)
        features = datasets.Features(
            {
                "data_source": datasets.Value("string"),
                "prompt": [{"role": datasets.Value("string"), "content": datasets.Value("string")}],
                "images": datasets.Sequence(datasets.Image()),
                "ability": datasets.Value("string"),
                "reward_model": {
                    "style": datasets.Value("string"),
                    "ground_truth": datasets.Value("string"),
                },
                "extra_info": {
                    "split": datasets.Value("string"),
                    "index": datasets.Value("int64"),
                    "answer": datasets.Value("string"),
                    "question": datasets.Value("string"),
                },
            }
        )
        path = out / f"{split}.parquet"
        datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
        added = f", {marked} {MARKER} markers added in front" if marked else ""
        print(f"{path}: {len(rows)} rows{added}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
