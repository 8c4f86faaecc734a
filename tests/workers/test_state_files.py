"""A checkpoint file that cannot be written is named in one line with what limits writing there
(torch's own writer says only "unexpected pos"); one that reads as more than plain data is
refused by name (tests/runners/test_planted_files.py plants them in run folders)."""

import subprocess
import sys

import pytest
import torch

from rlcore.config import ConfigError
from rlcore.workers.state_files import CheckpointWriteError, load_state, writing

UNDER_A_FILE_SIZE_LIMIT = """
import resource, sys, torch
from rlcore.workers.state_files import writing
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
path = sys.argv[1]
with writing(path):
    torch.save({"weights": torch.zeros(10000)}, path)
"""


def test_a_write_past_the_file_size_limit_is_named_with_the_limit(tmp_path):
    path = tmp_path / "trainer_rank0.pt"
    done = subprocess.run(
        [sys.executable, "-c", UNDER_A_FILE_SIZE_LIMIT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"rlcore.workers.state_files.CheckpointWriteError: {path}: the checkpoint could not be "
        "written ("
    )
    assert last.endswith(
        "MiB free on its disk, a file-size limit of 20000 bytes (ulimit -f): free space, or "
        "raise the limit"
    )
    assert issubclass(CheckpointWriteError, ConfigError)  # a bad input: one line, no restart


def test_a_full_disk_is_named_and_other_errors_pass_through(tmp_path):
    path = tmp_path / "rank0.pt"
    full = r"rank0.pt: .* \(\[Errno 28\] No space left"
    with pytest.raises(CheckpointWriteError, match=full), writing(path):
        raise OSError(28, "No space left on device")
    with pytest.raises(KeyError), writing(path):
        raise KeyError("not a write failure")


def test_damaged_and_empty_files_are_named_not_loaded(tmp_path):
    good = tmp_path / "good.pt"
    torch.save({"a": torch.ones(2)}, good)
    assert torch.equal(load_state(good)["a"], torch.ones(2))
    for name, data in [("empty.pt", b""), ("cut.pt", good.read_bytes()[:100])]:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ConfigError, match=rf"{name}: not loaded: torch cannot read it"):
            load_state(tmp_path / name)
