"""Envelope handoffs end to end on both databases: ingest -> stored evidence -> ledger ->
flags in the triage table -> ``app.store.cases``; the sweep applies the acceptance window;
the same items in another order leave the same store."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
import threading
from typing import Any

import cbor2
import pytest
from handoff_context import AvailableObject, ObjectIndex, TrustStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as strategies
from sqlalchemy import Engine, select
from sqlalchemy.exc import DataError, OperationalError

from app.envelope.config import EnvelopeConfig
from app.envelope.ledger import CaseRules
from app.ingest import envelope as envelope_ingest
from app.ingest.cases import case_detail
from app.ingest.pipeline import IngestReport, Pipeline, ingest
from app.ingest.sweep import sweep
from app.ingest.verifying import VerifyOptions
from app.store import db
from app.store.cases import list_cases
from app.store.models import CaseRow, EnvelopeItemRow, FlagRow
from tests.conftest import T0, make_world
from tests.store.builders import TIMING

from .builders import (
    BILLING,
    CASE,
    REFUNDS,
    TRANSCRIPT,
    TRIAGE,
    V2,
    answer,
    envelope,
    event,
    jsonl,
    message_v1,
    record,
    reference,
    response,
    send_v1,
    signed_url,
    task_v1,
    worked_example,
)

RULES = CaseRules(accept_window=3600, transcript_bytes=2000)
NOW = T0 + 7200


@functools.cache
def trust() -> TrustStore:
    return make_world().trust


@pytest.fixture
def engine(db_url: str) -> Any:
    engine = db.make_engine(db_url)
    yield engine
    engine.dispose()


def run(engine: Engine, records: list[Any], *, now: int = NOW) -> IngestReport:
    pipeline = Pipeline(
        engine=engine,
        trust=trust(),
        options=VerifyOptions(at=now),
        timing=TIMING,
        objects=ObjectIndex.of([AvailableObject("transcript.txt", TRANSCRIPT)]),
        envelope=EnvelopeConfig(rules=RULES),
    )
    return ingest(pipeline, [("capture.jsonl", jsonl(records))], now=now)


def flags(engine: Engine, case_id: str = CASE) -> list[tuple[str, str | None, str, str]]:
    with db.transaction(engine) as session:
        rows = session.execute(select(FlagRow).where(FlagRow.case_id == case_id)).scalars()
        return sorted((r.kind, r.variant, r.iss, r.hop) for r in rows)


def kinds(engine: Engine, case_id: str = CASE) -> set[str]:
    return {f[0] for f in flags(engine, case_id)}


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_the_worked_example_end_to_end(engine: Engine, version: str) -> None:
    report = run(engine, worked_example(version=version))
    assert report.counts["envelopes"] == 5 and report.counts["envelope_errors"] == 0
    assert report.envelopes.stored == 5 and report.verdicts == []
    # A handoff, an acceptance and case events are no signed handoffs, but not skipped.
    assert report.counts["skipped"] == 0
    with db.transaction(engine) as session:
        [summary] = list_cases(session)
        detail = case_detail(session, CASE)
    assert (summary.owner, summary.epoch, summary.handoffs, summary.open_flags) == (
        BILLING,
        4,
        1,
        0,
    )
    assert detail is not None
    assert [(e.epoch, e.owner, e.end) for e in detail.epochs] == [
        (3, TRIAGE, T0 + 20),
        (4, BILLING, None),
    ]
    stale = detail.events[-1]
    assert (stale.kind, stale.epoch, stale.outcome, stale.at) == ("write", 3, "rejected", T0 + 3630)
    [env] = detail.envelopes
    assert (env.from_agent, env.to_agent, env.epoch, env.response) == (
        TRIAGE,
        BILLING,
        3,
        "accepted",
    )
    verified = [f.key for f in env.facts if f.verified]
    claimed = [f.key for f in env.facts if not f.verified]
    assert (verified, claimed) == (["account_id", "payment_ids"], ["disputed_amount"])
    assert [(r.outcome, r.size) for r in env.references] == [("verified", len(TRANSCRIPT))]
    assert detail.flags == ()  # the refused stale write is the fence working


def test_the_rejected_variant_keeps_triage_the_owner(engine: Engine) -> None:
    run(engine, worked_example(rejected=True))
    with db.transaction(engine) as session:
        detail = case_detail(session, CASE)
    assert detail is not None
    assert (detail.owner, detail.epoch) == (TRIAGE, 3)
    assert detail.envelopes[0].response == "rejected"
    assert detail.envelopes[0].response_detail == "payment id P-2 not found in billing"
    assert kinds(engine) == set()


def test_a_stale_write_the_system_applied_is_two_owners_in_the_triage_queue(engine: Engine) -> None:
    records = [
        *worked_example()[:-1],
        event(TRIAGE, "write", T0 + 3630, epoch=3, outcome="applied"),
    ]
    run(engine, records)
    assert flags(engine) == [("two-owners", "stale-write", TRIAGE, f"{CASE}:4")]
    with db.transaction(engine) as session:
        [row] = session.execute(select(FlagRow).where(FlagRow.case_id == CASE)).scalars()
        [summary] = list_cases(session, flagged=True)
    assert (row.severity, row.status, row.offer, len(row.evidence)) == ("critical", "open", None, 2)
    assert summary.open_flags == 1


def test_release_before_accept_and_lost_acceptance_through_the_sweep(engine: Engine) -> None:
    records = [
        record(send_v1(message_v1()), T0 + 10, BILLING),
        event(TRIAGE, "handed-off", T0 + 10, epoch=3),
    ]
    run(engine, records, now=T0 + 100)
    assert kinds(engine) == {"release-before-accept"}
    with db.transaction(engine) as session:
        row = session.get(CaseRow, CASE)
        assert row is not None and row.deadline == T0 + 10 + 3600
    # Nobody answers within the window: the sweep re-derives the case at its deadline.
    with db.transaction(engine) as session:
        assert sweep(session, now=T0 + 3610, timing=TIMING, cases=RULES) == 1
    assert kinds(engine) == {"release-before-accept", "no-owner"}
    with db.transaction(engine) as session:
        row = session.get(CaseRow, CASE)
        assert row is not None and row.deadline is None


def test_lost_acceptance_while_the_sender_keeps_acting(engine: Engine) -> None:
    records = [
        record(send_v1(message_v1()), T0 + 10, BILLING),
        event(TRIAGE, "act", T0 + 600, epoch=3),
    ]
    run(engine, records, now=T0 + 5000)
    assert kinds(engine) == {"lost-acceptance"}


def test_a_handoff_on_a_stale_epoch(engine: Engine) -> None:
    again = record(send_v1(message_v1(envelope(handoff_id=f"{CASE}:again"))), T0 + 40, REFUNDS)
    run(engine, [*worked_example()[:3], again], now=T0 + 50)
    assert flags(engine) == [("stale-epoch", None, TRIAGE, f"{CASE}:again")]


def test_context_id_reuse_across_cases(engine: Engine) -> None:
    first = record(
        send_v1(message_v1(envelope(case_id="C-1"), context_id="triage-ctx")), T0, BILLING
    )
    reuse = record(send_v1(message_v1(context_id="triage-ctx")), T0 + 30, REFUNDS)
    # Ingested the other way round: the earlier receipt still defines the first receiver.
    run(engine, [reuse], now=T0 + 40)
    run(engine, [first], now=T0 + 40)
    assert kinds(engine) == {"context-id-reuse"}
    assert kinds(engine, "C-1") == set()


def test_evidence_and_envelope_faults(engine: Engine) -> None:
    facts = [{"key": "amount", "value": "49.90", "source": None, "verified": False}]
    urls = [
        reference(sha256=None),
        reference(url=signed_url(expires=T0 - 60)),
        reference(sha256="00" * 32),
    ]
    msg = message_v1(envelope(facts=facts), text="transcript: " + "blah " * 500, urls=urls)
    run(
        engine,
        [
            record(send_v1(msg), T0, BILLING),
            record(response(task_v1(answer(True))), T0 + 5, TRIAGE),
        ],
    )
    assert kinds(engine) == {
        "unsourced-fact",
        "transcript-dump",
        "missing-hash",
        "expired-reference",
        "reference-mismatch",
    }
    with db.transaction(engine) as session:
        detail = case_detail(session, CASE)
    assert detail is not None
    outcomes = [r.outcome for r in detail.envelopes[0].references]
    assert outcomes == ["missing-hash", "expired", "mismatch"]
    assert [f.source for f in detail.envelopes[0].facts] == [None]


def test_schema_failures_two_envelopes_and_drift_are_evidence_never_applied(engine: Engine) -> None:
    v3 = "application/vnd.acme.handoff.v3+json"
    records = [
        record(
            send_v1(message_v1(envelope(goal=None, epoch="three", handoff_id="h-bad"))), T0, BILLING
        ),
        record(send_v1(message_v1(extra_data=[(envelope(epoch=9), V2)])), T0 + 1, BILLING),
        record(send_v1(message_v1(media_type=v3)), T0 + 2, BILLING),
    ]
    report = run(engine, records)
    details = [e.detail for e in report.envelopes.errors]
    assert details[0].startswith("(envelope): 'goal' is a required property; epoch:")
    assert details[1] == "expected exactly one supported handoff envelope, found 2"
    assert details[2] == f"version drift: {v3} is not an accepted type"
    assert (report.counts["envelope_errors"], report.counts["skipped"]) == (3, 0)
    assert {(k, v) for k, v, _, _ in flags(engine)} == {
        ("invalid-envelope", "schema"),
        ("invalid-envelope", "count"),
        ("version-drift", v3),
    }
    with db.transaction(engine) as session:
        stored = session.execute(select(EnvelopeItemRow.kind, EnvelopeItemRow.octets)).all()
        detail = case_detail(session, CASE)
    assert [k for k, _ in stored] == ["invalid"] * 3
    assert all(b'"goal"' in o or b"handoff" in o for _, o in stored)  # the octets as received
    assert detail is not None and (detail.owner, detail.epochs) == (None, ())
    assert len(detail.envelopes) == 3 and all(e.errors for e in detail.envelopes)


def test_only_an_item_with_nothing_to_read_is_skipped(engine: Engine) -> None:
    records = [*worked_example(), record({"jsonrpc": "2.0", "id": 7, "result": {}}, T0 + 40)]
    report = run(engine, records)
    assert (report.counts["envelopes"], report.counts["skipped"]) == (5, 1)


def test_a_case_event_without_a_readable_case_is_flagged_under_no_case(engine: Engine) -> None:
    report = run(engine, [{"case_event": {"agent": TRIAGE, "action": "write", "at": T0}}])
    assert report.envelopes.errors[0].detail == "case_event.case_id: must be a non-empty string"
    assert kinds(engine, "") == {"invalid-envelope"}
    with db.transaction(engine) as session:
        assert list_cases(session) == []


def test_ingesting_the_same_capture_twice_changes_nothing(engine: Engine) -> None:
    run(engine, worked_example())
    again = run(engine, worked_example())
    assert again.envelopes.stored == 0
    with db.transaction(engine) as session:
        assert len(session.execute(select(EnvelopeItemRow.key)).all()) == 5


def test_a_failing_capture_item_is_reported_alone_and_the_rest_of_its_batch_is_stored(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One batch: it fails as a whole on an item's own value (a DataError, the item's fault),
    # then each capture item is stored alone.
    store_items = envelope_ingest.store_items

    def failing(session: Any, rows: Any, **kw: Any) -> int:
        if any(r.source == "capture.jsonl:3" for r in rows):
            raise DataError("INSERT", {}, Exception("value too long"))
        return store_items(session, rows, **kw)

    monkeypatch.setattr(envelope_ingest, "store_items", failing)
    report = run(engine, worked_example())
    assert [(e.source, e.detail) for e in report.envelopes.errors] == [
        ("capture.jsonl:3", "database error: value too long")
    ]
    assert report.envelopes.stored == 4
    with db.transaction(engine) as session:
        sources = session.execute(select(EnvelopeItemRow.source)).scalars()
        assert sorted(sources) == [f"capture.jsonl:{n}" for n in (1, 2, 4, 5)]


def test_a_database_that_cannot_be_written_stops_the_envelope_items_there(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A disk I/O error is the database's fault, not the item's (issue 20): nothing after the
    # first item not stored is acknowledged, and that item says it may be sent again.
    store_items = envelope_ingest.store_items

    def failing(session: Any, rows: Any, **kw: Any) -> int:
        if any(r.source == "capture.jsonl:3" for r in rows):
            raise OperationalError("INSERT", {}, Exception("disk I/O error"))
        return store_items(session, rows, **kw)

    monkeypatch.setattr(envelope_ingest, "store_items", failing)
    report = run(engine, worked_example())
    [error] = report.envelopes.errors
    assert (error.source, error.unavailable) == ("capture.jsonl:3", True)
    with db.transaction(engine) as session:
        sources = sorted(session.execute(select(EnvelopeItemRow.source)).scalars())
    assert report.envelopes.stored == len(sources) == 2
    assert sources == ["capture.jsonl:1", "capture.jsonl:2"]


def test_an_unknown_case_is_none(engine: Engine) -> None:
    with db.transaction(engine) as session:
        assert case_detail(session, "nope") is None


# --- order independence through the store -------------------------------------------------


def scenario() -> list[Any]:
    return [
        *worked_example(),
        record(send_v1(message_v1(envelope(handoff_id=f"{CASE}:4b"))), T0 + 11, REFUNDS),
        record(
            response(task_v1(answer(True, handoff_id=f"{CASE}:4b"), task_id="t-r")), T0 + 21, TRIAGE
        ),
        event(TRIAGE, "write", T0 + 4000, epoch=3, outcome="applied"),
        record(
            send_v1(message_v1(envelope(case_id="C-2", epoch=0), context_id="ctx")), T0, BILLING
        ),
        record(
            send_v1(message_v1(envelope(case_id="C-3", epoch=0), context_id="ctx")), T0 + 5, REFUNDS
        ),
        record(
            send_v1(message_v1(media_type="application/vnd.acme.handoff.v9+json")), T0 + 2, BILLING
        ),
    ]


def snapshot(engine: Engine) -> Any:
    with db.transaction(engine) as session:
        flag_rows = sorted(
            (
                r.case_id,
                r.kind,
                r.variant,
                r.iss,
                r.hop,
                r.severity,
                tuple(r.evidence),
                r.opened_at,
                r.detail,
            )
            for r in session.execute(select(FlagRow)).scalars()
        )
        cases = [
            (c.case_id, c.owner, c.epoch, c.handoffs, c.last_at, c.open_flags)
            for c in list_cases(session)
        ]
        detail = case_detail(session, CASE)
        assert detail is not None
        # Flag ids and update times record ingest order by nature, and an item's source
        # names its place in the file it came in; the conditions depend on neither.
        events = tuple(dataclasses.replace(e, source="") for e in detail.events)
        return flag_rows, cases, dataclasses.replace(detail, flags=(), events=events)


def ingest_in(url: str, order: list[int], cuts: list[int]) -> Any:
    """The scenario's records in ``order``, in batches split at ``cuts``, then a sweep."""
    records = scenario()
    engine = db.make_engine(url)
    try:
        bounds = [0, *sorted(set(cuts)), len(order)]
        for start, end in itertools.pairwise(bounds):
            if start < end:
                run(engine, [records[i] for i in order[start:end]])
        with db.transaction(engine) as session:
            sweep(session, now=NOW + 1, timing=TIMING, cases=RULES)
        return snapshot(engine)
    finally:
        engine.dispose()


_expected: dict[str, Any] = {}


def expected(databases: Any, kind: str) -> Any:
    if kind not in _expected:
        n = len(scenario())
        _expected[kind] = ingest_in(databases.new(kind), list(range(n)), [])
    return _expected[kind]


def test_the_order_scenario_covers_the_ledger_flags(databases: Any) -> None:
    flag_rows, _, detail = expected(databases, "sqlite")
    assert {f[1] for f in flag_rows} >= {
        "two-owners",
        "context-id-reuse",
        "version-drift",
        "no-owner",
    }
    assert [(e.epoch, e.owner) for e in detail.epochs] == [(3, TRIAGE), (4, BILLING)]


N = len(scenario())


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    order=strategies.permutations(range(N)),
    cuts=strategies.lists(strategies.integers(1, N - 1), max_size=3),
)
def test_any_order_leaves_the_same_store_sqlite(
    databases: Any, order: list[int], cuts: list[int]
) -> None:
    assert ingest_in(databases.new("sqlite"), order, cuts) == expected(databases, "sqlite")


@pytest.mark.parametrize("seed", [1, 2])
def test_any_order_leaves_the_same_store_postgresql(databases: Any, seed: int) -> None:
    order = list(range(N))[::-1] if seed == 1 else random.Random(seed).sample(range(N), N)
    result = ingest_in(databases.new("postgresql"), order, [] if seed == 1 else [N // 2])
    assert result == expected(databases, "postgresql") == expected(databases, "sqlite")


def test_concurrent_workers_on_postgresql_agree_with_one(databases: Any) -> None:
    """Workers storing the same items at once, one item per transaction, in their own
    orders: case locks serialise each case's derivation, so the store ends as one worker
    would leave it."""
    records = scenario()
    engine = db.make_engine(databases.new("postgresql"))
    failures: list[BaseException] = []
    reports: list[IngestReport] = []
    start = threading.Barrier(4)

    def worker(seed: int) -> None:
        try:
            start.wait()
            for record_ in random.Random(seed).sample(records, len(records)):
                reports.append(run(engine, [record_]))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert failures == []
        assert [e for r in reports for e in r.envelopes.errors if "database" in e.detail] == []
        with db.transaction(engine) as session:
            sweep(session, now=NOW + 1, timing=TIMING, cases=RULES)
        assert snapshot(engine) == expected(databases, "postgresql")
    finally:
        engine.dispose()


def test_a_cbor_capture_keeps_its_octets(engine: Engine) -> None:
    """A CBOR item may hold byte strings, which JSON cannot: its octets are its CBOR."""
    request = send_v1(message_v1())
    # Not a protobuf JSON value: set after the SDK built the message.
    request["params"]["message"]["parts"][1]["data"]["constraints"]["token"] = b"\x00\x01"
    payload = record(request, T0, BILLING)
    pipeline_run = ingest(
        Pipeline(
            engine=engine,
            trust=trust(),
            options=VerifyOptions(at=NOW),
            timing=TIMING,
            envelope=EnvelopeConfig(rules=RULES),
        ),
        [("capture.cbor", cbor2.dumps(payload))],
        now=NOW,
    )
    assert pipeline_run.envelopes.stored == 1 and pipeline_run.envelopes.errors == []
    with db.transaction(engine) as session:
        row = session.execute(select(EnvelopeItemRow)).scalar_one()
        detail = case_detail(session, CASE)
    assert (row.format, cbor2.loads(row.octets)) == ("cbor", payload)
    assert row.envelope is None  # not JSON; the octets keep it
    assert detail is not None and detail.owner == TRIAGE
