"""A local copy of a hub dataset, as the preparation scripts (examples/reasoning/prepare_*.py)
read it: a ``datasets`` folder (``DatasetDict.save_to_disk``: a ``dataset_dict.json`` beside a
folder per split) or the hub repository's files (``{split}-*.parquet`` anywhere below the folder,
e.g. from ``hf download REPO --repo-type dataset``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlcore.data.prompts import DataError


def local_splits(
    path: Path,
    name: str,
    splits: Sequence[str] = ("train", "test"),
    columns: Sequence[str] = (),
) -> dict[str, Any]:
    """``{split: datasets.Dataset}`` of each of ``splits`` in the local copy at ``path`` of the
    dataset ``name`` (as messages call it). ``DataError`` naming the folder when it holds
    neither layout, lacks a split, or a split lacks one of ``columns``."""
    import datasets

    if (path / "dataset_dict.json").is_file():
        found = dict(datasets.load_from_disk(str(path)))
    else:
        files = {
            split: sorted(str(f) for f in path.rglob(f"{split}-*.parquet")) for split in splits
        }
        missing = [split for split, named in files.items() if not named]
        if missing:
            raise DataError(
                f"{path} holds neither a datasets folder (dataset_dict.json) nor {name}'s "
                f"{' and '.join(missing)}-*.parquet files"
            )
        found = dict(datasets.load_dataset("parquet", data_files=files))
    for split in splits:
        if split not in found:
            raise DataError(f"{path} has no {split} split")
        have = set(found[split].column_names)
        if not set(columns) <= have:
            raise DataError(
                f"{path}'s {split} split has columns {sorted(have)}; {name}'s are "
                f"{', '.join(columns)}"
            )
    return {split: found[split] for split in splits}
