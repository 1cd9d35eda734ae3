"""Write behind per batch (app.store.writebehind): what a batch buffers is what it writes,
in every path the batch runner takes, including a failing item after its rows were
buffered, and the PostgreSQL batch that could not take its locks up front."""

from __future__ import annotations

from typing import Any

import pytest
from handoff_context import digest_text
from sqlalchemy import Engine, event, select
from sqlalchemy.exc import IntegrityError

import app.ingest.judge as judge_module
from app.errors import NotStored
from app.store.db import transaction
from app.store.models import ObservationRow, RefOutcomeRow, VerdictRow
from tests.conftest import World
from tests.store.builders import (
    T0,
    bundle,
    count,
    digest,
    elements,
    hop_of,
    hops,
    observations,
    offer,
    outcomes,
    rec,
    run,
    st,
    status,
)


def test_an_item_failing_after_its_rows_were_buffered_leaves_none_of_them(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    o1, o2, o3 = (offer(world.planner, world.coder) for _ in range(3))
    # o2 is stored already, so nothing but the buffer's undo keeps its second receipt out
    # (a receipt of an element not stored would fail its foreign key at the flush).
    assert outcomes(run(engine, world.trust, [rec(bundle(o2), T0 + 1)])) == ["accept"]
    real = judge_module.Judge._complete

    def failing(self: Any, known: set[bytes]) -> None:
        if digest(o2) in known:  # its observation and verdict are buffered by now
            # The item's own error (a constraint): an unavailable database would cut the
            # ingest short here instead (test_ingest.py).
            raise IntegrityError("SELECT", {}, Exception("item on fire"))
        real(self, known)

    monkeypatch.setattr(judge_module.Judge, "_complete", failing)
    report = run(engine, world.trust, [rec(bundle(o), T0 + 1) for o in (o1, o2, o3)])
    assert outcomes(report) == ["accept", "accept"]
    assert report.errors == [NotStored("capture.jsonl:2", "database error: item on fire")]
    assert set(elements(engine)) == {digest(o1), digest(o2), digest(o3)}
    assert [observations(engine, o) for o in (o1, o2, o3)] == [1, 1, 1]
    assert count(engine, VerdictRow) == 3
    assert set(hops(engine)) == {hop_of(o1), hop_of(o2), hop_of(o3)}


def test_a_pending_status_completed_in_its_own_batch_is_written_once_completed(
    engine: Engine, world: World
) -> None:
    o = offer(world.planner, world.coder)
    s = status(world.coder, o, "accepted", iat=T0 + 5)
    statements: list[str] = []

    def log(_c: Any, _cur: Any, statement: str, *_a: Any) -> None:
        statements.append(statement.lstrip().split(None, 2)[0].upper())

    event.listen(engine, "before_cursor_execute", log)
    try:
        report = run(engine, world.trust, [rec(st(s), T0 + 6), rec(bundle(o), T0 + 1)])
    finally:
        event.remove(engine, "before_cursor_execute", log)
    assert outcomes(report) == ["accept", "accept"]
    # Judged again while still buffered: the row is written as completed, never updated.
    assert "UPDATE" not in statements
    assert count(engine, ObservationRow) == 2
    assert count(engine, VerdictRow, VerdictRow.outcome == "accept") == 2
    assert count(engine, VerdictRow, VerdictRow.outcome == "pending") == 0
    assert count(engine, RefOutcomeRow) == 0


def test_what_a_batch_wrote_before_a_malformed_item_is_still_completed_after_it(
    engine: Engine, world: World
) -> None:
    # A malformed item re-derives its hop, so the batch writes its buffer before it; the
    # status written pending before it, and the offer's child, are still found after it.
    parent = offer(world.planner, world.coder, iat=T0)
    child = offer(world.coder, world.tester, iat=T0 + 5, prev=digest(parent))
    s = status(world.coder, parent, "accepted", iat=T0 + 5)
    records = [
        rec(st(s), T0 + 6),
        rec(bundle(child), T0 + 6, world.tester.iss),
        rec({"offer": 5}, T0 + 7),  # malformed: kept as evidence (app.store.rejected)
        rec(bundle(parent), T0 + 1, world.coder.iss),
    ]
    report = run(engine, world.trust, records)
    assert outcomes(report) == ["accept", "accept", "reject", "accept"]
    assert count(engine, VerdictRow, VerdictRow.outcome == "pending") == 0
    with transaction(engine) as session:
        chain = session.execute(
            select(VerdictRow.chain).where(VerdictRow.digest == digest(child))
        ).scalar_one()
    assert chain is not None and chain["carried"] is False
    assert [e["digest"] for e in chain["elements"]] == [digest_text(digest(parent))]


def _raw_tables(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tables a batch writes, as the driver reads them back (JSON as its
    stored text, booleans as stored), in a fixed order."""
    tables = ("element", "link", "host_state", "observation", "verdict", "ref_outcome")
    out = {}
    with engine.connect() as connection:
        for table in tables:
            rows = connection.exec_driver_sql(f"SELECT * FROM {table}").all()
            out[table] = sorted((tuple(repr(v) for v in row) for row in rows), key=repr)
    return out


def test_the_driver_insert_stores_what_sqlalchemy_insert_stores(
    db_url: str, databases: Any, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``db.insert_many`` (the driver's executemany, rows converted once) writes exactly
    what SQLAlchemy's INSERT wrote before it: the same rows, the same stored text."""
    from sqlalchemy.dialects.postgresql import insert as pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    from app.store import db, writebehind
    from app.store.db import make_engine

    o1, o2 = offer(world.planner, world.coder), offer(world.coder, world.planner)
    o3 = offer(world.planner, world.coder, refs=[])
    records = [
        rec(bundle(o1), T0 + 1, by=world.coder.iss),
        rec(st(status(world.coder, o1, "accepted", iat=T0 + 2)), T0 + 3),
        rec(st(status(world.coder, o2, "completed", iat=T0 + 2)), T0 + 3),  # pending
        rec(bundle(o2), T0 + 4.25),
        rec(bundle(o1), T0 + 5),  # duplicate
        rec(bundle(o3, o1), T0 + 6),
        rec({"offer": "x"}, T0 + 7),  # malformed
    ]
    kind = db_url.split(":", 1)[0].split("+", 1)[0]
    other_url = databases.new("sqlite" if kind == "sqlite" else "postgresql")
    engines = [make_engine(db_url), make_engine(other_url)]
    try:
        fast = run(engines[0], world.trust, records)

        def through_sqlalchemy(session: Any, model: Any, rows: Any, *, ignore: Any = None) -> None:
            if rows:
                dialect = session.get_bind().dialect.name
                statement = (pg_insert if dialect == "postgresql" else sqlite_insert)(model)
                if ignore is not None:
                    statement = statement.on_conflict_do_nothing(index_elements=list(ignore))
                session.connection().execute(statement, [dict(r) for r in rows])

        monkeypatch.setattr(writebehind, "insert_many", through_sqlalchemy)
        monkeypatch.setattr(db, "insert_many", through_sqlalchemy)
        slow = run(engines[1], world.trust, records)
        assert [v.to_json() for v in fast.verdicts] == [v.to_json() for v in slow.verdicts]
        stored = _raw_tables(engines[0])
        assert stored == _raw_tables(engines[1])
        assert all(stored[t] for t in ("element", "observation", "verdict"))
    finally:
        for engine in engines:
            engine.dispose()


def test_the_driver_select_reads_what_sqlalchemy_reads(db_url: str, world: World) -> None:
    """``db.select_rows`` (the driver's SQL, compiled once, plain tuples) answers exactly what
    SQLAlchemy's own execution of the same prebuilt statement answers, for every statement
    the batch memories, the write-behind (ids, buffered verdicts' neighbours), the change
    mark and the hop facts read through it, on both databases."""
    from sqlalchemy import CompoundSelect, Select

    from app.store import db, derive, host, memory, otlp, writebehind
    from app.store import records as store_records
    from app.store.db import make_engine, pair_params, select_rows
    from app.store.models import ElementRow

    o1, o2 = offer(world.planner, world.coder), offer(world.coder, world.planner)
    o3 = offer(world.planner, world.coder, refs=[])
    records = [
        rec(bundle(o1), T0 + 1, by=world.coder.iss),
        rec(st(status(world.coder, o1, "accepted", iat=T0 + 2)), T0 + 3),
        rec(bundle(o2), T0 + 4),
        rec(st(status(world.planner, o2, "canceled", iat=T0 + 5)), T0 + 6),
        rec(bundle(o3, o1), T0 + 7),
        rec(bundle(o1), T0 + 8),  # duplicate
    ]
    engine = make_engine(db_url)
    try:
        run(engine, world.trust, records)
        with transaction(engine) as session:
            stored = session.execute(select(ElementRow.digest, ElementRow.iss, ElementRow.hop))
            rows = stored.all()
            digests = [r.digest for r in rows]
            params: dict[str, Any] = {
                **pair_params({(r.iss, r.hop) for r in rows}),
                "b_digests": digests,
                "b_offers": digests,
                "b_downstream": digests,
                "b_trust": world.trust.fingerprint,
            }
            statements = [
                derive._OFFER_FIRSTS_MANY,
                derive._OFFER_ROWS,
                derive._STATUSES,
                derive._REJECTIONS_MANY,
                derive._REFUSED_MANY,
                derive._REJECTED_MANY,
                derive._DOWNSTREAM_MANY,
                derive._FIRST_CANCELS,
                host._HOST_MANY,
                memory._STORED_ROWS,
                memory._SEEN_AMONG,
                memory._REPLAY_AMONG,
                memory._SIGNATURES_CACHED,
                derive._ELEMENT_HOPS,
                derive._PARENTS,
                derive._OFFER_HOPS,
                store_records._NAMED_BY_PENDING,
                store_records._CHILDREN_OF,
                store_records._CHILDREN,
                store_records._OBSERVED_OFFERS,
                store_records._PENDING_STATUSES,
                writebehind._MAX_ID["observation"],
                writebehind._MAX_ID["verdict"],
                otlp._NEXT,
            ]
            answered = 0
            for statement in statements:
                assert isinstance(statement, Select | CompoundSelect)
                wanted = {k: v for k, v in params.items() if k in statement.compile().params}
                through_sqlalchemy = [
                    tuple(r) for r in session.connection().execute(statement, wanted)
                ]
                through_driver = select_rows(session, statement, wanted)
                # Twice: the second run uses the conversions cached by the first.
                assert select_rows(session, statement, wanted) == through_driver
                assert sorted(through_driver, key=repr) == sorted(through_sqlalchemy, key=repr)
                assert all(type(r) is tuple for r in through_driver)
                read = db._read(session.connection().dialect, statement)
                if read.arrays is not None:
                    # PostgreSQL: one text, each list sent as an array per column.
                    sql = read.arrays.sql
                    assert "POSTCOMPILE" not in sql
                    assert all(f"%({n})b" in sql for ns in read.arrays.lists.values() for n in ns)
                else:
                    # The second run came from the plan kept for the lists' shape.
                    plans = read.shapes
                    assert plans and all(isinstance(p, db._Shape) for p in plans.values())
                # Empty lists read what SQLAlchemy's empty IN reads.
                empty = {k: [] if isinstance(v, list) else v for k, v in wanted.items()}
                assert select_rows(session, statement, empty) == [
                    tuple(r) for r in session.connection().execute(statement, empty)
                ]
                answered += bool(through_driver)
            assert answered >= 8, "most of the statements read something back"
    finally:
        engine.dispose()
