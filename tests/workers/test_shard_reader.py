"""A checkpoint's metadata unpickles admitting classes by exact (module, name) only: the dotted
names protocol 4 resolves by walking attributes out of an admitted module (``os.system`` out of
``torch.distributed.checkpoint.metadata``, which imports ``os``) are refused, named, and run
nothing; the metadata torch writes still reads (tests/runners/test_planted_files.py plants
whole payloads in run folders)."""

import pickle
import struct
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
)
from torch.distributed.checkpoint.planner import (
    SavePlan,
    TensorWriteData,
    WriteItem,
    WriteItemType,
)
from torch.distributed.checkpoint.state_dict import get_state_dict

from rlcore.workers.files.shard_reader import (
    MetadataReader,
    UnsafeCheckpoint,
    check_metadata,
    load_shards_into,
)

METADATA = "torch.distributed.checkpoint.metadata"
PLANNER = "torch.distributed.checkpoint.planner"

# (module, name) a planted file asks for, each called with the shell command as its argument
WALKS = [
    (METADATA, "os.system"),  # an admitted module's import, walked (protocol 4)
    (PLANNER, "torch.serialization.os.system"),
    (METADATA, "Metadata.__init__.__globals__"),
    (METADATA, "__builtins__.eval"),
    ("pathlib", "os.system"),
    ("pathlib", "sys.modules"),
    ("collections", "OrderedDict.__init__.__globals__"),
    ("torch", "serialization.os.system"),
    ("torch", "float32.__class__"),
    ("os", "system"),
    ("builtins", "eval"),
    ("posix", "system"),
]


def _text(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE


def planted(module: str, name: str, command: str, protocol: int, stack_global: bool) -> bytes:
    """A pickle calling ``module.name(command)``, naming the global with GLOBAL or (protocol 4)
    STACK_GLOBAL, written opcode by opcode: ``pickle.dumps`` cannot name a dotted global."""
    head = b"\x80" + bytes([protocol])
    if stack_global:
        target = _text(module) + _text(name) + b"\x93"
    else:
        target = b"c" + f"{module}\n{name}\n".encode()
    return head + target + _text(command) + b"\x85R."  # TUPLE1, REDUCE, STOP


FORMS = [(4, True), (4, False), (2, False)]


def test_the_walks_are_real_under_plain_pickle(tmp_path):
    """The hole: stdlib pickle resolves the dotted name out of the module admitted before."""
    marker = tmp_path / "ran"
    pickle.loads(planted(METADATA, "os.system", f"touch {marker}", 4, True))
    assert marker.exists()


@pytest.mark.parametrize(("module", "name"), WALKS)
@pytest.mark.parametrize(("protocol", "stack_global"), FORMS)
def test_a_dotted_or_unlisted_global_is_refused_by_name_and_runs_nothing(
    tmp_path, module, name, protocol, stack_global
):
    folder = tmp_path / "shards"
    folder.mkdir()
    marker = tmp_path / "ran"
    payload = planted(module, name, f"touch {marker}", protocol, stack_global)
    (folder / ".metadata").write_bytes(payload)
    with pytest.raises(UnsafeCheckpoint) as refused:
        check_metadata(folder)
    message = str(refused.value)
    assert message == (
        f"{folder / '.metadata'} asks to load {module}.{name}, which a checkpoint's metadata "
        "never holds: it was not written by torch.distributed.checkpoint, and is not loaded"
    )
    assert "\n" not in message
    with pytest.raises(UnsafeCheckpoint, match="asks to load"):  # resume's and export's read
        load_shards_into({}, folder, no_dist=True)
    assert not marker.exists()


def test_the_metadata_torch_writes_reads_as_torch_reads_it(tmp_path):
    """A bfloat16 model with AdamW (dtypes, layouts, memory formats, bytes items: what FSDP2
    writes), read here and by torch's own unpickler, agree."""
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 3)).bfloat16()
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.tensor([1, 2])).float().sum().backward()
    optimizer.step()
    weights, moments = get_state_dict(model, optimizer)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.save({"model": weights, "optimizer": moments}, checkpoint_id=tmp_path, no_dist=True)
    want = pickle.loads((tmp_path / ".metadata").read_bytes())
    got = MetadataReader(str(tmp_path)).read_metadata()
    assert got.state_dict_metadata == want.state_dict_metadata
    dtypes = {
        item.properties.dtype
        for item in got.state_dict_metadata.values()
        if hasattr(item, "properties")
    }
    assert torch.bfloat16 in dtypes


def test_megatrons_save_plans_read(tmp_path):
    """Megatron's dist_checkpointing keeps its save plans in the metadata (torch's planner
    dataclasses); built here by hand, they read back equal."""
    chunk = ChunkStorageMetadata(offsets=torch.Size([0]), sizes=torch.Size([3]))
    item = WriteItem(
        index=MetadataIndex("optimizer.w", torch.Size([0])),
        type=WriteItemType.SHARD,
        tensor_data=TensorWriteData(
            chunk=chunk, properties=TensorProperties(dtype=torch.float32), size=torch.Size([3])
        ),
    )
    metadata = Metadata(state_dict_metadata={}, planner_data=[SavePlan(items=[item])])
    (tmp_path / ".metadata").write_bytes(pickle.dumps(metadata))
    assert MetadataReader(str(tmp_path)).read_metadata().planner_data == [SavePlan(items=[item])]
