"""Parse ``cluster.component_placement``: which processes of each component run on which devices.

Grammar (keys and values may be quoted in YAML)::

    cluster:
      num_nodes: 2
      devices_per_node: 8          # global device ranks 0-15: node i owns [8 i, 8 (i + 1))
      component_placement:
        # KEY: one component, or several joined by commas, placed identically
        # VALUE: which global device ranks, and optionally how many processes
        actor,critic,rollout,reward: all   # every device, one process per device
        actor: 3                           # one device rank
        actor: 0-7                         # a range, both ends included
        env: 0-1,4-5                       # a list of ranges
        rollout: 0-3:0-7                   # DEVICES:PROCESSES - 8 processes on 4 devices (2 each)
        rollout: 0-7:0-3                   # 4 processes, each spanning 2 devices (tensor parallel)

Without ``:PROCESSES`` each device gets one process. With it, the process ranks are
``0-(P-1)`` and either P is a multiple of the device count (several processes share a device,
consecutive ranks on the same device) or the device count is a multiple of P (each process owns
that many consecutive devices, which must lie on one node). Ranks are numbered in device order.

Every rule broken raises ``PlacementError`` naming the key, the bad value and the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.config.errors import ConfigError

KEY_PREFIX = "cluster.component_placement"


class PlacementError(ConfigError):
    """A ``cluster.component_placement`` entry that cannot be placed; one line, names the key."""


@dataclass(frozen=True)
class ProcessSlot:
    """One process of a component: its rank, its global device ranks, its share of each device."""

    rank: int
    devices: tuple[int, ...]
    share: float


def _fail(key: str, value: object, rule: str) -> PlacementError:
    return PlacementError(f"{KEY_PREFIX}.{key}: {value!r} {rule}")


def parse_ranks(key: str, value: str, text: str, limit: int | None) -> list[int]:
    """Ranks listed by ``text`` (``3``, ``0-3``, ``0-1,4-5``), in order, each below ``limit``."""
    ranks: list[int] = []
    for token in text.split(","):
        token = token.strip()
        if not token:
            raise _fail(key, value, "has an empty range; write ranks like 0-3 or 0-1,4-5")
        first, dash, last = token.partition("-")
        if not first.strip().isdigit() or (dash and not last.strip().isdigit()):
            raise _fail(key, value, f"has '{token}', which is not a rank or a range a-b")
        lo, hi = int(first), int(last) if dash else int(first)
        if hi < lo:
            raise _fail(key, value, f"has the reversed range {token}; write {hi}-{lo}")
        if limit is not None and hi >= limit:
            raise _fail(
                key,
                value,
                f"is out of range: the cluster has {limit} devices (ranks 0-{limit - 1})",
            )
        new = range(lo, hi + 1)
        if any(r in ranks for r in new):
            raise _fail(key, value, f"lists rank(s) twice ({token} overlaps an earlier range)")
        ranks.extend(new)
    return ranks


def parse_value(
    key: str, value: str | int, num_devices: int, devices_per_node: int
) -> list[ProcessSlot]:
    """The processes one placement value describes, in rank order."""
    text = str(value).strip()
    device_text, colon, process_text = text.partition(":")
    if device_text.strip() == "all":
        devices = list(range(num_devices))
    else:
        devices = parse_ranks(key, value, device_text, num_devices)
    if not colon:
        return [ProcessSlot(rank, (d,), 1.0) for rank, d in enumerate(devices)]
    processes = parse_ranks(key, value, process_text, None)
    if processes != list(range(len(processes))):
        raise _fail(key, value, f"must number its processes 0-{len(processes) - 1}, in order")
    n_dev, n_proc = len(devices), len(processes)
    if n_proc >= n_dev:
        if n_proc % n_dev:
            raise _fail(
                key,
                value,
                f"puts {n_proc} processes on {n_dev} devices: {n_dev} must divide {n_proc}",
            )
        per_device = n_proc // n_dev
        return [
            ProcessSlot(rank, (devices[rank // per_device],), 1.0 / per_device)
            for rank in range(n_proc)
        ]
    if n_dev % n_proc:
        raise _fail(
            key,
            value,
            f"spreads {n_proc} processes over {n_dev} devices: {n_proc} must divide {n_dev}",
        )
    span = n_dev // n_proc
    slots = []
    for rank in range(n_proc):
        own = tuple(devices[rank * span : (rank + 1) * span])
        nodes = sorted({d // devices_per_node for d in own})
        if len(nodes) > 1:
            raise _fail(
                key,
                value,
                f"makes process {rank} span devices {list(own)} on nodes "
                f"{nodes}; a process's devices must be on one node",
            )
        slots.append(ProcessSlot(rank, own, 1.0))
    return slots


def split_key(key: str) -> list[str]:
    """``"actor, rollout"`` (or ``actor+rollout``, which a command line can write: Hydra's
    override grammar takes no quoted dict keys) -> ``["actor", "rollout"]``; an empty name is
    an error."""
    names = [name.strip() for name in str(key).replace("+", ",").split(",")]
    if any(not name for name in names):
        raise PlacementError(f"{KEY_PREFIX}: key {key!r} has an empty component name")
    return names
