"""Copy one component's weights into another's: in-process, object store, or collective.

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

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from rlcore.placement import PlacementPlan
from rlcore.scheduler.worker_group import WorkerGroup

METHODS = ("auto", "in_process", "collective", "ipc", "object_store")


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
        start = time.perf_counter()
        transfer(src, dst)
        seconds = time.perf_counter() - start
        return SyncReport(chosen, seconds, len(layout), sum(entry[-1] for entry in layout))

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

    def _in_process(self, src: str, dst: str) -> None:
        group = self.group(dst)
        group.get([h.copy_weights.remote(src, dst, self.bucket_bytes) for h in group.handles])

    def _ipc(self, src: str, dst: str) -> None:
        pairs = self._ipc_pairs(src, dst)
        if pairs is None:
            where = "GPU" if self.plan.device == "cuda" else "node"
            raise ValueError(
                f"ipc sync {src} -> {dst} needs every {dst} rank on the {where} of a {src} rank"
            )
        sender, receivers = self.group(src), self.group(dst)
        if {id(h) for h in sender.handles} & {id(h) for h in receivers.handles}:
            raise ValueError(f"ipc sync needs every {dst} rank apart from the {src} ranks")
        sender.get(
            [
                h.share_weights.remote(
                    src,
                    dst,
                    self.bucket_bytes,
                    [receivers.handles[j] for j in pairs.get(i, [])],
                    self.collective_timeout_s,
                )
                for i, h in enumerate(sender.handles)
            ]
        )

    def _object_store(self, src: str, dst: str) -> None:
        sender = self.group(src)
        weights = sender.handles[0].export_weights.remote(src, self.bucket_bytes)
        helping = self._gather_elsewhere(src)
        group = self.group(dst)
        group.get([h.import_weights.remote(dst, weights, self.bucket_bytes) for h in group.handles])
        sender.get(helping, ranks=range(1, sender.world_size))

    def _gather_elsewhere(self, src: str) -> list[Any]:
        """The sender's other ranks take part in gathering its whole weights, which rank 0 sends
        (a collective when the weights are sharded; a pass over views otherwise)."""
        return [
            h.gather_weights.remote(src, self.bucket_bytes) for h in self.group(src).handles[1:]
        ]

    def _collective(self, src: str, dst: str) -> None:
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
        receivers.get(
            [h.broadcast_weights.remote(name, dst, self.bucket_bytes) for h in receivers.handles]
        )
        sender.get([sent, *helping])
