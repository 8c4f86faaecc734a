"""A checkpoint file that cannot be written is named in one line with what limits writing there
(torch's own writer says only "unexpected pos"); one that reads as more than plain data is
refused by name (tests/runners/test_planted_files.py plants them in run folders)."""

import sys
import zipfile

import pytest
import torch

from rlcore.config import ConfigError
from rlcore.workers.files.state_files import CheckpointWriteError, load_state, writing
from tests import forked
from tests.workers.test_shard_reader import planted

UNDER_A_FILE_SIZE_LIMIT = """
import resource, sys, warnings, torch
import torch.distributed.checkpoint as dcp
from rlcore.workers.files.state_files import CheckpointWriteError, writing
resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
path, shards = sys.argv[1:]
warnings.filterwarnings("ignore", message="torch.distributed is disabled")
try:  # FSDP2's shards: torch raises a CheckpointException holding each rank's traceback
    with writing(shards):
        dcp.save({"weights": torch.zeros(10000)}, checkpoint_id=shards, no_dist=True)
except CheckpointWriteError as error:
    print(error)
with writing(path):
    torch.save({"weights": torch.zeros(10000)}, path)
"""


def test_a_write_past_the_file_size_limit_is_named_with_the_limit(tmp_path):
    path, shards = tmp_path / "trainer_rank0.pt", tmp_path / "shards"
    done = forked.run(
        [sys.executable, "-c", UNDER_A_FILE_SIZE_LIMIT, str(path), str(shards)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"rlcore.workers.files.state_files.CheckpointWriteError: {path}: the checkpoint could not "
        "be written ("
    )
    assert last.endswith(
        "MiB free on its disk, a file-size limit of 20000 bytes (ulimit -f): free space, or "
        "raise the limit"
    )
    assert issubclass(CheckpointWriteError, ConfigError)  # a bad input: one line, no restart
    assert done.stdout.startswith(f"{shards}: the checkpoint could not be written (")
    assert done.stdout.strip().endswith(
        "a file-size limit of 20000 bytes (ulimit -f): free space, or raise the limit"
    )
    assert done.stdout.count("\n") == 1 and "CheckpointException" not in done.stderr


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


@pytest.mark.parametrize(
    ("module", "name"),
    [("torch.serialization", "os.system"), ("collections", "OrderedDict.__init__.__globals__")],
)
@pytest.mark.parametrize(("protocol", "stack_global"), [(4, True), (4, False), (2, False)])
def test_a_dotted_global_in_a_pt_file_is_refused_and_runs_nothing(
    tmp_path, module, name, protocol, stack_global
):
    """torch's weights-only unpickler matches globals by exact name too: the walk that the
    metadata reader refuses (tests/workers/test_shard_reader.py) is refused in a ``.pt``."""
    torch.save({"a": 1}, tmp_path / "good.pt")
    marker = tmp_path / "ran"
    payload = planted(module, name, f"touch {marker}", protocol, stack_global)
    with (
        zipfile.ZipFile(tmp_path / "good.pt") as good,
        zipfile.ZipFile(tmp_path / "bad.pt", "w") as bad,
    ):
        for entry in good.infolist():
            data = good.read(entry)
            bad.writestr(entry, payload if entry.filename.endswith("/data.pkl") else data)
    with pytest.raises(ConfigError, match=r"bad.pt: not loaded: it asks for more") as refused:
        load_state(tmp_path / "bad.pt")
    assert "\n" not in str(refused.value)
    assert "allowlist" not in str(refused.value) and "safe_globals" not in str(refused.value)
    assert not marker.exists()
