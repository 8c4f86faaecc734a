"""Where a run listens: loopback on one machine, the named interface (or Ray's node address) on a
cluster. Nothing rlcore starts listens on every interface.

What listens, and on which address:

- Ray (a local run): the GCS, the raylet, the agents and every worker's gRPC server. Ray binds
  them to loopback only when its node address is loopback, which it never chooses on Linux on its
  own (ray-project/ray#26293): ``local_ray_node`` makes it choose 127.0.0.1. A cluster's Ray is
  started by ``ray start``; its addresses are the user's (docs/placement.md).
- torch.distributed's TCP store (no authentication): rank 0 of each group, and of each weight-sync
  group, serves it from a socket rlcore binds first (``bind_listener``) and hands to the store,
  since TCPStore itself would listen on every interface.
- gloo and NCCL: their sockets bind to the interface named by ``GLOO_SOCKET_IFNAME`` and
  ``NCCL_SOCKET_IFNAME``, which ``transport_env`` sets for every worker process.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

LOOPBACK = "127.0.0.1"
# Set in each worker's environment when cluster.network_interface names an interface.
INTERFACE_ENV = "RLCORE_NETWORK_INTERFACE"


class NetworkError(RuntimeError):
    """A named interface is missing or has no address on a node."""


def interfaces() -> dict[str, list[str]]:
    """Each network interface of this machine with its IPv4 then IPv6 addresses."""
    import psutil

    found = {}
    for name, addresses in psutil.net_if_addrs().items():
        v4 = [a.address for a in addresses if a.family == socket.AF_INET]
        v6 = [a.address.split("%")[0] for a in addresses if a.family == socket.AF_INET6]
        found[name] = v4 + v6
    return found


def interface_address(name: str) -> str:
    """The first address of interface ``name`` on this machine (IPv4 first)."""
    known = interfaces()
    if not known.get(name):
        have = ", ".join(f"{n} ({a[0]})" for n, a in sorted(known.items()) if a) or "none"
        raise NetworkError(
            f"cluster.network_interface: this machine ({socket.gethostname()}) has no interface "
            f"'{name}' with an address; it has: {have}"
        )
    return known[name][0]


def loopback_interface() -> str:
    """The name of the interface that holds 127.0.0.1 (``lo`` on Linux)."""
    for name, addresses in interfaces().items():
        if LOOPBACK in addresses:
            return name
    raise NetworkError(f"this machine has no interface with the address {LOOPBACK}")


def transport_env(interface: str | None, local: bool) -> dict[str, str]:
    """The environment that binds gloo's and NCCL's sockets: loopback for a local run, the named
    interface on a cluster, and nothing (the libraries' own choice) for a cluster without one."""
    name = loopback_interface() if local else interface
    if name is None:
        return {}
    env = {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name}
    if not local:
        env[INTERFACE_ENV] = name
    return env


def bind_listener(node_address: str, interface: str | None = None) -> socket.socket:
    """A listening TCP socket on a free port of ``interface``'s address, or of ``node_address``
    (the address Ray gave this node) when no interface is named."""
    address = interface_address(interface) if interface else node_address
    family = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)[0][0]
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, 0))
        listener.listen(socket.SOMAXCONN)
    except BaseException:
        listener.close()
        raise
    return listener


@contextlib.contextmanager
def local_ray_node() -> Iterator[None]:
    """Within this block, a Ray started here takes 127.0.0.1 as its node address, and so binds
    every server to loopback.

    Ray picks the address other machines could reach unless clustering is switched off, which it
    does for laptops (macOS, Windows) through ``ray_constants.ENABLE_RAY_CLUSTER``; the flag is
    read when the node starts, so it is set for the call and restored after. A Ray that ignores
    it is caught by tests/scheduler/test_ray_lifecycle.py, which lists the sockets that listen.
    """
    from ray._private import ray_constants

    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before
