"""Fault drills (issue 20): a database that cannot be written never gets a 200.

A real ``handoff-trace serve`` on SQLite or PostgreSQL, and real faults: the PostgreSQL
server crashing mid-stream (``pg_ctl -m immediate``) and coming back, a full disk (a small
tmpfs holding the SQLite file, or the PostgreSQL database's tablespace), a read-only
database (the tmpfs remounted read-only; PostgreSQL's ``default_transaction_read_only``).
Before, during and after each fault a plain HTTP client and the handoff-context Reporter
keep sending. Every record the service acknowledged (a 200, or not named as not stored in
a 503's answer) must be in the store, and nothing twice: the plain client's records carry
no observation id, so a record acknowledged and sent again would show as a second
observation. What was not stored is sent again after the fault and stored; the reporter
delivers everything; ``/readyz`` is not ready during the fault and ready after it.

SQLite has no server to restart: its drills are the full disk and the read-only file.
The tmpfs drills need root (``mount``), which CI has.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from handoff_context import Signer, handoff_digest
from handoff_context.carry import A2A_EXTENSION_URI
from handoff_context.reporter import Reporter
from sqlalchemy import event, func, select

from app.settings import Settings
from app.store.db import make_engine, transaction
from app.store.models import ObservationRow
from app.web.app import create_app
from tests.conftest import T0, World
from tests.databases import Databases
from tests.live.servers import serving as live_serving
from tests.live.servers import wait_until
from tests.store.builders import DIALOG, bundle, jsonl, offer, rec
from tests.web.conftest import make_tokens, write_trust
from tests.web.test_served import CLI, _environment, serving

POST = 10  # records per request
_LINE = re.compile(r"request:([0-9]+)")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


# --- the faults ----------------------------------------------------------------------


Serve = Callable[[str, Path, Path], contextlib.AbstractContextManager[str]]


@dataclass
class Fault:
    url: str
    on: Callable[[], None]
    off: Callable[[], None]
    serve: Serve = serving  # a real ``handoff-trace serve``


@contextlib.contextmanager
def tmpfs(path: Path, *, size: str = "24m", owner: str | None = None) -> Iterator[Path]:
    path.mkdir()
    options = f"size={size},mode=0777"
    if owner is not None:
        user = pwd.getpwnam(owner)
        options = f"size={size},mode=0700,uid={user.pw_uid},gid={user.pw_gid}"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path, *, leave: int = 0) -> Path:
    """A file that takes every free byte of the file system holding ``directory``, but
    ``leave``."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for block in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * block)
        if leave:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)
    return filler


@contextlib.contextmanager
def sqlite_full_disk(databases: Databases, tmp: Path) -> Iterator[Fault]:
    with tmpfs(tmp / "disk") as disk:
        shutil.copyfile(Path(databases.new("sqlite").removeprefix("sqlite:///")), disk / "t.db")
        fillers: list[Path] = []
        yield Fault(
            f"sqlite:///{disk / 't.db'}",
            on=lambda: fillers.append(fill(disk)),
            off=lambda: fillers.pop().unlink(),
        )


@contextlib.contextmanager
def sqlite_read_only(databases: Databases, tmp: Path) -> Iterator[Fault]:
    """SQLite's own read-only mode (``PRAGMA query_only``) on every connection the service
    takes from its pool: each write fails with SQLITE_READONLY, "attempt to write a
    readonly database". A file system cannot be made read-only under a running service
    here: the kernel refuses to remount while files are open for writing (EBUSY), and
    root ignores file modes. So the service runs in this process, under uvicorn on
    loopback, where the test can reach its engine."""
    read_only = threading.Event()

    def query_only(dbapi_connection: Any, *_: Any) -> None:
        value = "ON" if read_only.is_set() else "OFF"
        dbapi_connection.execute(f"PRAGMA query_only = {value}")

    @contextlib.contextmanager
    def serve(url: str, trust: Path, logs: Path) -> Iterator[str]:
        app = create_app(Settings(database_url=url, trust_file=trust))
        with live_serving(app, lifespan="on") as base:
            event.listen(app.state.service.engine, "checkout", query_only)
            yield base

    yield Fault(databases.new("sqlite"), on=read_only.set, off=read_only.clear, serve=serve)


@contextlib.contextmanager
def postgresql_restart(databases: Databases, tmp: Path) -> Iterator[Fault]:
    """The server crashes (``pg_ctl -m immediate``) and is started again. The test
    cluster runs with ``synchronous_commit=off`` for speed, which acknowledges commits
    that a crash then loses (this drill found it: five records answered 200 were gone
    after the restart). A 200 is only as durable as the database's commit, so the
    drill's database commits synchronously."""
    url = databases.new("postgresql")
    cluster = databases.cluster
    assert cluster is not None
    name = url.rsplit("/", 1)[1]
    with cluster.admin() as admin:
        admin.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = on')  # type: ignore[arg-type]
    yield Fault(url, on=cluster.crash, off=cluster.start_again)


@contextlib.contextmanager
def postgresql_read_only(databases: Databases, tmp: Path) -> Iterator[Fault]:
    url = databases.new("postgresql")
    cluster = databases.cluster
    assert cluster is not None

    def read_only(on: bool) -> Callable[[], None]:
        def switch() -> None:
            with cluster.admin() as admin:
                admin.execute(
                    "ALTER SYSTEM SET default_transaction_read_only = on"
                    if on
                    else "ALTER SYSTEM RESET default_transaction_read_only"
                )
                admin.execute("SELECT pg_reload_conf()")

        return switch

    try:
        yield Fault(url, on=read_only(True), off=read_only(False))
    finally:
        read_only(False)()


@contextlib.contextmanager
def postgresql_full_disk(databases: Databases, tmp: Path) -> Iterator[Fault]:
    """The database in a tablespace of its own on a small tmpfs: tables, indexes and
    temporary tables live there (the write-ahead log stays in the data directory)."""
    databases.new("postgresql")  # the cluster, with its migrated template
    cluster = databases.cluster
    assert cluster is not None
    name = f"full_{os.getpid()}"
    # Beside the cluster (whose parents the server can reach), not under pytest's
    # root-only temporary directory.
    with tmpfs(cluster.root / name, size="48m", owner="postgres") as space:
        with cluster.admin() as admin:
            admin.execute(f"CREATE TABLESPACE {name} LOCATION '{space}'")  # type: ignore[arg-type]
            admin.execute(
                f'CREATE DATABASE "{name}" TEMPLATE "template_store" TABLESPACE {name}'  # type: ignore[arg-type]
            )
        fillers: list[Path] = []
        try:
            yield Fault(
                cluster.url(name),
                on=lambda: fillers.append(fill(space)),
                off=lambda: fillers.pop().unlink(),
            )
        finally:
            with cluster.admin() as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
                admin.execute(f"DROP TABLESPACE IF EXISTS {name}")  # type: ignore[arg-type]


FAULTS = {
    "sqlite-full-disk": pytest.param(sqlite_full_disk, marks=as_root),
    "sqlite-read-only": pytest.param(sqlite_read_only, marks=as_root),
    "postgresql-restart": pytest.param(postgresql_restart),
    "postgresql-read-only": pytest.param(postgresql_read_only),
    "postgresql-full-disk": pytest.param(postgresql_full_disk, marks=as_root),
}


# --- the senders ---------------------------------------------------------------------


@dataclass
class Client:
    """A plain HTTP client that believes the service: a 200 stored everything; a 503
    stored all but what it names (``errors``, and every record from ``not_stored_from``
    on), which is kept to be sent again."""

    base: str
    token: str
    acknowledged: list[bytes] = field(default_factory=list)
    pending: list[tuple[bytes, dict[str, Any]]] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)

    def post(self, items: list[tuple[bytes, dict[str, Any]]]) -> int:
        answer = httpx.post(
            f"{self.base}/api/v1/ingest",
            content=jsonl([record for _, record in items]),
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/x-ndjson",
            },
            timeout=120,
        )
        self.statuses[answer.status_code] += 1
        if answer.status_code == 200:
            assert answer.json()["stored"] is True
            self.acknowledged += [d for d, _ in items]
            return 200
        assert answer.status_code == 503, answer.text
        assert int(answer.headers["Retry-After"]) > 0
        left = not_stored(answer.json(), len(items))
        for i, item in enumerate(items):
            if i in left:
                self.pending.append(item)
            else:
                self.acknowledged.append(item[0])
        return 503

    def send(self, items: list[tuple[bytes, dict[str, Any]]]) -> None:
        for start in range(0, len(items), POST):
            self.post(items[start : start + POST])

    def send_again(self) -> None:
        """What was not stored, until it is (the fault is over)."""
        for _ in range(10):
            if not self.pending:
                return
            again, self.pending = self.pending, []
            self.send(again)
        assert not self.pending


def not_stored(answer: dict[str, Any], n: int) -> set[int]:
    """Positions (0-based) a 503 answer says were not stored; every one when it is not
    the ingest's answer (the service refused the request before reading it)."""
    if "counts" not in answer:
        return set(range(n))
    assert len(answer["errors"]) == answer["counts"]["errors"]
    left = set()
    envelope = [e for e in answer["envelope_errors"] if e.get("not_stored")]
    for error in [*answer["errors"], *envelope]:
        found = _LINE.match(error["source"])
        if found is None:  # not a record's (host task states): all again
            return set(range(n))
        left.add(int(found.group(1)) - 1)
    if answer["not_stored_from"] is not None:
        found = _LINE.match(answer["not_stored_from"])
        assert found is not None
        left |= set(range(int(found.group(1)) - 1, n))
    listed = {int(_LINE.match(v["source"]).group(1)) - 1 for v in answer["verdicts"]}  # type: ignore[union-attr]
    assert not listed & left, "a verdict is listed only for what was stored"
    return left


def a2a_message(octets: bytes, n: int) -> dict[str, Any]:
    message = {
        "messageId": f"m-{n}",
        "contextId": DIALOG,
        "role": "ROLE_USER",
        "parts": [{"text": "go"}],
        "metadata": {A2A_EXTENSION_URI: bundle(octets)},
        "extensions": [A2A_EXTENSION_URI],
    }
    return {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": message}}


def ready(base: str) -> int:
    return httpx.get(f"{base}/api/v1/readyz", timeout=30).status_code


# --- the drill -----------------------------------------------------------------------


@pytest.mark.parametrize("make_fault", FAULTS.values(), ids=FAULTS.keys())
def test_a_fault_loses_nothing_acknowledged_and_stores_nothing_twice(
    make_fault: Any, databases: Databases, world: World, tmp_path: Path
) -> None:
    signer: Signer = world.planner
    made = [offer(signer, world.coder) for _ in range(60)]
    client_items = [(handoff_digest(o), rec(bundle(o), T0 + 1)) for o in made[:45]]
    reported = made[45:]
    with make_fault(databases, tmp_path) as fault:
        engine = make_engine(fault.url)
        try:
            token = make_tokens(engine)["ingest"]
        finally:
            engine.dispose()
        trust = write_trust(world, tmp_path / "trust.json")
        with fault.serve(fault.url, trust, tmp_path) as base:
            client = Client(base, token)
            reporter = Reporter(
                base,
                token,
                receiver=world.coder.iss,
                batch_size=5,
                interval=0.02,
                max_backoff=0.3,
                handle_sigterm=False,
            )
            try:
                client.send(client_items[:15])
                for n, octets in enumerate(reported[:5]):
                    reporter.observe_received(a2a_message(octets, n))
                assert reporter.flush(60)
                assert client.statuses == Counter({200: 2})

                fault.on()
                try:
                    retries, delivered = reporter.stats.retries, reporter.stats.delivered
                    for n, octets in enumerate(reported[5:10], start=5):
                        reporter.observe_received(a2a_message(octets, n))
                    client.send(client_items[15:30])
                    assert client.statuses[503] >= 1, "the fault was felt"
                    assert ready(base) == 503  # not ready during the fault
                    # The reporter sends during the fault: refused and kept to try again,
                    # or stored (on a full disk SQLite still commits a small batch into
                    # the space of a WAL a checkpoint emptied; it is counted below).
                    wait_until(
                        lambda: (
                            reporter.stats.retries > retries
                            or reporter.stats.delivered == delivered + 5
                        ),
                        what="the reporter trying during the fault",
                        timeout=60,
                    )
                finally:
                    fault.off()
                wait_until(lambda: ready(base) == 200, what="ready after the fault", timeout=60)

                client.send_again()
                client.send(client_items[30:])
                for n, octets in enumerate(reported[10:], start=10):
                    reporter.observe_received(a2a_message(octets, n))
                assert reporter.flush(120), reporter.stats
            finally:
                reporter.close(5)
        stats = reporter.stats
        assert (stats.delivered, stats.dropped, stats.refused) == (len(reported), 0, 0)

        engine = make_engine(fault.url)
        try:
            with transaction(engine) as session:
                stored = dict(
                    session.execute(
                        select(ObservationRow.digest, func.count()).group_by(ObservationRow.digest)
                    ).all()
                )
        finally:
            engine.dispose()
    assert set(client.acknowledged) <= set(stored), "every acknowledged record is stored"
    everything = [d for d, _ in client_items] + [handoff_digest(o) for o in reported]
    missing = [everything.index(d) for d in set(everything) - set(stored)]
    assert not missing, (sorted(missing), client.statuses, reporter.stats)
    assert sorted(stored) == sorted(everything)
    assert set(stored.values()) == {1}, "none twice"
    assert len(client.acknowledged) == len(client_items) == len(set(client.acknowledged))


@as_root
def test_the_cli_says_what_it_did_not_store_and_exits_non_zero(
    databases: Databases, world: World, tmp_path: Path
) -> None:
    trust = write_trust(world, tmp_path / "trust.json")
    records = [
        {**rec(bundle(offer(world.planner, world.coder)), T0 + 1), "id": f"obs-{n}"}
        for n in range(600)
    ]
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(jsonl(records))
    with sqlite_full_disk(databases, tmp_path) as fault:
        command = [*CLI, "ingest", "--db", fault.url, "--trust", str(trust), str(capture)]
        # Room for the first batch or so: the disk fills up while the command runs.
        filler = fill(Path(fault.url.removeprefix("sqlite:///")).parent, leave=256 * 1024)
        try:
            full = subprocess.run(command, capture_output=True, text=True, env=_environment())
        finally:
            filler.unlink()
        assert full.returncode == 1, full.stderr
        assert "the database could not be written: nothing from" in full.stderr
        again = subprocess.run(command, capture_output=True, text=True, env=_environment())
        assert "could not be written" not in again.stderr, again.stderr
        engine = make_engine(fault.url)
        try:
            with transaction(engine) as session:
                keys = session.execute(select(ObservationRow.observation_key)).scalars().all()
        finally:
            engine.dispose()
    assert sorted(keys) == sorted(f"obs-{n}:0" for n in range(600))
