"""rlcore.data.local_copy: a local copy of a hub dataset in either layout the preparation
scripts take, and what is wrong with one said, naming the folder."""

import pytest

from rlcore.data.local_copy import local_splits
from rlcore.data.prompts import DataError

ROWS = {
    "train": [{"question": "1+1", "answer": "2"}, {"question": "2+2", "answer": "4"}],
    "test": [{"question": "3+3", "answer": "6"}],
}


def test_both_layouts_give_the_same_splits(tmp_path):
    import datasets

    tables = {split: datasets.Dataset.from_list(rows) for split, rows in ROWS.items()}
    datasets.DatasetDict(tables).save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "hub" / "main").mkdir(parents=True)
    for split, table in tables.items():  # (the hub's names: split-index-of-count.parquet)
        table.to_parquet(str(tmp_path / "hub" / "main" / f"{split}-00000-of-00001.parquet"))
    for layout in ("saved", "hub"):
        got = local_splits(tmp_path / layout, "Sums", columns=("question", "answer"))
        assert {split: table.to_list() for split, table in got.items()} == ROWS, layout


def test_a_missing_split_or_column_is_named_with_the_folder(tmp_path):
    import datasets

    (tmp_path / "hub").mkdir()
    datasets.Dataset.from_list(ROWS["train"]).to_parquet(str(tmp_path / "hub" / "train-0.parquet"))
    with pytest.raises(DataError) as error:
        local_splits(tmp_path / "hub", "Sums")
    assert str(error.value) == (
        f"{tmp_path / 'hub'} holds neither a datasets folder (dataset_dict.json) nor Sums's "
        "test-*.parquet files"
    )
    tables = {split: datasets.Dataset.from_list(rows) for split, rows in ROWS.items()}
    datasets.DatasetDict(tables).save_to_disk(str(tmp_path / "saved"))
    columns = r"saved's train split has columns \['answer', 'question'\]; Sums's are question"
    with pytest.raises(DataError, match=columns):
        local_splits(tmp_path / "saved", "Sums", columns=("question", "answer", "images"))
    with pytest.raises(DataError, match="saved has no validation split"):
        local_splits(tmp_path / "saved", "Sums", splits=("train", "validation"))
