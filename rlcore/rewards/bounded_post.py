"""``bounded_post``: one HTTP POST whose cost is bounded whatever the other end does, for the
remote reward (``remote.py``), where the other end is a service the run does not control.

- One deadline for the whole exchange (connect, send, status, headers, body): a timer shuts
  the socket down when it passes, so a service that answers a byte a second, which a
  per-read socket timeout would never end, is cut there.
- At most ``max_bytes`` of body are read (a ``Content-Length`` above it is refused unread);
  a larger answer is refused, not buffered.
- No redirect is followed: a 3xx is returned to the caller, which refuses it (a POST turned
  into a GET without the items, to another port, would be scored as if it were the answer).
- A peer that does not speak HTTP is a ``PostFailed`` naming what came back, not a traceback.

The standard library's ``http.client``: no proxy from the environment, no redirect handler.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from rlcore.config.service_url import redacted

READ_CHUNK = 1 << 16


class PostFailed(Exception):
    """A POST that got no usable answer; ``retry``: trying again may succeed (no connection,
    past the deadline), not for a peer that answers something other than HTTP."""

    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    location: str | None  # a redirect's target, with any user:password@ removed
    body: bytes


def bounded_post(url: str, body: bytes, timeout_s: float, max_bytes: int) -> Answer:
    """POST ``body`` (JSON) to ``url``, the whole exchange within ``timeout_s``, reading at
    most ``max_bytes`` of the answer (see the module docstring); ``PostFailed`` otherwise."""
    parts = urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=timeout_s)
    cut = _Cut(conn)
    timer = threading.Timer(timeout_s, cut)
    timer.daemon = True
    started = time.monotonic()
    timer.start()
    try:
        return _exchange(conn, parts, body, max_bytes, cut)
    except (OSError, http.client.HTTPException, ValueError) as error:
        if cut.fired or time.monotonic() - started >= timeout_s:
            raise _late(timeout_s) from None
        if isinstance(error, OSError):  # (RemoteDisconnected is one: a closed connection)
            raise PostFailed(f"{type(error).__name__}: {error}", retry=True) from None
        said = str(error)[:80]
        raise PostFailed(
            f"not an HTTP answer ({type(error).__name__}: {said!r})", retry=False
        ) from None
    finally:
        timer.cancel()
        conn.close()


class _Cut:
    """The deadline's action: shut the connection's socket down, which wakes a read blocked
    in another thread (a socket timeout restarts at every byte a slow sender sends)."""

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.conn, self.fired = conn, False

    def __call__(self) -> None:
        self.fired = True
        sock = self.conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # (already closed)
                sock.shutdown(socket.SHUT_RDWR)


def _late(timeout_s: float) -> PostFailed:
    return PostFailed(f"no whole answer within reward.remote.timeout_s={timeout_s:g} s", True)


def _exchange(
    conn: http.client.HTTPConnection, parts: SplitResult, body: bytes, max_bytes: int, cut: _Cut
) -> Answer:
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn.connect()
    if cut.fired:  # (during the name lookup or the connect, before there was a socket to shut)
        raise OSError("cut at the deadline")
    conn.request("POST", target, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    location = response.getheader("Location")
    if response.status != 200:  # the status is the answer (a 3xx: not followed); no body read
        if cut.fired:
            raise OSError("cut at the deadline")
        shown = redacted(location)[:200] if location else None
        return Answer(response.status, response.reason, shown, b"")
    declared = response.getheader("Content-Length")
    if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
        raise PostFailed(f"the answer declares {int(declared)} bytes, over {max_bytes}", False)
    chunks, size = [], 0
    while True:
        chunk = response.read(READ_CHUNK)
        if not chunk:
            break
        size += len(chunk)
        if size > max_bytes:
            raise PostFailed(f"the answer is over {max_bytes} bytes", False)
        chunks.append(chunk)
    if cut.fired:  # (a shut socket reads as the end of the body)
        raise OSError("cut at the deadline")
    return Answer(response.status, response.reason, None, b"".join(chunks))
