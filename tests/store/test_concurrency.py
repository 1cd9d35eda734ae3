"""Many workers on one PostgreSQL (issue 3, section 2): threads ingesting the same and
conflicting elements at once through the pipeline end with exactly one stored copy of each
element, exactly one equivocation flag per split, and the same hops and flags as one
worker ingesting everything alone."""

from __future__ import annotations

import random
import threading
from typing import Any

from sqlalchemy import Engine, select

from app.ingest.pipeline import IngestReport, ingest
from app.store.db import make_engine, transaction
from app.store.models import ElementRow, FlagRow, VerdictRow
from tests.databases import Databases
from tests.store.builders import (
    T0,
    bundle,
    count,
    digest,
    hops,
    jsonl,
    offer,
    pipeline,
    rec,
    snapshot,
    st,
    status,
    twin,
)
from tests.store.test_order import NOW, scenario

WORKERS = 6
SPLITS = 4  # extra equivocating hops, on top of the scenario's two


def _records() -> tuple[list[dict[str, Any]], int]:
    w, base = scenario()
    extra = []
    for i in range(SPLITS):
        first = offer(w.planner, w.coder, iat=T0 + i)
        second = twin(w.planner, first, aud=w.tester.iss)
        third = twin(w.planner, first, task=f"task-{i}")
        extra += [
            rec(bundle(first), T0 + 10 + i, w.coder.iss),
            rec(bundle(second), T0 + 11 + i, w.tester.iss),
            rec(bundle(third), T0 + 12 + i, w.coder.iss),
        ]
    return [*base, *extra], SPLITS + 2


def test_concurrent_workers_agree_with_one_worker(databases: Databases) -> None:
    records, splits = _records()
    w, _ = scenario()
    url = databases.new("postgresql")
    engine = make_engine(url)
    reports: list[IngestReport] = []
    failures: list[BaseException] = []
    start = threading.Barrier(WORKERS)

    def worker(seed: int) -> None:
        mine = random.Random(seed).sample(records, len(records))
        try:
            start.wait()
            reports.append(
                ingest(pipeline(engine, w.trust), [(f"w{seed}.jsonl", jsonl(mine))], now=NOW)
            )
        except BaseException as exc:  # reported below, with the thread's own traceback
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    serial_url = databases.new("postgresql")
    serial = make_engine(serial_url)
    try:
        assert failures == []
        assert [r.errors for r in reports] == [[]] * WORKERS
        ingest(pipeline(serial, w.trust), [("all.jsonl", jsonl(records))], now=NOW)
        # One stored copy of each element, whoever stored it first.
        assert count(engine, ElementRow) == count(serial, ElementRow)
        assert count(engine, FlagRow, FlagRow.kind == "equivocation") == splits
        # The same hops and flags as one worker ingesting everything alone, now and later.
        assert _snapshots(engine) == _snapshots(serial)
    finally:
        engine.dispose()
        serial.dispose()


def _snapshots(engine: Engine) -> Any:
    now = snapshot(engine)
    hops(engine, now=T0 + 9000)
    return now, snapshot(engine)


def test_an_offer_and_what_depends_on_it_racing_each_other(databases: Databases) -> None:
    # One worker stores offers while others store, at the same moment, a status naming
    # each offer and an offer below it without its chain. Whoever commits second must see
    # the first: no status may stay pending, every chain check must be completed.
    w, _ = scenario()
    n = 30
    parents = [offer(w.planner, w.coder, iat=T0 + i) for i in range(n)]
    accepted = [status(w.coder, p, "accepted", iat=T0 + 50) for p in parents]
    below = [offer(w.coder, w.tester, iat=T0 + 60, prev=digest(p)) for p in parents]
    streams = [
        [rec(bundle(p), T0 + 1, w.coder.iss) for p in parents],
        [rec(st(a), T0 + 51) for a in accepted],
        [rec(bundle(b), T0 + 61, w.tester.iss) for b in below],
    ]
    url = databases.new("postgresql")
    engine = make_engine(url)
    start = threading.Barrier(len(streams))
    errors: list[Any] = []

    def worker(records: list[dict[str, Any]]) -> None:
        start.wait()
        for one in records:  # one item per request, as many small clients would send
            report = ingest(pipeline(engine, w.trust), [("x.jsonl", jsonl([one]))], now=NOW)
            errors.extend(report.errors)

    threads = [threading.Thread(target=worker, args=(s,)) for s in streams]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with transaction(engine) as session:
            outcomes = session.execute(select(VerdictRow.outcome, VerdictRow.chain)).all()
        assert sorted({o for o, _ in outcomes}) == ["accept"]
        chains = [c for _, c in outcomes if c is not None and c["elements"]]
        assert len(chains) == n  # every offer below was checked against its parent
        states = {h["state"] for h in hops(engine).values()}
        assert states == {"accepted", "offered"}
    finally:
        engine.dispose()
