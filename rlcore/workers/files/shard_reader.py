"""Reading ``torch.distributed.checkpoint`` folders (FSDP2's shards) without running their code.

torch reads a checkpoint's ``.metadata`` with plain ``pickle`` and its non-tensor items (the
optimiser's hyperparameters) with ``torch.load`` admitting any object: either runs whatever code
a file planted in a run folder asks for. Here the metadata is unpickled admitting only the classes
torch itself writes there (``MetadataReader``), and the non-tensor items are read with
``weights_only=True`` (``DataOnlyPlanner``); a file asking for anything else is refused, named
(``UnsafeCheckpoint``). The tensors themselves are read by torch with ``weights_only=True``.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import StorageMeta

from rlcore.workers.files.state_files import UnsafeCheckpoint

# The (module, name) pairs torch's writers put in a checkpoint's metadata, measured (torch 2.13:
# FSDP2 on gloo of a model in float32 and bfloat16 with AdamW; Megatron's dist_checkpointing,
# which adds its save plans), admitted by exact pair: pickle resolves a dotted name
# ("Metadata.__init__.__globals__", protocol 4) by walking attributes out of any admitted
# module, so admitting a module admits everything reachable from it.
ALLOWED = frozenset(
    {
        ("collections", "OrderedDict"),
        ("pathlib", "PosixPath"),
        ("torch", "Size"),
        ("torch.serialization", "_get_layout"),  # a layout by its name, from torch's own table
        ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
        *(
            ("torch.distributed.checkpoint.metadata", name)
            for name in (
                "BytesStorageMetadata",
                "ChunkStorageMetadata",
                "Metadata",
                "MetadataIndex",
                "StorageMeta",
                "TensorProperties",
                "TensorStorageMetadata",
                "_MEM_FORMAT_ENCODING",
            )
        ),
        # Megatron's save plans; BytesIOWriteData is the bytes twin of TensorWriteData
        *(
            ("torch.distributed.checkpoint.planner", name)
            for name in (
                "BytesIOWriteData",
                "SavePlan",
                "TensorWriteData",
                "WriteItem",
                "WriteItemType",
            )
        ),
    }
)
# a tensor's dtype pickles as ("torch", "float32"): each of torch's dtypes, by exact name
DTYPES = frozenset(name for name, value in vars(torch).items() if isinstance(value, torch.dtype))


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, path: Path) -> None:
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and name in DTYPES:
            return vars(torch)[name]
        raise UnsafeCheckpoint(
            f"{self.path} asks to load {module}.{name}, which a checkpoint's metadata never "
            "holds: it was not written by torch.distributed.checkpoint, and is not loaded"
        )


class MetadataReader(FileSystemReader):
    """torch's reader of a checkpoint folder, reading its metadata with ``_MetadataUnpickler``."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        path = Path(self._get_metadata_path(kwargs.get("rank")))
        with path.open("rb") as file:
            try:
                metadata = _MetadataUnpickler(file, path).load()
            except UnsafeCheckpoint:
                raise
            except Exception as error:  # truncated, not a pickle
                raise UnsafeCheckpoint(f"{path} is not checkpoint metadata: {error}") from None
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class DataOnlyPlanner(DefaultLoadPlanner):
    """torch's load planner, reading the non-tensor items as plain data (``weights_only``);
    ``refused`` names the first item that asked for more."""

    refused: str | None = None

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        try:
            loaded = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as error:
            self.refused = (
                f"the item {read_item.dest_index.fqn} of a checkpoint asks to run code "
                f"({str(error).splitlines()[0]}); it is not loaded"
            )
            raise UnsafeCheckpoint(self.refused) from None
        value = io.BytesIO()
        torch.save(loaded, value)
        value.seek(0)
        super().load_bytes(read_item, value)


def load_shards_into(
    state: dict[str, Any], folder: Path, group: Any = None, no_dist: bool = False
) -> None:
    """``torch.distributed.checkpoint.load`` of ``folder`` into ``state``, running no code."""
    import torch.distributed.checkpoint as dcp

    check_metadata(folder)  # first: torch's load turns a refusal there into another error
    planner = DataOnlyPlanner()
    try:
        dcp.load(
            state,
            storage_reader=MetadataReader(str(folder)),
            planner=planner,
            process_group=group,
            no_dist=no_dist,
        )
    except BaseException:  # torch's CheckpointException, wrapping what each rank raised
        if planner.refused is not None:
            raise UnsafeCheckpoint(f"{folder}: {planner.refused}") from None
        raise


def check_metadata(folder: Path) -> None:
    """``UnsafeCheckpoint`` unless ``folder``'s metadata unpickles admitting only torch's own
    classes (for readers that unpickle it themselves: Megatron's ``dist_checkpointing``)."""
    MetadataReader(str(folder)).read_metadata()
