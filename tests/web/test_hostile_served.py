"""Hostile clients against a real ``handoff-trace serve`` process (issue 6, item 4), where the
HTTP server's own parsing is in play: request lines and headers far past any sane size,
chunked bodies over the limit, and slow clients (slowloris) that trickle their headers or
body while other clients are answered.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from app.store.db import make_engine
from tests.conftest import World
from tests.databases import Databases
from tests.store.builders import T0, bundle, jsonl, offer, rec
from tests.web.conftest import make_tokens, write_trust
from tests.web.test_served import serving

LIMIT = 256 * 1024
SLOW_CLIENTS = 40
READY_SECONDS = 60  # only a client the server never accepted waits this long


@pytest.fixture(scope="module")
def served(
    databases: Databases, tmp_path_factory: pytest.TempPathFactory, world: World
) -> Iterator[tuple[str, str]]:
    tmp = tmp_path_factory.mktemp("hostile-served")
    url = databases.new("sqlite")
    engine = make_engine(url)
    try:
        token = make_tokens(engine)["admin"]
    finally:
        engine.dispose()
    trust = write_trust(world, tmp / "trust.json")
    env = {"HANDOFF_TRACE_MAX_REQUEST_BYTES": str(LIMIT), "HANDOFF_TRACE_HEADER_SECONDS": "2"}
    with serving(url, trust, tmp, env=env) as base:
        yield base, token


def _connect(base: str) -> socket.socket:
    parts = urlsplit(base)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def _status_line(sock: socket.socket) -> str:
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0].decode("latin-1")


def _raw(base: str, request: bytes) -> str:
    """The status line of the answer, or "" when the server closed the connection."""
    with _connect(base) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)
        return _status_line(sock)


def test_huge_request_lines_and_headers_are_refused(served: tuple[str, str]) -> None:
    base, _ = served
    cases = [
        b"GET /api/v1/hops?" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /api/v1/hops HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
        b"GET /api/v1/hops HTTP/1.1\r\nHost: x\r\n"
        + b"".join(b"X-H%d: v\r\n" % i for i in range(20_000))
        + b"\r\n",
        b"GET /" + b"../" * 50_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    for request in cases:
        line = _raw(base, request)
        assert line == "" or line.startswith("HTTP/1.1 4"), line
    assert httpx.get(f"{base}/api/v1/healthz", timeout=10).status_code == 200


def test_a_chunked_body_over_the_limit_is_413(served: tuple[str, str]) -> None:
    base, token = served

    def chunks() -> Iterator[bytes]:
        for _ in range(LIMIT // 4096 + 4):
            yield b"{}\n" * 1365

    response = httpx.post(
        f"{base}/api/v1/ingest",
        content=chunks(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
        timeout=30,
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload-too-large"


def _trickle(
    base: str, parts: list[bytes], stop: threading.Event, sending: threading.Event
) -> None:
    """Send ``parts`` one every 0.2 s until they run out or ``stop`` is set; ``sending`` is
    set once the first part is on the connection."""
    try:
        with _connect(base) as sock:
            for part in parts:
                if stop.wait(0.2):
                    return
                sock.sendall(part)
                sending.set()
            stop.wait()
    except OSError:
        return  # the server may close a connection it has given up on


def test_slow_clients_do_not_stop_the_others(served: tuple[str, str], world: World) -> None:
    base, token = served
    stop = threading.Event()
    headers = b"GET /api/v1/hops HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode()
    slow_headers = [bytes([b]) for b in headers]
    body = b"{}\n" * 300
    slow_body = [
        b"POST /api/v1/verify HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + token.encode()
        + b"\r\nContent-Type: application/x-ndjson\r\nContent-Length: %d\r\n\r\n" % len(body),
        *[body[i : i + 3] for i in range(0, len(body), 3)],
    ]
    sending = [threading.Event() for _ in range(SLOW_CLIENTS)]
    threads = [
        threading.Thread(
            target=_trickle, args=(base, slow_headers if i % 2 else slow_body, stop, sending[i])
        )
        for i in range(SLOW_CLIENTS)
    ]
    for t in threads:
        t.start()
    try:
        # Every slow client is connected and has begun to trickle before the others ask.
        started = [e.wait(READY_SECONDS) for e in sending]
        assert all(started), f"{started.count(False)} slow clients never got to send"
        auth = {"Authorization": f"Bearer {token}"}
        capture = jsonl([rec(bundle(offer(world.planner, world.coder)), T0 + 1)])
        with httpx.Client(timeout=10, headers=auth) as http:
            for _ in range(10):
                assert http.get(f"{base}/api/v1/healthz").status_code == 200
                assert http.get(f"{base}/api/v1/hops").status_code == 200
            answer = http.post(
                f"{base}/api/v1/ingest",
                content=capture,
                headers={"Content-Type": "application/x-ndjson"},
            )
            assert answer.status_code == 200 and answer.json()["counts"]["verdicts"] == 1
    finally:
        stop.set()
        for t in threads:
            t.join()


@pytest.mark.parametrize("second_request", [False, True], ids=["first", "after-keep-alive"])
def test_a_client_trickling_its_headers_is_cut_off(
    served: tuple[str, str], second_request: bool
) -> None:
    """A header-read timeout (HANDOFF_TRACE_HEADER_SECONDS, 2 s here): the server closes a
    connection whose request line and headers are not all in, however steadily its octets
    come; on a kept-alive connection too, for its next request."""
    base, _ = served
    with _connect(base) as sock:
        if second_request:
            sock.sendall(b"GET /api/v1/healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _status_line(sock) == "HTTP/1.1 200 OK"
        sock.settimeout(0.25)  # the trickle's pace: an octet when nothing came back
        closed = False
        for byte in b"GET /api/v1/healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 400:
            try:
                sock.sendall(bytes([byte]))
                closed = sock.recv(65536) == b""
            except TimeoutError:
                continue  # the server is still waiting for the headers
            except OSError:
                closed = True
            if closed:
                break
        assert closed, "the server kept a connection that trickled its headers for 100 s"
