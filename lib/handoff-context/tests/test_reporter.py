"""The reporter against a real HTTP server on loopback that can be told to fail."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from handoff_context.reporter import A2A_EXTENSION_URI, MCP_META_KEY, Reporter

RECEIVER = "spiffe://b.example/agent/coder"


class Service:
    """Records every posted batch; answers ``status`` (503 to play down)."""

    def __init__(self) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.headers: list[dict[str, str]] = []
        self.status = 200
        # Given the posted records, which to store and the answer (status, body): stands
        # in for the service's own 503 naming what it did not store.
        self.partial: Callable[[list[dict[str, Any]]], tuple[list[int], bytes]] | None = None
        self.arrived = threading.Condition()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                answer = b"{}"
                with service.arrived:
                    status = service.status
                    records = [json.loads(line) for line in body.decode().splitlines()]
                    if service.partial is not None:
                        kept, answer = service.partial(records)
                        service.batches.append([records[i] for i in kept])
                        status = 200 if len(kept) == len(records) else 503
                    elif status == 200:
                        service.batches.append(records)
                        service.headers.append(dict(self.headers))
                    service.arrived.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def records(self) -> list[dict[str, Any]]:
        return [r for batch in self.batches for r in batch]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service() -> Iterator[Service]:
    s = Service()
    yield s
    s.close()


def a2a_send(n: int) -> dict[str, Any]:
    message = {
        "messageId": f"m-{n}",
        "contextId": "ctx-1",
        "role": "ROLE_USER",
        "parts": [{"text": "go"}],
        "metadata": {A2A_EXTENSION_URI: {"offer": f"e.{n}.x"}},
        "extensions": [A2A_EXTENSION_URI],
    }
    return {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": message}}


def test_observations_become_capture_records_in_batches(service: Service) -> None:
    reporter = Reporter(service.url, "tok", receiver=RECEIVER, batch_size=3, interval=0.05)
    try:
        reporter.observe_received(a2a_send(1))
        reporter.observe_sent({"jsonrpc": "2.0", "id": 2, "result": {"_meta": {MCP_META_KEY: {}}}})
        task = {
            "statusUpdate": {"taskId": "t", "contextId": "ctx-2", "status": {"state": "working"}}
        }
        reporter.observe_received(json.dumps(task))  # JSON text is read too
        reporter.observe_received({"jsonrpc": "2.0", "method": "ping"})  # nothing to report
        assert reporter.flush(5)
    finally:
        reporter.close()
    records = service.records
    assert [r["payload"] for r in records] == [
        a2a_send(1),
        {"jsonrpc": "2.0", "id": 2, "result": {"_meta": {MCP_META_KEY: {}}}},
        task,
    ]
    assert [r.get("received_by") for r in records] == [RECEIVER, None, RECEIVER]
    assert [r.get("dialog") for r in records] == ["ctx-1", None, "ctx-2"]
    assert all(isinstance(r["received_at"], float) for r in records)
    assert len({r["id"] for r in records}) == 3
    assert service.headers[0]["Authorization"] == "Bearer tok"
    assert service.headers[0]["Content-Type"] == "application/x-ndjson"
    stats = reporter.stats
    assert (stats.observed, stats.ignored, stats.delivered, stats.queued) == (3, 1, 3, 0)


def test_a_service_that_fails_gets_the_same_records_again(service: Service) -> None:
    service.status = 503
    reporter = Reporter(service.url, "tok", receiver=RECEIVER, interval=0.01, max_backoff=0.05)
    try:
        for n in range(5):
            reporter.observe_received(a2a_send(n))
        with service.arrived:  # the service refused at least one post
            service.arrived.wait_for(lambda: reporter.stats.retries >= 1, timeout=10)
            service.status = 200
        assert reporter.flush(10)
    finally:
        reporter.close()
    ids = [r["id"] for r in service.records]
    assert len(ids) == 5 == len(set(ids))
    assert reporter.stats.retries >= 1 and reporter.stats.delivered == 5


def test_a_service_away_for_thousands_of_attempts_still_gets_everything() -> None:
    """The backoff doubles from ``interval`` up to ``max_backoff``; after more failed
    attempts than a float's exponent allows it must still work (it once overflowed and
    ended the sender thread, so a long outage lost everything queued after it)."""
    failures = 1500
    posts: list[bytes] = []

    def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
        posts.append(body)
        if len(posts) <= failures:
            raise OSError("connection refused")
        return 200

    reporter = Reporter(
        "http://x", "t", receiver=RECEIVER, interval=0.001, max_backoff=0.0001, post=post
    )
    try:
        reporter.observe_received(a2a_send(1))
        assert reporter.flush(60), reporter.stats
    finally:
        reporter.close()
    assert reporter.stats.retries == failures and reporter.stats.delivered == 1
    assert len(posts) == failures + 1


def test_while_the_service_is_away_the_oldest_are_dropped_and_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reporter = Reporter(
        f"http://127.0.0.1:{port}", "t", receiver=RECEIVER, batch_size=2, max_queue=4
    )
    try:
        with caplog.at_level(logging.WARNING, logger="handoff_context.reporter"):
            for n in range(7):
                reporter.observe_received(a2a_send(n))
        stats = reporter.stats
        assert (stats.observed, stats.dropped, stats.queued) == (7, 3, 4)
        assert "dropped the oldest" in caplog.text
        assert reporter.flush(0.2) is False  # nobody to deliver to: it says so, in time
    finally:
        reporter.close(0.2)


def test_a_refused_batch_is_dropped_not_retried(service: Service) -> None:
    service.status = 400
    reporter = Reporter(service.url, "t", receiver=RECEIVER, interval=0.01)
    try:
        reporter.observe_received(a2a_send(1))
        assert reporter.flush(5)
    finally:
        reporter.close()
    assert (reporter.stats.refused, reporter.stats.retries, reporter.stats.delivered) == (1, 0, 0)


def test_it_never_raises_into_the_agent(service: Service) -> None:
    reporter = Reporter(service.url, "t", receiver=RECEIVER)
    try:
        reporter.observe_received(object())
        reporter.observe_received(b"\xff not json")
        nan = {"messageId": "m", "metadata": {A2A_EXTENSION_URI: {"offer": float("nan")}}}
        reporter.observe_sent(nan)
    finally:
        reporter.close()
    # A NaN is not JSON (the service parses strictly): refused here, not sent.
    assert reporter.stats.errors == 3 and reporter.stats.observed == 0


def test_it_flushes_at_interpreter_exit(service: Service) -> None:
    script = (
        "from handoff_context.reporter import Reporter\n"
        f"r = Reporter({service.url!r}, 't', receiver='me', interval=60)\n"
        f"r.observe_received({a2a_send(9)!r})\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert [r["payload"] for r in service.records] == [a2a_send(9)]


def test_an_asyncio_agent_reports_and_flushes_without_blocking_its_loop(service: Service) -> None:
    import asyncio

    async def agent() -> tuple[bool, int]:
        reporter = Reporter(service.url, "t", receiver=RECEIVER, interval=0.01)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        running = asyncio.create_task(ticker())
        for n in range(3):
            reporter.observe_received(a2a_send(n))
        flushed = await reporter.aflush(10)
        running.cancel()
        reporter.close()
        return flushed, ticks

    flushed, ticks = asyncio.run(agent())
    assert flushed and len(service.records) == 3
    assert ticks > 0  # the loop kept running while the flush waited


def test_a_503_that_names_what_was_not_stored_gets_exactly_that_again(service: Service) -> None:
    """The service stored the first three records, failed the fourth on its own and was
    cut short at the fifth: only the fourth and everything from the fifth on come again."""
    attempts: list[list[str]] = []

    def partial(records: list[dict[str, Any]]) -> tuple[list[int], bytes]:
        attempts.append([r["id"] for r in records])
        if len(attempts) > 1:
            return list(range(len(records))), b"{}"
        answer = {
            "verdicts": [],
            "counts": {"errors": 1},
            "errors": [{"source": "request:4", "detail": "database error: x"}],
            # An invalid envelope item, kept as evidence: stored, not to be sent again.
            "envelope_errors": [{"source": "request:2", "detail": "schema: x"}],
            "stored": False,
            "not_stored_from": "request:5",
        }
        return [0, 1, 2], json.dumps(answer).encode()

    service.partial = partial
    reporter = Reporter(
        service.url, "t", receiver=RECEIVER, batch_size=6, interval=0.01, max_backoff=0.05
    )
    try:
        for n in range(6):
            reporter.observe_received(a2a_send(n))
        assert reporter.flush(10)
    finally:
        reporter.close()
    first, second = attempts
    assert second == [first[3], first[4], first[5]]
    ids = [r["id"] for r in service.records]
    assert sorted(ids) == sorted(first) and len(set(ids)) == 6
    assert (reporter.stats.delivered, reporter.stats.retries) == (6, 1)


def test_an_unreadable_503_gets_the_whole_batch_again(service: Service) -> None:
    attempts: list[int] = []

    def partial(records: list[dict[str, Any]]) -> tuple[list[int], bytes]:
        attempts.append(len(records))
        return ([], b"not json") if len(attempts) == 1 else (list(range(len(records))), b"{}")

    service.partial = partial
    reporter = Reporter(service.url, "t", receiver=RECEIVER, interval=0.01, max_backoff=0.05)
    try:
        for n in range(3):
            reporter.observe_received(a2a_send(n))
        assert reporter.flush(10)
    finally:
        reporter.close()
    assert attempts == [3, 3] and reporter.stats.delivered == 3


def test_what_is_left_at_close_is_spooled_and_sent_at_the_next_start(
    service: Service, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "reporter.spool"
    service.status = 503
    first = Reporter(service.url, "t", receiver=RECEIVER, interval=0.01, spool=spool)
    for n in range(4):
        first.observe_received(a2a_send(n))
    with caplog.at_level(logging.WARNING, logger="handoff_context.reporter"):
        assert first.close(0.3) is False
    assert "could not deliver 4 observations" in caplog.text and str(spool) in caplog.text
    assert first.stats.spooled == 4 and oct(spool.stat().st_mode & 0o777) == "0o600"
    assert len(spool.read_bytes().splitlines()) == 4
    service.status = 200
    second = Reporter(service.url, "t", receiver=RECEIVER, interval=0.01, spool=spool)
    try:
        assert second.flush(10)
    finally:
        second.close()
    assert [r["payload"] for r in service.records] == [a2a_send(n) for n in range(4)]
    assert second.stats.unspooled == 4 and spool.read_bytes() == b""


def test_sigterm_closes_the_reporter_and_keeps_what_is_left(tmp_path: Path) -> None:
    """A process ended by SIGTERM's default action runs no exit handlers: the reporter's
    own handler closes it first (spooling what the absent service did not take), then
    ends the process by the signal as before."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spool = tmp_path / "spool"
    script = (
        "import logging, os, signal\n"
        "logging.basicConfig()\n"
        "from handoff_context.reporter import Reporter\n"
        f"r = Reporter('http://127.0.0.1:{port}', 't', receiver='me', exit_timeout=0.2,"
        f" spool={str(spool)!r})\n"
        f"r.observe_received({a2a_send(7)!r})\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "signal.pause()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == -15  # ended by the signal, as without the reporter
    assert b"could not deliver 1 observations" in done.stderr
    [line] = spool.read_bytes().splitlines()
    assert json.loads(line)["payload"] == a2a_send(7)
