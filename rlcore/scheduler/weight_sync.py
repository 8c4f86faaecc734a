"""Copy one component's weights into another's: in-process, object store, or collective. The
driver's side is ``WeightSync``; each worker process's side, the transfers it takes part in, is
``WeightEndpoint`` (``WorkerProcess`` is one).

A component that takes part implements ``weights() -> dict[str, torch.Tensor]``, its live named
tensors (``model.state_dict()`` will do; a trained component also gives ``weight_tensors()``,
its shards ungathered): the sender's weights are read a bucket at a time
(``rlcore/scheduler/weight_buckets.py``), the receiver's overwritten in place, so the receiver's
parameters equal the sender's bit for bit afterwards.

How, chosen by placement (``method="auto"``, ``WeightSync.choose``):
- ``in_process``: the two components are fused (same process per rank): one memcpy per tensor.
- ``collective``: otherwise, unless processes of the sync share a GPU. Rank 0 of the sender
  broadcasts over a group it shares with every receiving rank (NCCL on GPU, gloo on CPU),
  created once per pair, one message per bucket.
- ``ipc``: when processes of the sync share a GPU (NCCL refuses a group holding one GPU
  twice) and every receiving rank shares one with a rank of the sender (a collocated plan that
  is not fused): each such sender rank hands its colocated receivers one CUDA IPC handle per
  bucket, and they copy the bucket from its memory, GPU to GPU, with no host copy and no group.
  On CPU slots it runs only on request, through named shared memory (how the tests run it).
- ``object_store``: when processes of the sync share a GPU but ``ipc`` cannot pair them, or on
  request: rank 0's weights go into Ray's object store once and each receiver reads them. For
  100M float32 parameters on one CPU node it takes 0.30 s against 0.15 s for the gloo broadcast
  (benchmarks/scheduler.py), hence not the default elsewhere.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (worker processes import this module: nothing of the driver's side)
    from rlcore.placement import PlacementPlan
    from rlcore.scheduler.worker_group import WorkerGroup

METHODS = ("auto", "in_process", "collective", "ipc", "object_store")
Finish = Callable[[], None]  # waits for a copy that was started (WeightSync.start)


@dataclass(frozen=True)
class SyncReport:
    method: str
    seconds: float
    num_tensors: int
    num_bytes: int


class WeightSync:
    """Weight copies between the components of one plan.

    ``group(name)`` gives a component's ``WorkerGroup``; ``info[(name, rank)]["ip"]`` where each
    rank runs; ``backend`` the collective groups' it opens, ``timeout_s`` their rendezvous's and
    ``collective_timeout_s`` their broadcasts'. The weights move ``bucket_bytes`` at a time
    (``rlcore/scheduler/weight_buckets.py``).
    """

    def __init__(
        self,
        plan: PlacementPlan,
        group: Callable[[str], WorkerGroup],
        info: dict[tuple[str, int], dict[str, Any]],
        backend: str,
        timeout_s: float,
        collective_timeout_s: float,
        bucket_bytes: int = 512 << 20,
    ) -> None:
        self.plan, self.group, self.info = plan, group, info
        self.bucket_bytes = bucket_bytes
        self.backend, self.timeout_s = backend, timeout_s
        self.collective_timeout_s = collective_timeout_s
        self._layouts: dict[tuple[str, str], list[tuple]] = {}  # checked pair -> tensor layout
        self._groups: set[str] = set()  # collective groups already opened

    def choose(self, src: str, dst: str) -> str:
        """``in_process`` for fused components; else ``collective``, unless two of the sync
        group's processes share a GPU, which NCCL refuses ("Duplicate GPU detected"): then
        ``ipc`` where every receiver shares its GPU with a sender rank, else ``object_store``."""
        plan = self.plan
        if any(src in group and dst in group for group in plan.fused):
            return "in_process"
        if plan.device == "cuda":
            members = [plan.components[src][0], *plan.components[dst]]
            gpus = [(r.node, d) for r in members for d in r.devices]
            if len(set(gpus)) < len(gpus):
                return "ipc" if self._ipc_pairs(src, dst) is not None else "object_store"
        return "collective"

    def _ipc_pairs(self, src: str, dst: str) -> dict[int, list[int]] | None:
        """Sender rank -> the receiving ranks it serves by IPC: each receiver is served by a
        sender rank on its GPU (on CPU slots, on its node: shared memory spans the node); None
        when some receiver has no such sender rank."""
        senders, pairs = self.plan.components[src], {}
        for j, receiver in enumerate(self.plan.components[dst]):
            same = [
                i
                for i, s in enumerate(senders)
                if s.node == receiver.node
                and (self.plan.device != "cuda" or s.devices == receiver.devices)
            ]
            if not same:
                return None
            pairs.setdefault(same[0], []).append(j)
        return pairs

    def sync(self, src: str, dst: str, method: str = "auto") -> SyncReport:
        start = time.perf_counter()
        chosen, layout, finish = self.start(src, dst, method)
        finish()
        seconds = time.perf_counter() - start
        return SyncReport(chosen, seconds, len(layout), sum(entry[-1] for entry in layout))

    def start(self, src: str, dst: str, method: str = "auto") -> tuple[str, list, Finish]:
        """The copy's calls submitted to the processes, not waited for: the method, the tensor
        layout, and what waits for the copy to end (raising its errors). Each process runs its
        part after the calls submitted to it before, and before those submitted after: a
        receiver busy generating takes the weights once it has done."""
        if method not in METHODS:
            raise ValueError(f"unknown weight sync method '{method}'; known: {', '.join(METHODS)}")
        chosen = self.choose(src, dst) if method == "auto" else method
        if chosen == "in_process" and self.choose(src, dst) != "in_process":
            raise ValueError(
                f"{src} and {dst} run in different processes: in_process is impossible"
            )
        layout = self._check_compatible(src, dst)
        transfer = {
            "in_process": self._in_process,
            "ipc": self._ipc,
            "object_store": self._object_store,
            "collective": self._collective,
        }[chosen]
        return chosen, layout, transfer(src, dst)

    def forget(self, component: str) -> None:
        """``component`` was built anew: its layouts are checked again at the next sync."""
        self._layouts = {pair: v for pair, v in self._layouts.items() if component not in pair}

    def _check_compatible(self, src: str, dst: str) -> list[tuple]:
        """Both sides hold the same names, shapes and dtypes; checked once per pair."""
        if (src, dst) not in self._layouts:
            layouts = [
                group.get([h.weights_meta.remote(name) for h in group.handles])[0]
                for name, group in ((src, self.group(src)), (dst, self.group(dst)))
            ]
            if layouts[0] != layouts[1]:
                differ = sorted(set(layouts[0]) ^ set(layouts[1]))[:3]
                raise ValueError(
                    f"weight sync {src} -> {dst}: the two hold different tensors (names, shapes "
                    f"or dtypes), e.g. {differ}"
                )
            self._layouts[(src, dst)] = layouts[0]
        return self._layouts[(src, dst)]

    def _in_process(self, src: str, dst: str) -> Finish:
        group = self.group(dst)
        copies = [h.copy_weights.remote(src, dst, self.bucket_bytes) for h in group.handles]
        return lambda: group.get(copies)

    def _ipc(self, src: str, dst: str) -> Finish:
        pairs = self._ipc_pairs(src, dst)
        if pairs is None:
            where = "GPU" if self.plan.device == "cuda" else "node"
            raise ValueError(
                f"ipc sync {src} -> {dst} needs every {dst} rank on the {where} of a {src} rank"
            )
        sender, receivers = self.group(src), self.group(dst)
        if {id(h) for h in sender.handles} & {id(h) for h in receivers.handles}:
            raise ValueError(f"ipc sync needs every {dst} rank apart from the {src} ranks")
        shares = [
            h.share_weights.remote(
                src,
                dst,
                self.bucket_bytes,
                [receivers.handles[j] for j in pairs.get(i, [])],
                self.collective_timeout_s,
            )
            for i, h in enumerate(sender.handles)
        ]
        return lambda: sender.get(shares)

    def _object_store(self, src: str, dst: str) -> Finish:
        sender = self.group(src)
        weights = sender.handles[0].export_weights.remote(src, self.bucket_bytes)
        helping = self._gather_elsewhere(src)
        group = self.group(dst)
        imports = [h.import_weights.remote(dst, weights, self.bucket_bytes) for h in group.handles]

        def finish() -> None:
            group.get(imports)
            sender.get(helping, ranks=range(1, sender.world_size))

        return finish

    def _gather_elsewhere(self, src: str) -> list[Any]:
        """The sender's other ranks take part in gathering its whole weights, which rank 0 sends
        (a collective when the weights are sharded; a pass over views otherwise)."""
        return [
            h.gather_weights.remote(src, self.bucket_bytes) for h in self.group(src).handles[1:]
        ]

    def _collective(self, src: str, dst: str) -> Finish:
        import ray  # (here: a run in the driver's process alone never imports Ray)

        sender, receivers = self.group(src), self.group(dst)
        root = sender.handles[0]
        members = [root, *receivers.handles]
        if len({id(m) for m in members}) != len(members):
            raise ValueError(f"collective sync needs {src} rank 0 apart from every {dst} rank")
        name = f"{src}->{dst}"
        if name not in self._groups:
            addr, port = ray.get(root.listen.remote(self.info[(src, 0)]["ip"]))
            opens = [
                m.open_sync_group.remote(
                    name,
                    addr,
                    port,
                    i,
                    len(members),
                    self.backend,
                    self.timeout_s,
                    self.collective_timeout_s,
                )
                for i, m in enumerate(members)
            ]
            ray.get(opens, timeout=self.timeout_s + 30)
            self._groups.add(name)
        sent = root.broadcast_weights.remote(name, src, self.bucket_bytes)
        helping = self._gather_elsewhere(src)
        taken = [
            h.broadcast_weights.remote(name, dst, self.bucket_bytes) for h in receivers.handles
        ]

        def finish() -> None:
            receivers.get(taken)
            sender.get([sent, *helping])

        return finish


class WeightEndpoint:
    """The weight transfers of one worker process (``WorkerProcess`` is one): each method below
    is what ``WeightSync`` calls on a process, on the components it hosts (``instances``). The
    process brings ``instances``, ``sync_groups`` (the sync groups it joined) and ``_store`` (a
    torch.distributed TCP store on a port it bound)."""

    instances: dict[str, Any]
    sync_groups: dict[str, tuple[Any, int]]

    def weights_meta(self, component: str) -> list[tuple[str, tuple[int, ...], str, int]]:
        """``(name, shape, dtype, bytes)`` of each tensor, in name order (nothing gathered)."""
        from rlcore.scheduler.weight_buckets import layout_of

        return layout_of(self.instances[component])

    def gather_weights(self, component: str, bucket_bytes: int) -> None:
        """Join the bucket-by-bucket gather of ``component``'s whole weights that another rank
        sends (a collective when they are sharded)."""
        from rlcore.scheduler.weight_buckets import buckets

        for _ in buckets(self.instances[component], bucket_bytes):
            pass

    def export_weights(self, component: str, bucket_bytes: int) -> dict[str, Any]:
        # Raw bytes as numpy arrays, not tensors: Ray stores them without pickling (6x faster for
        # 100M parameters, measured), receivers on the node read them in place from shared
        # memory, and bytes carry any dtype (numpy has no bfloat16).
        import torch

        from rlcore.scheduler.weight_buckets import buckets

        return {
            name: t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
            for bucket in buckets(self.instances[component], bucket_bytes)
            for name, t in bucket.items()
        }

    def import_weights(self, component: str, weights: dict[str, Any], bucket_bytes: int) -> None:
        import warnings

        import torch

        from rlcore.scheduler.weight_buckets import deliver, layout_of, plan_buckets

        instance = self.instances[component]
        with torch.no_grad(), warnings.catch_warnings():
            # The arrays are read-only views of the object store; they are only read here.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            if not getattr(instance, "pushes_weights", False):
                for name, tensor in instance.weights().items():
                    raw = torch.from_numpy(weights[name])
                    tensor.copy_(raw.view(tensor.dtype).reshape(tensor.shape))
                return
            for names in plan_buckets(layout_of(instance), bucket_bytes):
                raw = [torch.from_numpy(weights[name]) for name in names]
                deliver(instance, names, raw[0] if len(raw) == 1 else torch.cat(raw))

    def copy_weights(self, src: str, dst: str, bucket_bytes: int) -> None:
        """In-process sync between fused components: a bucket at a time, one memcpy per tensor
        (none for a module both share)."""
        from rlcore.scheduler.weight_buckets import copy_weights

        copy_weights(self.instances[src], self.instances[dst], bucket_bytes)

    def open_sync_group(
        self,
        name: str,
        addr: str,
        port: int,
        rank: int,
        size: int,
        backend: str,
        timeout_s: float,
        collective_timeout_s: float,
    ) -> None:
        import torch.distributed as dist

        store = self._store(addr, port, size, rank, timeout_s)
        timeout = datetime.timedelta(seconds=collective_timeout_s)
        if backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            group = dist.ProcessGroupNCCL(store, rank, size, options)
        else:
            group = dist.ProcessGroupGloo(store, rank, size, timeout)
        self.sync_groups[name] = (group, rank)

    def broadcast_weights(self, name: str, component: str, bucket_bytes: int) -> None:
        """Rank 0 of sync group ``name`` sends its ``component``'s weights, one message per
        bucket; the others receive each into their tensors."""
        import torch
        import torch.distributed as dist

        from rlcore.scheduler.weight_buckets import (
            buckets,
            deliver,
            flatten,
            layout_of,
            plan_buckets,
        )

        group, rank = self.sync_groups[name]
        options = dist.BroadcastOptions()
        options.rootRank = 0
        instance = self.instances[component]
        if rank == 0:
            for bucket in buckets(instance, bucket_bytes):
                group.broadcast([flatten(bucket)], options).wait()
            return
        entries = {row[0]: row for row in layout_of(instance)}
        device = _receiving_device(instance)
        for names in plan_buckets(list(entries.values()), bucket_bytes):
            size = sum(entries[n][3] for n in names)
            flat = torch.empty(size, dtype=torch.uint8, device=device)
            group.broadcast([flat], options).wait()
            deliver(instance, names, flat)

    def share_weights(
        self, component: str, dst: str, bucket_bytes: int, receivers: list[Any], timeout_s: float
    ) -> None:
        """IPC sync: hand each bucket of ``component``'s whole weights to ``receivers`` (the
        processes of ``dst`` on this one's GPU) as a handle to this process's memory, and wait
        until every one has copied it before the next bucket. Every rank of ``component`` calls
        this together (a sharded model is gathered bucket by bucket); ranks with no receivers
        only help gather."""
        import ray

        from rlcore.scheduler.weight_buckets import buckets, share

        for bucket in buckets(self.instances[component], bucket_bytes):
            if receivers:
                handles, kept = share(bucket, len(receivers))
                copies = [
                    r.receive_shared_weights.remote(dst, list(bucket), handle)
                    for r, handle in zip(receivers, handles, strict=True)
                ]
                ray.get(copies, timeout=timeout_s)
                del kept

    def receive_shared_weights(self, component: str, names: list[str], handle: tuple) -> None:
        """Copy the bucket behind ``handle`` (``share_weights``) into ``component``'s tensors
        ``names``, and finish the copy before returning: the sender then frees the bucket."""
        import torch

        from rlcore.scheduler.weight_buckets import deliver, opened

        flat = opened(handle)
        deliver(self.instances[component], names, flat)
        if flat.is_cuda:
            torch.cuda.current_stream(flat.device).synchronize()
        del flat


def _receiving_device(instance: Any) -> Any:
    """Where a broadcast bucket lands: the device of the receiver's tensors, or of the engine
    it pushes them into (a collective over NCCL needs the GPU)."""
    if getattr(instance, "pushes_weights", False):
        return instance.engine.device
    return next(iter(instance.weights().values())).device
