"""Durability (issue 6, item 1): an acknowledged ingest survives ``kill -9`` of the server.

A real ``handoff-trace serve`` process on SQLite and on the throwaway PostgreSQL takes
ingests over HTTP from a client in a loop and is killed with SIGKILL at random moments,
several times, then started again. Afterwards:

- every element whose ingest was acknowledged (200, no item error) is stored byte for
  byte, with its receipt and verdict;
- nothing is half-written: every element has a receipt, every receipt as ingested has a
  verdict, and ``rederive`` finds the stored derived state (verdicts and ref outcomes,
  links, hops, flags) to be exactly what the octets give;
- replay memory is in the database: an acknowledged element sent again is a
  retransmission, and a twin of an acknowledged offer is still an equivocation.

SQLite is durable here because each item commits on its own in WAL mode with
``synchronous=NORMAL`` (``app.store.db``): a commit is in the WAL file, in the operating
system's hands, before the answer is sent, so it survives the death of the process (not a
power cut, for which ``synchronous=FULL`` would be needed).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from handoff_context import Timing
from sqlalchemy import func, select

from app.ingest.pipeline import Pipeline
from app.ingest.rederive import rederive
from app.ingest.verifying import VerifyOptions
from app.store.db import make_engine, transaction
from app.store.models import ElementRow, ObservationRow, VerdictRow
from tests.conftest import World
from tests.databases import Databases
from tests.store.builders import T0, bundle, digest, jsonl, offer, rec, st, status, twin
from tests.web.conftest import make_tokens, write_trust
from tests.web.test_served import CLI, STARTUP_SECONDS, _environment, _free_port

KILLS = 3
# How many ingests the server acknowledges before each kill, drawn at random: the kill
# lands while the client's next request is in flight, at a moment counted in
# acknowledgements rather than seconds, so the test asks the same of a slow machine and a
# fast one.
ACKS_BEFORE_KILL = (5, 60)
ACK_TIMEOUT = 120  # seconds: only a server that stopped answering takes this long


def _start(url: str, trust: Path, logs: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    log = (logs / f"serve-{port}.log").open("wb")
    process = subprocess.Popen(
        [*CLI, "serve", "--port", str(port), "--db", url, "--trust", str(trust)],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=logs,
        env=_environment(),
    )
    log.close()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if process.poll() is not None:
            pytest.fail(f"serve exited with {process.returncode}")
        try:
            if httpx.get(f"{base}/api/v1/readyz", timeout=1).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"serve was not ready in {STARTUP_SECONDS} s")
        time.sleep(0.05)


class Client:
    """Posts one item at a time until the server dies; remembers what was acknowledged, and
    sets ``reached`` once ``kill_after`` items were (or when it stops for any reason)."""

    def __init__(
        self, base: str, token: str, items: list[tuple[bytes, dict[str, Any]]], kill_after: int
    ) -> None:
        self.base, self.token, self.items = base, token, items
        self.kill_after = kill_after
        self.acknowledged: list[bytes] = []
        self.reached = threading.Event()

    def run(self) -> None:
        try:
            self._post_all()
        finally:
            self.reached.set()

    def _post_all(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/x-ndjson"}
        with httpx.Client(timeout=10) as client:
            for octets, record in self.items:
                try:
                    r = client.post(f"{self.base}/api/v1/ingest", content=jsonl([record]),
                                    headers=headers)  # fmt: skip
                except httpx.HTTPError:
                    return  # the server was killed
                if r.status_code == 200 and not r.json()["errors"]:
                    self.acknowledged.append(octets)
                    if len(self.acknowledged) >= self.kill_after:
                        self.reached.set()


def _items(world: World, n: int) -> list[tuple[bytes, dict[str, Any]]]:
    """Offers, each followed by its accepted status: (octets, capture record)."""
    items = []
    for i in range(n):
        o = offer(world.planner, world.coder, iat=T0 + i % 60)
        a = status(world.coder, o, "accepted", iat=T0 + i % 60 + 1)
        items += [(o, rec(bundle(o), T0 + i % 60 + 1)), (a, rec(st(a), T0 + i % 60 + 2))]
    return items


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_acknowledged_ingests_survive_kill_9(
    kind: str, databases: Databases, world: World, tmp_path: Path
) -> None:
    url = databases.new(kind)
    engine = make_engine(url)
    try:
        _kill_and_check(engine, url, world, tmp_path)
    finally:
        engine.dispose()


def _kill_and_check(engine: Any, url: str, world: World, tmp_path: Path) -> None:
    token = make_tokens(engine)["admin"]
    trust = write_trust(world, tmp_path / "trust.json")
    todo = _items(world, 400)
    acknowledged: list[bytes] = []
    rng = random.Random(6)
    targets = [rng.randint(*ACKS_BEFORE_KILL) for _ in range(KILLS)]
    for target in targets:
        process, base = _start(url, trust, tmp_path)
        client = Client(base, token, todo, kill_after=target)
        thread = threading.Thread(target=client.run)
        thread.start()
        try:
            reached = client.reached.wait(ACK_TIMEOUT)
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            thread.join()
        assert reached, f"the server acknowledged {len(client.acknowledged)} of {target} ingests"
        assert len(client.acknowledged) >= target, "the client stopped before the kill"
        acknowledged += client.acknowledged
        todo = todo[len(client.acknowledged) + 1 :]  # the item in flight: fate unknown
    assert len(acknowledged) >= sum(targets)

    with transaction(engine) as session:
        stored = dict(session.execute(select(ElementRow.digest, ElementRow.octets)).all())
        received = set(session.execute(select(ObservationRow.digest)).scalars())
        judged = set(session.execute(select(VerdictRow.digest)).scalars())
        unjudged = session.execute(
            select(func.count())
            .select_from(ObservationRow)
            .outerjoin(VerdictRow, VerdictRow.observation_id == ObservationRow.id)
            .where(ObservationRow.via.is_(None), VerdictRow.id.is_(None))
        ).scalar_one()
    for octets in acknowledged:  # present and whole
        assert stored.get(digest(octets)) == octets
        assert digest(octets) in received and digest(octets) in judged
    assert set(stored) <= received  # no element without a receipt
    assert unjudged == 0  # no receipt without its verdict

    # Everything derived is what the stored octets give: nothing half-written.
    def pipeline_for(e: Any) -> Pipeline:
        return Pipeline(e, world.trust, VerifyOptions(at=T0 + 30), timing=Timing())

    done = rederive(engine, pipeline_for, now=T0 + 100, dry_run=True, scratch_dir=tmp_path)
    assert [d for d in done.diffs if d.differs] == [] and done.replayed.errors == []

    # Replay memory outlived the kills.
    process, base = _start(url, trust, tmp_path)
    try:
        first = next(o for o in acknowledged if parse_type(o) == "offer")
        again = _post(base, token, [rec(bundle(first), T0 + 90)])
        other = twin(world.planner, first, task="task-2")
        split = _post(base, token, [rec(bundle(other), T0 + 91)])
        flags = httpx.get(
            f"{base}/api/v1/flags?kind=equivocation",
            headers={"Authorization": f"Bearer {token}"},
        ).json()["flags"]
    finally:
        process.kill()
        process.wait()
    assert again["verdicts"][0]["outcome"] == "duplicate"
    assert split["verdicts"][0]["reason"] == "equivocation"
    assert [f["offer"] for f in flags] == [_text(digest(first))]


def parse_type(octets: bytes) -> str:
    payload = octets.split(b".")[1]
    from handoff_context import b64url_decode

    return str(json.loads(b64url_decode(payload.decode(), what="payload"))["type"])


def _text(d: bytes) -> str:
    from handoff_context import digest_text

    return digest_text(d)


def _post(base: str, token: str, records: list[Any]) -> Any:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
    response = httpx.post(f"{base}/api/v1/ingest", content=jsonl(records), headers=headers)
    assert response.status_code == 200, response.text
    return response.json()
