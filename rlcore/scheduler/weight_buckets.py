"""A component's whole weights, a bucket at a time: how a weight sync moves a model without any
process holding a second whole copy of it (verl's ``update_weights_bucket_megabytes``).

A component that takes part in weight syncs gives its live named tensors (``live``). For a
model sharded by FSDP2 these are ``DTensor`` shards: ``buckets`` gathers them a bucket at a time
(a collective that every rank of the component joins, in the same order), where a plain model's
buckets are views of its own tensors. Both sides of a sync cut the same name-ordered layout the
same way (``plan_buckets``), so a receiver knows each bucket's tensors before it arrives.

A receiver either exposes the tensors a bucket is copied into (``weights()``), or, when its
weights live outside its process (an SGLang engine's: ``pushes_weights``), describes them
(``weight_layout()``) and takes each bucket as named tensors (``load_bucket``): ``deliver``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

Layout = list[tuple[str, tuple[int, ...], str, int]]  # (name, shape, dtype, bytes), name order


def layout(weights: dict[str, torch.Tensor]) -> Layout:
    """``(name, shape, dtype, bytes)`` of each tensor, in name order, with nothing gathered (a
    ``DTensor``'s shape is the whole tensor's)."""
    return [
        (name, tuple(t.shape), str(t.dtype), t.numel() * t.element_size())
        for name, t in sorted(weights.items())
    ]


def plan_buckets(entries: Layout, bucket_bytes: int) -> list[list[str]]:
    """The names cut, in order, into runs of at most ``bucket_bytes`` (a tensor larger than
    that is a bucket of its own)."""
    buckets: list[list[str]] = []
    size = bucket_bytes  # start a new bucket with the first tensor
    for name, _, _, nbytes in entries:
        if size + nbytes > bucket_bytes or not buckets:
            buckets.append([])
            size = 0
        buckets[-1].append(name)
        size += nbytes
    return buckets


def layout_of(component: Any) -> Layout:
    """What ``component`` sends or takes in a sync, with nothing gathered."""
    if getattr(component, "pushes_weights", False):
        return component.weight_layout()
    return layout(live(component))


def live(component: Any) -> dict[str, torch.Tensor]:
    """The component's own named tensors, nothing gathered: ``weight_tensors()`` where it has
    one (a trained component, whose ``weights()`` gathers the whole model), else ``weights()``."""
    own = getattr(component, "weight_tensors", None)
    return own() if own is not None else component.weights()


def buckets(component: Any, bucket_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
    """``component``'s whole weights by name, in name order, one bucket at a time: gathered
    copies of sharded tensors (a collective: every rank calls this together), views of plain
    ones (valid until the weights change)."""
    weights = live(component)
    for names in plan_buckets(layout(weights), bucket_bytes):
        yield {name: whole(weights[name]) for name in names}


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a ``DTensor`` gathered from its shards onto its mesh's device (from CPU
    memory first when FSDP2 offloads them), a plain tensor as it is."""
    from torch.distributed.tensor import DTensor

    if not isinstance(tensor, DTensor):
        return tensor.detach()
    mesh = tensor.device_mesh
    local = tensor.to_local()
    if local.device.type != mesh.device_type:  # offloaded shards: gather on the mesh's device
        tensor = DTensor.from_local(
            local.to(mesh.device_type),
            mesh,
            tensor.placements,
            shape=tensor.shape,
            stride=tensor.stride(),
        )
    return tensor.full_tensor().detach()


def flatten(bucket: dict[str, torch.Tensor]) -> torch.Tensor:
    """One bucket as one contiguous byte tensor, in its order (any mix of dtypes)."""
    parts = [t.contiguous().reshape(-1).view(torch.uint8) for t in bucket.values()]
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def unflatten_into(flat: torch.Tensor, targets: list[torch.Tensor]) -> None:
    """Copy ``flat`` (as ``flatten`` made it) into ``targets``, in order."""
    start = 0
    with torch.no_grad():
        for target in targets:
            nbytes = target.numel() * target.element_size()
            part = flat[start : start + nbytes]
            if start % target.element_size():  # a view as a wider dtype needs aligned bytes
                part = part.clone()
            target.copy_(part.view(target.dtype).reshape(target.shape))
            start += nbytes


def copy_weights(src: Any, dst: Any, bucket_bytes: int) -> None:
    """In-process sync: ``src``'s whole weights into ``dst``'s tensors, a bucket at a time (no
    copy where a module both share holds them), or pushed into ``dst`` a bucket at a time."""
    if getattr(dst, "pushes_weights", False):
        for bucket in buckets(src, bucket_bytes):
            dst.load_bucket(bucket)
        return
    targets = dst.weights()
    for bucket in buckets(src, bucket_bytes):
        copy_into(targets, bucket)


def deliver(dst: Any, names: list[str], flat: torch.Tensor) -> None:
    """One received bucket (``flatten``'s bytes of the tensors ``names``) into ``dst``: copied
    into its tensors, or pushed into it as views of ``flat`` (see the module docstring)."""
    if not getattr(dst, "pushes_weights", False):
        weights = dst.weights()
        unflatten_into(flat, [weights[name] for name in names])
        return
    rows = {row[0]: row for row in dst.weight_layout()}
    bucket, start = {}, 0
    for name in names:
        _, shape, dtype, nbytes = rows[name]
        kind = getattr(torch, dtype.removeprefix("torch."))
        part = flat[start : start + nbytes]
        if start % part.new_empty(0, dtype=kind).element_size():
            part = part.clone()  # a view as a wider dtype needs aligned bytes
        bucket[name] = part.view(kind).reshape(shape)
        start += nbytes
    dst.load_bucket(bucket)


def copy_into(dst: dict[str, torch.Tensor], bucket: dict[str, torch.Tensor]) -> None:
    """Each of ``bucket``'s tensors into ``dst``'s of the same name (not where they share
    memory: a module shared by two fused components)."""
    with torch.no_grad():
        for name, tensor in bucket.items():
            if dst[name].data_ptr() != tensor.data_ptr():
                dst[name].copy_(tensor)


def share(bucket: dict[str, torch.Tensor], receivers: int) -> tuple[list[tuple], torch.Tensor]:
    """Handles to one bucket's bytes (``flatten``'s layout), one per receiver, which another
    process of the node opens with ``opened`` without a copy, and the tensor they refer to,
    which the sender keeps, unchanged, until every receiver has copied it. One handle per
    receiver: torch counts the openers of shared memory by the handles it made, and frees it
    when as many have closed. A GPU bucket gets CUDA IPC handles (torch's ``reduce_tensor``;
    the sender's writes are finished first). A CPU bucket is written once into a named
    shared-memory segment (torch's ``file_system`` sharing), never shared in place: sharing
    moves a storage into shared memory, which must not happen to the live parameter a
    one-tensor bucket views."""
    from torch.multiprocessing import get_sharing_strategy, set_sharing_strategy
    from torch.multiprocessing.reductions import reduce_storage, reduce_tensor

    first = next(iter(bucket.values()))
    if first.is_cuda:
        flat = flatten(bucket)
        torch.cuda.current_stream(flat.device).synchronize()
        return [("cuda", *reduce_tensor(flat)) for _ in range(receivers)], flat
    before = get_sharing_strategy()
    set_sharing_strategy("file_system")  # a segment name any process of the node can open
    try:
        size = sum(t.numel() * t.element_size() for t in bucket.values())
        kept = torch.empty(size, dtype=torch.uint8).share_memory_()
        start = 0
        for t in bucket.values():
            part = t.contiguous().reshape(-1).view(torch.uint8)
            kept[start : start + part.numel()].copy_(part)
            start += part.numel()
        handles = [("cpu", *reduce_storage(kept.untyped_storage()), size) for _ in range(receivers)]
    finally:
        set_sharing_strategy(before)
    return handles, kept


def opened(handle: tuple) -> torch.Tensor:
    """The bucket behind a ``share`` handle, in this process's memory map (no copy)."""
    if handle[0] == "cuda":
        _, rebuild, args = handle
        return rebuild(*args)
    _, rebuild, args, numel = handle
    return torch.empty(0, dtype=torch.uint8).set_(rebuild(*args), 0, (numel,), (1,))
