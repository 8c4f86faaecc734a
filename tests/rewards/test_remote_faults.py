"""``reward.kind: remote`` against services that misbehave (loopback servers this test starts):
each fault ends as one line naming reward.remote.url, within the request's deadline, without reading
more than the size cap, following no redirect, and never showing the URL's credentials."""

import json
import socket
import threading
import time
import tracemalloc

import pytest

from rlcore.config import ConfigError, load_config
from rlcore.rewards import remote
from rlcore.rewards.remote import RemoteRewardError, RemoteScorer, check_reachable
from tests.rewards.test_remote import items
from tests.rewards.test_rules import sectioned

OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


class RawServer:
    """A TCP server on a free loopback port: ``handle(conn)`` answers each connection as it
    likes (bytes that are not HTTP, a slow drip); ``connections`` counts them."""

    def __init__(self, handle):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/score"
        self.connections, self.handle, self.stop = 0, handle, threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        with conn:
            try:
                _read_request(conn)  # (whole: a close with bytes unread would reset the peer)
                self.handle(conn, self.stop)
            except OSError:  # the client hung up: what a refused answer looks like
                pass

    def close(self):
        self.stop.set()
        self.sock.close()


def _read_request(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(65536)


@pytest.fixture
def raw():
    started = []

    def start(handle):
        started.append(RawServer(handle))
        return started[-1]

    yield start
    for server in started:
        server.close()


def settings(url, **changes):
    base = dict(
        url=url,
        remote_batch_size=8,
        remote_concurrency=1,
        remote_timeout_s=5.0,
        remote_retries=0,
        on_error="raise",
        score_range=(-1e4, 1e4),
    )
    return sectioned(base | changes)


def failure(url, n=2, **changes) -> str:
    with pytest.raises(RemoteRewardError) as raised:
        RemoteScorer(settings(url, **changes)).ask(items(n))
    message = str(raised.value)
    assert message.startswith("reward.remote.url: ") and "\n" not in message
    return message


def answer_with(body: bytes):
    def handle(conn, stop):
        conn.sendall(OK_HEAD + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    return handle


def drip(head_too: bool):
    """An answer sent a byte every 50 ms: its body, or already its head."""

    def handle(conn, stop):
        body = json.dumps({"scores": [1.0, 1.0]}).encode() + b" " * 1000
        whole = OK_HEAD + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
        sent = 0 if head_too else len(OK_HEAD) + 25
        conn.sendall(whole[:sent])
        while sent < len(whole) and not stop.is_set():
            conn.sendall(whole[sent : sent + 1])
            sent += 1
            time.sleep(0.05)

    return handle


@pytest.mark.parametrize("head_too", [False, True], ids=["body", "head"])
def test_an_answer_dripped_a_byte_at_a_time_is_cut_at_the_whole_requests_deadline(raw, head_too):
    """Each byte comes well within a socket timeout; the whole answer would take a minute."""
    server = raw(drip(head_too))
    start = time.monotonic()
    message = failure(server.url, remote_timeout_s=1.0)
    took = time.monotonic() - start
    assert "no whole answer within reward.remote.timeout_s=1 s" in message
    assert 1.0 <= took < 1.5


def test_an_answer_over_the_size_cap_is_refused_without_being_held(raw, monkeypatch):
    monkeypatch.setattr(remote, "MAX_ANSWER_BYTES", 1 << 20)
    chunk = b" " * (1 << 16)

    def endless(conn, stop):  # no length: read until the peer closes, which it never does
        conn.sendall(OK_HEAD + b'Connection: close\r\n\r\n{"scores": [1, 1]')
        for _ in range(1024):  # 64 MiB, sent from one buffer
            conn.sendall(chunk)

    declared = answer_with(b"x" * 100)  # (a Content-Length over the cap is refused unread)
    tracemalloc.start()
    try:
        message = failure(raw(endless).url)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "the answer is over 1048576 bytes" in message
    assert peak < 8 << 20  # the cap and a read's chunk, not the 64 MiB sent

    monkeypatch.setattr(remote, "MAX_ANSWER_BYTES", 50)
    assert "the answer declares 100 bytes, over 50" in failure(raw(declared).url)


def test_a_redirect_is_refused_naming_its_target_and_not_followed(raw, service):
    elsewhere = service(lambda it, n: (200, {"scores": [1.0] * len(it)}))
    target = elsewhere.url.replace("http://", "http://bob:s3cret@")

    def redirect(conn, stop):
        conn.sendall(
            f"HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n".encode()
        )

    server = raw(redirect)
    message = failure(server.url, remote_retries=2)
    assert "status 302 redirects to 'http://***@127.0.0.1:" in message
    assert "s3cret" not in message and "bob" not in message
    assert elsewhere.seen == [] and server.connections == 1  # not followed, not tried again


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"scores": [' + b"9" * 5000 + b", 1]}", "an integer of over 4300 digits"),
        (
            b'{"scores": [' + b"1" + b"0" * 400 + b", 1]}",
            "score 0 is 100000000000000000000000000000... (401 characters), not a finite",
        ),
        (b'{"scores": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper than"),
        (b'{"scores": [1e308, 1]}', "score 0 is 1e+308, not a finite number in "),
        (b'{"scores": [1, Infinity]}', "score 1 is inf, not a finite number in "),
        (b'{"scores": [NaN, 1]}', "score 0 is nan, not a finite number in "),
        (b'{"scores": [-10001, 1]}', "score 0 is -10001, not a finite number in "),
        (b'{"scores": [1, 2, 3]}', "the answer has 3 scores for 2 items"),
        (b'{"scores": [1, [[1]]]}', "score 1 is [[1]], not a finite number"),
    ],
    ids=["huge-int", "int-past-floats", "deep", "1e308", "inf", "nan", "below", "count", "list"],
)
def test_a_malformed_answer_is_one_line_naming_what_is_wrong(raw, body, says):
    message = failure(raw(answer_with(body)).url)
    assert says in message, message
    if "not a finite" in says:
        assert "reward.score_range [-10000, 10000]" in message


def test_a_peer_that_does_not_speak_http_is_a_failure_not_a_traceback(raw, monkeypatch):
    monkeypatch.setattr(remote, "BACKOFF_S", 0.01)
    garbage = raw(lambda conn, stop: conn.sendall(b"\x00\xffSSH-2.0-nope\r\n\r\n"))
    assert "not an HTTP answer (BadStatusLine" in failure(garbage.url, remote_retries=2)
    assert garbage.connections == 1  # the same bytes again would not help
    hangs_up = raw(lambda conn, stop: None)  # closes without a word: tried again
    assert "RemoteDisconnected" in failure(hangs_up.url, remote_retries=1)
    assert hangs_up.connections == 2
    zero = RemoteScorer(settings(garbage.url, on_error="zero")).ask(items(3))
    assert zero.scores == [0.0] * 3 and zero.failed == 3  # on_error zero: the run goes on


def test_credentials_in_the_url_are_refused_before_the_start_without_showing_them():
    url = "http://alice:s3cret@127.0.0.1:1/score"
    with pytest.raises(ConfigError) as raised:
        load_config("reasoning/tiny_arith_ppo", ["reward.kind=remote", f"reward.remote.url={url}"])
    message = str(raised.value)
    assert "reward.remote.url: 'http://***@127.0.0.1:1/score' holds credentials" in message
    assert "s3cret" not in message and "alice" not in message and "\n" not in message
    with pytest.raises(ConfigError, match="holds credentials") as raised:
        check_reachable(url)  # (what the dry run and the start run)
    assert "s3cret" not in str(raised.value)
    for bad, says in [("http://host:99999/x", "Port out of range"), ("http:///x", "no host")]:
        with pytest.raises(ConfigError, match=says):
            load_config(
                "reasoning/tiny_arith_ppo", ["reward.kind=remote", f"reward.remote.url={bad}"]
            )
