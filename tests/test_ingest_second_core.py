"""Bulk ingest with the forked signature helper on the second core (app.ingest.second_core):
the same verdicts and the same store as without it, from a capture file that the parent and
the child each read with an offset of their own. The helper is forced on (its gate wants an
idle second core and a large input, ``app.ingest.forked``)."""

from __future__ import annotations

import os
import select
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

import app.ingest.forked as forked
from app.ingest.batches import BATCH_ITEMS
from app.ingest.pipeline import ingest
from app.ingest.second_core import SecondCore
from app.ingest.verifying import VerifyOptions
from app.store.db import make_engine
from tests.conftest import World
from tests.databases import Databases
from tests.store.builders import (
    T0,
    bundle,
    digest,
    elements,
    flags,
    hops,
    jsonl,
    offer,
    pipeline,
    rec,
)

ITEMS = BATCH_ITEMS + 150  # two batches: the child only verifies a batch ahead


@dataclass(frozen=True)
class Capture:
    path: Path
    sent: list[bytes]  # the offers in capture order
    good: list[bool]  # whether each one's signature verifies


class Marks:
    """A signature cache that only remembers."""

    def __init__(self) -> None:
        self.pairs: set[tuple[bytes, str]] = set()

    def verified(self, digest: bytes, trust_fingerprint: str) -> bool:
        return (digest, trust_fingerprint) in self.pairs

    def mark_verified(self, digest: bytes, trust_fingerprint: str) -> None:
        self.pairs.add((digest, trust_fingerprint))


def tampered(octets: bytes) -> bytes:
    """The offer with one character of its signature changed (never a padding bit)."""
    i = len(octets) - 10
    return octets[:i] + (b"A" if octets[i : i + 1] != b"A" else b"B") + octets[i + 1 :]


@pytest.fixture(scope="module")
def capture(world: World, tmp_path_factory: pytest.TempPathFactory) -> Capture:
    """ITEMS offers as JSON Lines: every 7th with a bad signature, every 11th sent twice."""
    sent: list[bytes] = []
    good: list[bool] = []
    for i in range(ITEMS):
        o = offer(world.planner, world.coder, iat=T0 + i % 20)
        sent.append(tampered(o) if i % 7 == 3 else o)
        good.append(i % 7 != 3)
        if i % 11 == 5:
            sent.append(sent[-1])
            good.append(good[-1])
    path = tmp_path_factory.mktemp("second-core") / "capture.jsonl"
    path.write_bytes(jsonl([rec(bundle(o), T0 + 25, world.coder.iss) for o in sent]))
    return Capture(path, sent, good)


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The helper forced on; returns how many digests each batch found marked."""
    monkeypatch.setattr(forked, "idle_core", lambda: True)
    monkeypatch.setattr(forked, "MIN_OCTETS", 0)
    # Never stopped for a starved parent: here the parent waits on the child's pipe.
    monkeypatch.setattr(forked, "MIN_SHARE", 0.0)
    marked: list[int] = []
    real = forked.Helper.before

    def before(self: forked.Helper, position: int, cache: Any) -> int:
        marked.append(real(self, position, cache))
        return marked[-1]

    monkeypatch.setattr(forked.Helper, "before", before)
    return marked


def test_ingest_with_the_helper_stores_what_ingest_without_it_stores(
    engine: Engine,
    databases: Databases,
    db_url: str,
    world: World,
    capture: Capture,
    forced: list[int],
) -> None:
    path = capture.path
    alone = make_engine(databases.new("postgresql" if "postgresql" in db_url else "sqlite"))
    try:
        with path.open("rb") as file:
            plain = ingest(pipeline(alone, world.trust), [("capture.jsonl", file)], now=T0 + 30)
        assert forced == []  # without ``fork`` no helper starts
        with path.open("rb") as file:
            helped = ingest(
                pipeline(engine, world.trust), [("capture.jsonl", file)], now=T0 + 30, fork=True
            )
        assert len(forced) == 2  # asked before each batch
        assert [v.to_json() for v in helped.verdicts] == [v.to_json() for v in plain.verdicts]
        outcomes = {v.outcome.value for v in helped.verdicts}
        assert {"accept", "reject", "duplicate"} <= outcomes
        assert elements(engine) == elements(alone)
        assert hops(engine) == hops(alone)
        assert flags(engine) == flags(alone)
    finally:
        alone.dispose()


def test_the_child_sends_exactly_the_signatures_that_verify_a_batch_ahead(
    world: World, capture: Capture, forced: list[int]
) -> None:
    options = VerifyOptions(at=T0 + 30)
    with capture.path.open("rb") as file:
        file.read(100)  # the child reads from where the parent is, on an offset of its own
        file.seek(0)
        second = SecondCore.start(
            [("capture.jsonl", file)],
            trust=world.trust,
            max_element=options.max_element_bytes,
            skew=options.skew,
            content_type=None,
        )
        assert second is not None
        assert file.tell() == 0
    cache = Marks()
    try:
        while second.helper.alive:  # until the child has sent all and closed its end
            select.select([second.helper.answers], [], [])
            second.mark(cache)
    finally:
        second.stop()
    fingerprint = world.trust.fingerprint
    # Position 0: the child skips the parent's first batch, and sends no bad signature.
    ahead = zip(capture.sent[BATCH_ITEMS:], capture.good[BATCH_ITEMS:], strict=True)
    assert cache.pairs == {(digest(o), fingerprint) for o, good in ahead if good}
    assert not any(cache.verified(digest(o), fingerprint) for o in capture.sent[:BATCH_ITEMS])


PARENT = """
import os, sys
from app.ingest.forked import die_with_parent
hold = int(sys.argv[1])
parent = os.getpid()
pid = os.fork()
if pid == 0:  # the helper's child, as Helper.start forks it: waits on a pipe forever
    die_with_parent(parent)
    os.read(hold, 1)
    os._exit(0)
print(pid, flush=True)
os.read(hold, 1)  # the parent waits too, until killed
"""


def test_the_child_dies_with_its_parent(tmp_path: Path) -> None:
    """A parent killed with -9 leaves no helper behind holding its database connections
    and the writer lock's file (``forked.die_with_parent``)."""
    import signal
    import subprocess
    import sys

    read_end, write_end = os.pipe()  # never written: both processes block on it
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(read_end)],
        stdout=subprocess.PIPE,
        pass_fds=(read_end,),
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        watch = os.pidfd_open(child)
        try:
            assert select.select([watch], [], [], 0)[0] == []  # the child runs
            parent.send_signal(signal.SIGKILL)
            parent.wait()
            # Readable once the child has ended (a bound, not a wait for readiness).
            assert select.select([watch], [], [], 30)[0] == [watch]
        finally:
            os.close(watch)
    finally:
        os.close(read_end)
        os.close(write_end)
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()  # type: ignore[union-attr]
