"""The envelope stage's set-based path (``app.ingest.envelope``, ``app.store.envelopes``)
on both databases: the items it keeps in memory are the items the store reads back, and
the ledgers it derives for many cases at once, with what it already read, are the ledgers
of each case derived alone from the store."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from handoff_context import AvailableObject, ObjectIndex, TrustStore
from sqlalchemy import Engine, select

from app.capture.formats import CaptureItem
from app.demo import DemoConfig, DemoPaths, write_demo
from app.envelope.extract import find_items
from app.envelope.ledger import CaseRules
from app.ingest.cases import (
    KnownItems,
    case_ledger,
    case_ledgers,
    cases_items,
    derive_cases,
    stored_as,
)
from app.ingest.envelope import item_rows
from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions
from app.store import db
from app.store.db import Locks
from app.store.envelopes import ItemRecord, case_keys, store_items
from app.store.models import EnvelopeItemRow
from tests.conftest import T0

from .builders import (
    BILLING,
    CASE,
    TRANSCRIPT,
    envelope,
    message_v1,
    record,
    send_v1,
    worked_example,
)

OBJECTS = ObjectIndex.of([AvailableObject("transcript.txt", TRANSCRIPT)])
RULES = CaseRules(accept_window=3600, transcript_bytes=2000)
OTHER = "case-other"


def rows_of(records: list[Any]) -> list[Any]:
    rows = []
    for n, value in enumerate(records):
        capture = CaptureItem(f"capture:{n + 1}", value, received_at=None)
        rows += item_rows(
            capture, find_items(value, source=capture.source), objects=OBJECTS, now=T0
        )
    return rows


def store_rows(session: Any, rows: list[ItemRecord]) -> set[str]:
    """``store_items`` given the stored keys of the rows' cases, as the ingest reads them."""
    held = case_keys(session, sorted({r.case_id or "" for r in rows}))
    return store_items(session, rows, held={key for key, _ in held})


def records() -> list[Any]:
    other = send_v1(message_v1(envelope(case_id=OTHER, epoch=0)))
    # A CBOR payload (a byte string): its envelope must be read back from the store.
    binary = {**record(send_v1(message_v1(envelope(case_id=OTHER, epoch=1))), T0 + 50, BILLING)}
    binary["trace"] = b"\x00\x01"
    return [*worked_example(), record(other, T0 + 40, BILLING), binary]


def test_the_items_kept_in_memory_are_the_items_read_back(engine: Engine) -> None:
    rows = rows_of(records())
    assert sorted(r.format for r in rows) == ["cbor", *["json"] * (len(rows) - 1)]
    with db.transaction(engine) as session:
        new = store_rows(session, rows)
        kept = stored_as(rows, new)
        read = cases_items(session, [CASE, OTHER])
    by_key = {i.key: i for found in read.values() for i in found}
    assert new == {r.key for r in rows}
    assert kept and set(kept) == {r.key for r in rows if r.format == "json"}
    assert all(by_key[key] == item for key, item in kept.items())


def test_of_one_receipt_twice_in_a_batch_the_first_is_kept_as_stored(engine: Engine) -> None:
    rows = rows_of([*worked_example(), *worked_example()])
    with db.transaction(engine) as session:
        new = store_rows(session, rows)
        kept = stored_as(rows, new)
        read = {i.key: i for i in cases_items(session, [CASE])[CASE]}
    assert len(new) == len(rows) // 2
    assert {i.source for i in kept.values()} == {r.source for r in rows[: len(rows) // 2]}
    assert kept == read


def test_a_receipt_stored_before_is_read_back_not_kept(engine: Engine) -> None:
    rows = rows_of(worked_example())
    with db.transaction(engine) as session:
        store_rows(session, rows[:2])
    with db.transaction(engine) as session:
        new = store_rows(session, rows)
    assert new == {r.key for r in rows[2:]}
    assert set(stored_as(rows, new)) == new


def test_ledgers_derived_together_from_what_was_read_are_each_case_alone(engine: Engine) -> None:
    rows = rows_of(records())
    known = KnownItems()
    half = len(rows) // 2
    for part in (rows[:half], rows[half:]):
        with db.transaction(engine) as session:
            new = store_rows(session, part)
            read = derive_cases(
                session,
                {r.case_id or "" for r in part},
                now=T0 + 7200,
                rules=RULES,
                locks=Locks(session),
                known=known,
                fresh=stored_as(part, new),
            )
        known.remember(read)
    assert known.items  # the second transaction reused what the first read
    with db.transaction(engine) as session:
        together = case_ledgers(session, [CASE, OTHER], now=T0 + 7200, rules=RULES, known=known)
        for case_id in (CASE, OTHER):
            assert together[case_id] == case_ledger(session, case_id, now=T0 + 7200, rules=RULES)


def test_a_ledger_derived_without_events_is_the_ledger_less_its_events(
    engine: Engine, tmp_path: Path
) -> None:
    """``derive_cases`` derives each ledger without the case page's events and responses
    (``events=False``): everything else, which the case rows and flags are written from,
    is what the whole ledger holds, for every case of the simulator's faulty capture."""
    paths = DemoPaths.beside(tmp_path / "capture.jsonl", trust=None, answers=None)
    summary = write_demo(DemoConfig(seed=5, dialogs=30, agents=6, fault_rate=0.5), paths)
    now = summary.suggested_now
    options = VerifyOptions(at=now)
    pipeline = Pipeline(engine=engine, trust=TrustStore.load(paths.trust), options=options)
    inputs = [(str(p), p.read_bytes()) for p in (paths.out, paths.cbor)]
    assert ingest(pipeline, inputs, now=now).envelopes.stored
    with db.transaction(engine) as session:
        cases = sorted({c or "" for (c,) in session.execute(select(EnvelopeItemRow.case_id))})
        whole = case_ledgers(session, cases, now=now, rules=RULES)
        lean = case_ledgers(session, cases, now=now, rules=RULES, events=False)
    assert all(ledger.events for ledger in whole.values())
    assert any(ledger.responses for ledger in whole.values())
    kinds = {f.flag.kind for ledger in whole.values() for f in ledger.flags}
    assert len(kinds) >= 5, kinds
    for case_id in cases:
        assert lean[case_id] == dataclasses.replace(whole[case_id], events=(), responses={})


def test_known_items_past_their_limit_leave_a_reader_the_items_it_took() -> None:
    # A service's requests share one KnownItems: a reader takes ``items`` once and must
    # find there every key it saw, while another thread's ``remember`` starts again.
    rows = rows_of(records())
    items = list(stored_as(rows, {r.key for r in rows}).items())
    known = KnownItems(limit=len(items) - 1)
    known.remember(dict(items[:-1]))
    held = known.items
    known.remember(dict(items[-1:]))  # past the limit: a new dict of just this one
    assert held == dict(items[:-1])
    assert known.items == dict(items[-1:])


def test_a_payload_neither_json_nor_cbor_can_hold_is_stored(engine: Engine) -> None:
    # A lone surrogate (a JSON escape) beside 1E400 (read as infinity): json.dumps refuses
    # the infinity and CBOR the surrogate, which once raised out of the ingest.
    message = message_v1(envelope(case_id=OTHER, epoch=0))
    value = {**record(send_v1(message), T0 + 40, BILLING), "note": "\ud800", "big": float("inf")}
    [row] = rows_of([value])
    assert row.format == "json" and row.envelope is not None  # the envelope is JSON's
    assert row.octets.endswith(b'"note":"\xed\xa0\x80","big":Infinity}')
    with db.transaction(engine) as session:
        new = store_rows(session, [row])
        read = cases_items(session, [OTHER])
    assert new == {row.key} and [i.key for i in read[OTHER]] == [row.key]


def test_the_driver_store_stores_what_sqlalchemy_insert_returning_stored(
    engine: Engine, databases: Any
) -> None:
    """``store_items`` (the stored keys of the rows' cases read first, the rest written with
    the driver's executemany) answers the same new keys and writes the same rows, text for
    text, as the INSERT .. ON CONFLICT DO NOTHING RETURNING it replaced."""

    rows = rows_of([*records(), *worked_example()])  # the worked example twice: dedupe
    other = db.make_engine(databases.new(engine.dialect.name))
    try:
        answers = []
        for target, store in (
            (engine, store_rows),
            (
                other,
                lambda session, rows: _insert_returning(session, [r._asdict() for r in rows]),
            ),
        ):
            with db.transaction(target) as session:
                first = store(session, rows[:3])
            with db.transaction(target) as session:
                answers.append((first, store(session, rows)))
        assert answers[0] == answers[1]
        assert answers[0][1] == {r.key for r in rows} - answers[0][0]
        tables = []
        for target in (engine, other):
            with target.connect() as connection:
                stored = connection.exec_driver_sql("SELECT * FROM envelope_item").all()
                tables.append(sorted((tuple(repr(v) for v in row) for row in stored), key=repr))
        assert tables[0] == tables[1] and len(tables[0]) == len({r.key for r in rows})
    finally:
        other.dispose()


def _insert_returning(session: Any, rows: list[dict[str, Any]]) -> set[str]:
    """The statement ``store_items`` replaced: INSERT .. ON CONFLICT (key) DO NOTHING
    RETURNING key, executed with every row at once."""
    from sqlalchemy.dialects import postgresql, sqlite

    from app.store.models import EnvelopeItemRow

    if not rows:
        return set()
    table = EnvelopeItemRow.__table__  # type: ignore[attr-defined]
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(table).on_conflict_do_nothing(index_elements=["key"])
    return set(session.connection().execute(stmt.returning(table.c.key), rows).scalars())
