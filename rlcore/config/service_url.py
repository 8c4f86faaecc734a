"""``reward.remote.url`` read as the config check and the remote reward's messages read it: what
makes an address unusable, and the address as a message may show it (never its credentials)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redacted(url: str) -> str:
    """``url`` as messages may show it: any ``user:password@`` dropped (``***@`` instead)."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
    except ValueError:
        return "(an unreadable URL)"
    if "@" not in netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + netloc.rpartition("@")[2]))


def url_problem(url: str) -> str | None:
    """What makes ``url`` unusable as ``reward.remote.url`` and the fix, said without its
    credentials; None for a usable one."""
    shown = redacted(url)
    example = "e.g. reward.remote.url=http://127.0.0.1:8000/score"
    if not url.startswith(("http://", "https://")):
        return f"{shown!r} is not an http:// or https:// address; {example}"
    if any(c.isspace() or ord(c) < 32 for c in url):
        return f"{shown!r} holds white space or control characters; {example}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises for a port that is not a number in 0-65535)
    except ValueError as error:
        return f"{shown!r} is not a valid address ({error}); {example}"
    if parts.username is not None or parts.password is not None:
        return (
            f"{shown!r} holds credentials (user:password@), which would be sent in clear and "
            "shown in logs; give the address without them (a local proxy can add them)"
        )
    if not parts.hostname:
        return f"{shown!r} names no host; {example}"
    return None
