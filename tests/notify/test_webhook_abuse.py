"""Webhook targets that misbehave (issue #25), on loopback: one that trickles its answer a
byte at a time, one that answers 256 MiB, and a quick one, served by two instances of the
notifier on one database (both databases).

- A call has a total deadline, so a trickling target cannot hold a delivery.
- At most ``MAX_ANSWER`` octets of an answer are read.
- Each due delivery is claimed by one instance: every delivery reaches its target once.
- The quick target's alert arrives while the trickling target is still being waited on.
- Targets on internal addresses are refused, in the file and at call time.
- The notifications page never shows a target's credentials.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from app.notify.targets import Target, TargetError, parse_targets
from app.notify.worker import MAX_ANSWER, Notifier
from app.store.db import make_engine, transaction
from app.store.models import DeliveryRow
from tests.notify.test_webhooks import Receiver

HUGE = 256 * 1024 * 1024
TRICKLED = 6
GUARD = 120  # seconds: only a notifier that never returns waits this long


class RawServer:
    """A TCP server on loopback whose handler gets each connection's socket after the
    request head was read, and the value of its X-Handoff-Trace-Delivery header."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        self.stop = threading.Event()
        self.deliveries: list[str] = []
        self.threads: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"x-handoff-trace-delivery:"):
                    self.deliveries.append(line.split(b":", 1)[1].strip().decode())
            # The notifier closing the connection is what these targets wait for.
            with contextlib.suppress(OSError):
                self.handle(conn, self)

    def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):  # wakes the accept() under way
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join(timeout=10)
        for t in self.threads:
            t.join(timeout=10)


class Trickler:
    """Answers one byte at a time, for as long as the client stays; notes whether the quick
    target had its call while it was being waited on."""

    def __init__(self, quick_called: threading.Event) -> None:
        self.quick_called = quick_called
        self.overlapped = threading.Event()
        self.server = RawServer(self._handle)

    def _handle(self, conn: socket.socket, server: RawServer) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 1000:
            if self.quick_called.is_set():
                self.overlapped.set()
            if server.stop.wait(0.05):
                return
            conn.sendall(bytes([byte]))


class Huge:
    """Answers 200 with a 256 MiB body, counting what it could send before the client hung
    up."""

    def __init__(self) -> None:
        self.sent = 0
        self.server = RawServer(self._handle)

    def _handle(self, conn: socket.socket, server: RawServer) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % HUGE)
        block = b"\0" * 65536
        while self.sent < HUGE and not server.stop.is_set():
            conn.sendall(block)
            self.sent += len(block)


class QuickReceiver(Receiver):
    def __init__(self, called: threading.Event) -> None:
        super().__init__()
        self.called = called

    def next(self) -> tuple[dict[str, str], bytes]:
        return self.calls.get(timeout=GUARD)


@pytest.fixture
def targets() -> Iterator[tuple[Trickler, Huge, QuickReceiver, threading.Event]]:
    called = threading.Event()
    trickler, huge, quick = Trickler(called), Huge(), QuickReceiver(called)
    try:
        yield trickler, huge, quick, called
    finally:
        trickler.server.close()
        huge.server.close()
        quick.close()


def _queue(engine: Any, counts: dict[str, int]) -> None:
    with transaction(engine) as session:
        for name, n in counts.items():  # in order: the trickled ones have the lowest ids
            for i in range(n):
                session.add(
                    DeliveryRow(target=name, flag_id=i + 1, event="opened", severity="critical",
                                body='{"event": "flag.opened"}', created_at=0, next_at=0)
                )  # fmt: skip


def test_slow_and_huge_targets_on_two_instances(db_url: str, targets: Any) -> None:
    trickler, huge, quick, called = targets
    configured = [
        Target("slow", trickler.server.url, max_attempts=3),
        Target("huge", huge.server.url),
        Target("quick", quick.url),
    ]
    engines = [make_engine(db_url), make_engine(db_url)]
    notifiers = [Notifier(e, configured, allow_private=True, deadline=2.0) for e in engines]
    try:
        _queue(engines[0], {"slow": TRICKLED, "huge": 1, "quick": 1})

        def quick_seen() -> None:
            quick.next()
            called.set()

        watcher = threading.Thread(target=quick_seen, daemon=True)
        watcher.start()
        runs = [threading.Thread(target=n.deliver, daemon=True) for n in notifiers]
        for run in runs:
            run.start()
        for run in [*runs, watcher]:
            run.join(timeout=GUARD)
            assert not run.is_alive(), "a notifier is still waiting on a target"
        with transaction(engines[0]) as session:
            rows = {
                (r.target, r.flag_id): r for r in session.execute(select(DeliveryRow)).scalars()
            }
    finally:
        for n in notifiers:
            n.close()
        for e in engines:
            e.dispose()
    # Every delivery was sent once, by one of the two instances.
    assert Counter(trickler.server.deliveries) == {str(r.id): 1 for r in rows.values()
                                                   if r.target == "slow"}  # fmt: skip
    assert len(huge.server.deliveries) == 1
    # The trickled answers ran out of time and are due again later; nothing was delivered.
    for i in range(TRICKLED):
        slow = rows[("slow", i + 1)]
        assert (slow.status, slow.attempts, slow.error) == ("pending", 1, "no answer within 2 s")
    # The huge answer: its status used, at most MAX_ANSWER octets read, then hung up on (the
    # server got a few socket buffers' worth out before it noticed).
    assert (rows[("huge", 1)].status, rows[("huge", 1)].response) == ("delivered", 200)
    assert MAX_ANSWER <= huge.sent < HUGE // 8
    # The quick target was not kept waiting behind the slow one.
    assert rows[("quick", 1)].status == "delivered"
    assert trickler.overlapped.is_set()


def test_a_target_that_resolves_to_loopback_is_refused_at_call_time(db_url: str) -> None:
    receiver = Receiver()
    engine = make_engine(db_url)
    # "localhost" would be refused by the targets file; a Target made directly is the
    # stand-in for a name whose address changes after start-up (DNS rebinding).
    port = receiver.url.split(":")[2].split("/")[0]
    notifier = Notifier(engine, [Target("inside", f"http://localhost:{port}/hook")])
    try:
        _queue(engine, {"inside": 1})
        assert notifier.deliver() == 0
        with transaction(engine) as session:
            row = session.execute(select(DeliveryRow)).scalar_one()
        assert row.status == "pending" and "private" in (row.error or "")
        assert receiver.calls.empty()
    finally:
        notifier.close()
        engine.dispose()
        receiver.close()


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1", "127.1", "2130706433", "0x7f000001", "0177.0.0.1", "169.254.169.254",
        "2852039166", "0xa9fea9fe", "0.0.0.0", "0", "10.1.2.3", "172.16.0.1", "192.168.1.1",
        "100.64.0.1", "[::1]", "[::]", "[::ffff:127.0.0.1]", "[fe80::1]", "[fd00::1]",
        "localhost", "LOCALHOST.", "app.localhost",
    ],
)  # fmt: skip
def test_internal_targets_are_refused_unless_allowed(host: str) -> None:
    doc = {"targets": [{"name": "t", "url": f"http://{host}:8080/hook"}]}
    with pytest.raises(TargetError, match="HANDOFF_TRACE_WEBHOOK_ALLOW_PRIVATE"):
        parse_targets(doc)
    assert parse_targets(doc, allow_private=True)[0].name == "t"


def test_public_targets_are_accepted() -> None:
    for url in ("https://hooks.example/x", "https://93.184.215.14/x", "http://[2606:4700::1]/"):
        assert parse_targets({"targets": [{"name": "t", "url": url}]})[0].url == url


def test_a_targets_credentials_are_never_shown() -> None:
    target = Target("t", "https://user:hunter2hunter2@hooks.example:8443/services/T0/B0/XYZ?k=1")
    assert target.shown_url == "https://hooks.example:8443/…"
    assert Target("t", "https://hooks.example").shown_url == "https://hooks.example/"
