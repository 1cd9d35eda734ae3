"""The ingest pipeline (issue 3, sections 1-3), each test on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import handoff_context._verify as verify_module
import pytest
from handoff_context import Signer, TrustStore, digest_text, trust_document
from handoff_context.carry import A2A_EXTENSION_URI
from sqlalchemy import Engine, event, select, text
from sqlalchemy.exc import IntegrityError, OperationalError

import app.ingest.judge as judge_module
import app.ingest.pipeline as ingest_module
import app.ingest.report as report_module
import app.ingest.signatures as signatures_module
import app.store.db as db_module
from app.errors import NotStored
from app.ingest.report import IngestReport
from app.store.db import hop_lock, lock_id, transaction
from app.store.models import (
    LinkRow,
    ObservationRow,
    RejectedObservationRow,
    SignatureCacheRow,
    VerdictRow,
)
from tests.conftest import World
from tests.store.builders import (
    T0,
    a2a_task,
    bundle,
    count,
    digest,
    elements,
    flags,
    hop_of,
    hops,
    jsonl,
    kinds,
    observations,
    offer,
    outcomes,
    pipeline,
    rec,
    resign,
    run,
    st,
    status,
    twin,
)

WEEK = 7 * 24 * 3600


def verdict_row(engine: Engine, of: bytes) -> VerdictRow:
    with transaction(engine) as session:
        query = select(VerdictRow).where(VerdictRow.digest == digest(of)).order_by(VerdictRow.id)
        return session.execute(query).scalars().first()  # type: ignore[return-value]


def check(row: VerdictRow, name: str) -> str:
    return next(c["result"] for c in row.checks if c["check"] == name)


# --- idempotence and append-only ----------------------------------------------------------


def test_the_same_octets_twice_are_stored_once_and_counted_as_retransmissions(
    engine: Engine, world: World
) -> None:
    o = offer(world.planner, world.coder)
    a = status(world.coder, o, "accepted", iat=T0 + 5)
    records = [rec(bundle(o), T0 + 1, world.coder.iss), rec(st(a), T0 + 6)]
    first = run(engine, world.trust, records)
    assert outcomes(first) == ["accept", "accept"]
    assert first.stored == 2
    stored = elements(engine)
    state = hops(engine)

    second = run(engine, world.trust, records, now=T0 + 500)
    assert outcomes(second) == ["duplicate", "duplicate"]
    assert (second.stored, second.counts["duplicate"]) == (0, 2)
    # Append-only: octets and first_seen are exactly as the first ingest wrote them.
    assert elements(engine) == stored
    assert stored[digest(o)][0] == o
    assert (observations(engine, o), observations(engine, a)) == (2, 2)
    assert hops(engine)[hop_of(o)]["state"] == state[hop_of(o)]["state"] == "accepted"


def test_a_retransmission_within_one_batch(engine: Engine, world: World) -> None:
    o = offer(world.planner, world.coder)
    report = run(engine, world.trust, [rec(bundle(o), T0 + 1), rec(bundle(o), T0 + 2)])
    assert outcomes(report) == ["accept", "duplicate"]
    assert len(elements(engine)) == 1


# --- equivocation -----------------------------------------------------------------------


def test_equivocation_across_two_receivers_is_flagged_once(engine: Engine, world: World) -> None:
    # The planner signs two different offers for one hop, one to each of two receivers:
    # neither receiver can tell; the store sees both.
    x = offer(world.planner, world.coder)
    y = twin(world.planner, x, aud=world.tester.iss)
    report = run(
        engine,
        world.trust,
        [rec(bundle(x), T0 + 1, world.coder.iss), rec(bundle(y), T0 + 2, world.tester.iss)],
    )
    assert outcomes(report) == ["accept", "reject"]
    second = report.verdicts[1]
    assert second.reason is not None and second.reason.value == "equivocation"
    assert second.equivocation is not None and second.equivocation.first == digest(x)
    # Seen again, in the other order and by another run: still one flag.
    run(
        engine,
        world.trust,
        [rec(bundle(y), T0 + 2, world.tester.iss), rec(bundle(x), T0 + 1, world.coder.iss)],
    )
    [flag] = [f for f in flags(engine) if f["kind"] == "equivocation"]
    assert (flag["variant"], flag["severity"], flag["status"]) == ("content", "critical", "open")
    assert sorted(flag["evidence"]) == sorted([digest_text(digest(x)), digest_text(digest(y))])
    assert flag["offer"] == digest(x)  # the hop's offer: received first
    assert flag["opened_at"] == T0 + 2  # when the second offer was received
    assert hops(engine)[hop_of(x)]["aud"] == world.coder.iss


def test_signature_only_equivocation(engine: Engine, world: World) -> None:
    x = offer(world.coder, world.tester)  # ES256: signing again gives another signature
    y = resign(world.coder, x)
    assert x != y
    report = run(engine, world.trust, [rec(bundle(x), T0 + 1), rec(bundle(y), T0 + 2)])
    assert report.verdicts[1].equivocation is not None
    assert report.verdicts[1].equivocation.variant.value == "signature-only"
    assert kinds(engine) == [("equivocation", "signature-only")]


# --- time-based states and flags --------------------------------------------------------


def test_lost_outcome_appears_when_the_clock_passes_the_deadline(
    engine: Engine, world: World
) -> None:
    o = offer(world.planner, world.coder)
    a = status(world.coder, o, "accepted", iat=T0 + 5)
    run(engine, world.trust, [rec(bundle(o), T0 + 1, world.coder.iss), rec(st(a), T0 + 6)])
    key = hop_of(o)
    due = T0 + 6 + 3600
    assert hops(engine)[key]["deadline"] == due
    assert hops(engine, now=due - 1)[key]["state"] == "accepted"
    assert kinds(engine) == []
    assert hops(engine, now=due)[key]["state"] == "accepted"
    assert kinds(engine) == [("lost-outcome", None)]
    # Evaluated at an earlier clock again, the untouched flag goes away.
    hops(engine, now=T0 + 100)
    assert kinds(engine) == []
    # An outcome, however late, settles it for good.
    done = status(world.coder, o, "completed", iat=T0 + 4000)
    run(engine, world.trust, [rec(st(done), T0 + 4001)], now=T0 + 5000)
    assert hops(engine, now=T0 + 9000)[key]["state"] == "completed"
    assert kinds(engine) == []


def test_an_offer_without_status_expires_by_the_clock(engine: Engine, world: World) -> None:
    o = offer(world.planner, world.coder, lifetime=120)
    run(engine, world.trust, [rec(bundle(o), T0 + 1, world.coder.iss)])
    key = hop_of(o)
    assert hops(engine)[key]["state"] == "offered"
    assert hops(engine, now=T0 + 120 + 60)[key]["state"] == "offered"
    assert hops(engine, now=T0 + 120 + 61)[key]["state"] == "expired"


def _cancel_scenario(world: World) -> tuple[bytes, bytes, list[dict[str, Any]]]:
    p = offer(world.planner, world.coder, iat=T0)
    d = offer(world.coder, world.tester, iat=T0 + 5, prev=digest(p))
    cancel = status(world.planner, p, "canceled", iat=T0 + 10)
    records = [
        rec(bundle(p), T0 + 1, world.coder.iss),
        rec(bundle(d, p), T0 + 6, world.tester.iss),
        rec(st(cancel), T0 + 11),
    ]
    return p, d, records


def test_cancel_not_propagated_is_flagged_after_the_grace_period(
    engine: Engine, world: World
) -> None:
    p, d, records = _cancel_scenario(world)
    run(engine, world.trust, records)
    key = hop_of(p)
    assert hops(engine)[key]["state"] == "canceled"
    assert hops(engine)[key]["deadline"] == T0 + 11 + 60
    assert kinds(engine) == []
    hops(engine, now=T0 + 11 + 60)
    [flag] = flags(engine)
    assert (flag["kind"], flag["iss"], flag["hop"]) == ("cancel-not-propagated", *key)
    assert digest_text(digest(d)) in flag["evidence"]


def test_cancel_propagated_in_time_is_not_flagged(engine: Engine, world: World) -> None:
    _p, d, records = _cancel_scenario(world)
    down = status(world.coder, d, "canceled", iat=T0 + 20)
    run(engine, world.trust, [*records, rec(st(down), T0 + 21)])
    hops(engine, now=T0 + 1000)
    assert kinds(engine) == []


# --- order: pending statuses, chains completed later -------------------------------------


def test_a_status_before_its_offer_is_pending_then_linked(engine: Engine, world: World) -> None:
    o = offer(world.planner, world.coder)
    a = status(world.coder, o, "accepted", iat=T0 + 5)
    first = run(engine, world.trust, [rec(st(a), T0 + 6)])
    assert outcomes(first) == ["pending"]
    assert hops(engine) == {}
    run(engine, world.trust, [rec(bundle(o), T0 + 1, world.coder.iss)])
    assert hops(engine)[hop_of(o)]["state"] == "accepted"
    row = verdict_row(engine, a)
    assert (row.outcome, row.valid, check(row, "offer")) == ("accept", True, "pass")


def test_a_status_before_its_offer_in_one_batch_is_judged_in_the_report(
    engine: Engine, world: World
) -> None:
    o = offer(world.planner, world.coder)
    a = status(world.coder, o, "accepted", iat=T0 + 5)
    report = run(engine, world.trust, [rec(st(a), T0 + 6), rec(bundle(o), T0 + 1)])
    assert outcomes(report) == ["accept", "accept"]


def test_an_earlier_offer_arriving_later_completes_the_chain_check(
    engine: Engine, world: World
) -> None:
    a = offer(world.assistant, world.planner, iat=T0)
    b = offer(world.planner, world.coder, iat=T0 + 5, prev=digest(a))
    first = run(engine, world.trust, [rec(bundle(b), T0 + 6, world.coder.iss)])
    assert outcomes(first) == ["accept"]
    assert check(verdict_row(engine, b), "chain") == "not-checked"
    run(engine, world.trust, [rec(bundle(a), T0 + 1, world.planner.iss)])
    row = verdict_row(engine, b)
    assert (row.outcome, check(row, "chain")) == ("accept", "pass")
    assert row.chain is not None and row.chain["carried"] is False
    assert [e["digest"] for e in row.chain["elements"]] == [digest_text(digest(a))]
    # An offer arriving after its ancestors is checked against them straight away.
    c = offer(world.coder, world.tester, iat=T0 + 10, prev=digest(b))
    report = run(engine, world.trust, [rec(bundle(c), T0 + 11, world.tester.iss)])
    assert report.verdicts[0].chain is not None
    assert report.verdicts[0].chain.length == 3


def test_a_broken_link_found_later_rejects_and_flags(engine: Engine, world: World) -> None:
    a = offer(world.assistant, world.tester, iat=T0)  # to the tester, yet the planner goes on
    b = offer(world.planner, world.coder, iat=T0 + 5, prev=digest(a))
    run(engine, world.trust, [rec(bundle(b), T0 + 6, world.coder.iss)])
    assert kinds(engine) == []
    run(engine, world.trust, [rec(bundle(a), T0 + 1, world.tester.iss)])
    row = verdict_row(engine, b)
    assert (row.outcome, row.reason, row.fault) == ("reject", "broken-chain", "broken-chain")
    assert kinds(engine) == [("rejected-element", "broken-chain")]
    # The hop still exists: the offer passed checks 1-3 (profile §6.4).
    assert hop_of(b) in hops(engine)


def test_offers_carried_in_a_chain_are_hops_of_the_dialog_tree(
    engine: Engine, world: World
) -> None:
    a = offer(world.assistant, world.planner, iat=T0)
    b = offer(world.planner, world.coder, iat=T0 + 5, prev=digest(a))
    run(engine, world.trust, [rec(bundle(b, a), T0 + 6, world.coder.iss)])
    assert set(hops(engine)) == {hop_of(a), hop_of(b)}
    with transaction(engine) as session:
        links = session.execute(select(LinkRow.offer, LinkRow.prev)).all()
        via = session.execute(select(ObservationRow.via).where(ObservationRow.via.is_not(None)))
        assert list(via.scalars()) == [digest(b)]
    assert [tuple(r) for r in links] == [(digest(b), digest(a))]
    # A status for the offer known only from the chain is linked to it.
    ok = status(world.planner, a, "accepted", iat=T0 + 7)
    run(engine, world.trust, [rec(st(ok), T0 + 8)])
    assert hops(engine)[hop_of(a)]["state"] == "accepted"


# --- verification once, trust changes, freshness -----------------------------------------


def test_a_duplicate_and_an_equivocation_are_judged_in_one_pass(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20: the verdict without the replay memory (which hops and flags are derived
    from) comes from the same pass of the checks as the reported one; before, each check
    ran a second time for it."""
    calls: list[str] = []
    real = verify_module.Verifier._audience

    def counting(self: Any, offer: Any, ctx: Any, run: Any) -> None:
        calls.append(offer.hop)
        real(self, offer, ctx, run)

    monkeypatch.setattr(verify_module.Verifier, "_audience", counting)
    o = offer(world.planner, world.coder)
    x = twin(world.planner, o, aud=world.tester.iss)
    records = [rec(bundle(o), T0 + 1), rec(bundle(o), T0 + 2), rec(bundle(x), T0 + 3)]
    report = run(engine, world.trust, records)
    assert outcomes(report) == ["accept", "duplicate", "reject"]
    assert report.verdicts[2].reason is not None
    assert report.verdicts[2].reason.value == "equivocation"
    assert len(calls) == 3  # one pass for each item
    # The twin counts for its hop as judged without the memory: an equivocation flag.
    assert [f["kind"] for f in flags(engine)] == ["equivocation"]


def test_each_element_is_verified_once_and_a_changed_trust_store_verifies_again(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[bytes] = []
    real = verify_module.verify_element

    def counting(element: Any, trust: TrustStore, **kw: Any) -> Any:
        calls.append(element.digest)
        return real(element, trust, **kw)

    monkeypatch.setattr(verify_module, "verify_element", counting)
    a = offer(world.assistant, world.planner, iat=T0)
    b = offer(world.planner, world.coder, iat=T0 + 5, prev=digest(a))
    records = [rec(bundle(b, a), T0 + 6, world.coder.iss)]
    assert outcomes(run(engine, world.trust, records)) == ["accept"]
    assert sorted(calls) == sorted([digest(a), digest(b)])

    calls.clear()
    assert outcomes(run(engine, world.trust, records)) == ["duplicate"]
    assert calls == []  # every signature came from the cache

    signers = [world.assistant, world.planner, world.coder, world.tester]
    more = TrustStore.from_mapping(trust_document([*signers, world.mallory]))
    calls.clear()
    assert outcomes(run(engine, more, records)) == ["duplicate"]
    assert sorted(calls) == sorted([digest(a), digest(b)])

    without_planner = TrustStore.from_mapping(trust_document([world.assistant, world.coder]))
    report = run(engine, without_planner, records)
    assert outcomes(report) == ["reject"]
    assert report.verdicts[0].reason is not None
    assert report.verdicts[0].reason.value == "untrusted-key"


def test_week_old_captures_are_judged_at_their_receive_time(engine: Engine, world: World) -> None:
    o = offer(world.planner, world.coder)
    report = run(engine, world.trust, [rec(bundle(o), T0 + 1, world.coder.iss)], now=T0 + WEEK)
    assert outcomes(report) == ["accept"]
    with transaction(engine) as session:
        at = session.execute(select(ObservationRow.received_at)).scalar_one()
    assert at == T0 + 1
    # Without a capture record the upload time is the receive time: stale.
    late = offer(world.planner, world.coder)
    report = run(engine, world.trust, [bundle(late)], now=T0 + WEEK, at=T0 + WEEK)
    assert report.verdicts[0].reason is not None
    assert report.verdicts[0].reason.value == "stale"


# --- bad input --------------------------------------------------------------------------


def test_a_database_error_spoils_only_its_item(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    o1, o2, o3 = (offer(world.planner, world.coder) for _ in range(3))
    real = judge_module.add_observation

    def failing(session: Any, **kw: Any) -> int:
        if kw["source"] == "capture.jsonl:2":
            raise IntegrityError("INSERT INTO observation", {}, Exception("item on fire"))
        return real(session, **kw)

    monkeypatch.setattr(judge_module, "add_observation", failing)
    report = run(
        engine,
        world.trust,
        [rec(bundle(o1), T0 + 1), rec(bundle(o2), T0 + 1), "not an object", rec(bundle(o3), T0)],
    )
    assert [v.source for v in report.verdicts] == [
        "capture.jsonl:1",
        "capture.jsonl:3",
        "capture.jsonl:4",
    ]
    assert outcomes(report) == ["accept", "reject", "accept"]
    assert report.errors == [NotStored("capture.jsonl:2", "database error: item on fire")]
    assert (report.complete, report.cut) == (False, None)
    # The failed item left nothing behind, not even what verification had stored.
    assert set(elements(engine)) == {digest(o1), digest(o3)}
    assert set(hops(engine)) == {hop_of(o1), hop_of(o3)}


def test_a_database_that_cannot_be_written_stops_the_ingest_at_its_first_item(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    o1, o2, o3 = (offer(world.planner, world.coder) for _ in range(3))
    real = judge_module.add_observation

    def failing(session: Any, **kw: Any) -> int:
        if kw["source"] == "capture.jsonl:2":
            raise OperationalError("INSERT INTO observation", {}, Exception("disk on fire"))
        return real(session, **kw)

    monkeypatch.setattr(judge_module, "add_observation", failing)
    records = [rec(bundle(o), T0 + 1) for o in (o1, o2, o3)]
    report = run(engine, world.trust, records)
    # The batch failed, its items ran alone: the first stored, the second met the
    # unavailable database, the third was never tried.
    assert [v.source for v in report.verdicts] == ["capture.jsonl:1"]
    assert report.errors == [
        NotStored("capture.jsonl:2", "database error: disk on fire", unavailable=True)
    ]
    assert (report.complete, report.cut) == (False, "capture.jsonl:2")
    assert set(elements(engine)) == {digest(o1)}


def test_a_huge_number_in_a_capture_record_is_malformed_not_a_crash(
    engine: Engine, world: World
) -> None:
    # A 309-digit received_at overflowed a float in the envelope reader (a 500 after the
    # batches before it were committed).
    good = [rec(bundle(offer(world.planner, world.coder)), T0 + 1) for _ in range(300)]
    huge = {"received_at": 10**309, "payload": bundle(offer(world.planner, world.coder))}
    report = run(engine, world.trust, [*good, huge])
    assert outcomes(report) == ["accept"] * 300 + ["reject"]
    assert report.verdicts[-1].reason is not None
    assert report.verdicts[-1].reason.value == "malformed"
    assert "received_at" in (report.verdicts[-1].detail or "")
    assert report.complete and report.stored == 300


def test_a_refused_item_retried_with_its_observation_id_is_stored_once(
    engine: Engine, world: World
) -> None:
    refused = {"id": "obs-1", "received_at": T0 + 1, "payload": {"offer": "not.a.jws"}}
    first = run(engine, world.trust, [refused])
    again = run(engine, world.trust, [refused])
    assert outcomes(first) == ["reject"] and first.redelivered == 0
    assert outcomes(again) == [] and again.redelivered == 1
    with transaction(engine) as session:
        keys = session.execute(select(RejectedObservationRow.observation_key)).scalars().all()
    assert keys == ["obs-1:0"]


def test_rejected_elements_are_flagged_once_per_hop_and_reason(
    engine: Engine, world: World
) -> None:
    forger = Signer(iss=world.planner.iss, key=world.mallory.key, alg="Ed25519")
    f1 = offer(forger, world.coder)
    f2 = twin(forger, f1, iat=T0 + 1)
    misdelivered = offer(world.planner, world.coder)
    report = run(
        engine,
        world.trust,
        [
            rec(bundle(f1), T0 + 2),
            rec(bundle(f2), T0 + 3),
            rec(bundle(misdelivered), T0 + 4, world.tester.iss),
        ],
    )
    assert [v.reason.value for v in report.verdicts if v.reason] == [
        "bad-signature",
        "bad-signature",
        "wrong-audience",
    ]
    by_variant = {f["variant"]: f for f in flags(engine)}
    assert set(by_variant) == {"bad-signature", "wrong-audience"}
    forged = by_variant["bad-signature"]
    assert (forged["kind"], forged["opened_at"]) == ("rejected-element", T0 + 2)
    assert sorted(forged["evidence"]) == sorted(digest_text(digest(f)) for f in (f1, f2))
    assert hops(engine) == {}  # nothing here passed checks 1-3


def test_a_host_task_state_that_disagrees_is_flagged(engine: Engine, world: World) -> None:
    o = offer(world.planner, world.coder, task="task-1")
    done = status(world.coder, o, "completed", iat=T0 + 5)
    run(
        engine,
        world.trust,
        [rec(bundle(o), T0 + 1), rec(a2a_task(done, "TASK_STATE_FAILED"), T0 + 6)],
    )
    assert hops(engine)[hop_of(o)]["state"] == "completed"
    assert kinds(engine) == [("host-divergence", None)]


def test_a_status_where_an_offer_belongs_is_malformed_and_not_kept(
    engine: Engine, world: World
) -> None:
    o = offer(world.planner, world.coder)
    a = status(world.coder, o, "accepted", iat=T0 + 5)
    report = run(engine, world.trust, [rec({"offer": a.decode()}, T0 + 6)])
    assert report.verdicts[0].reason is not None
    assert report.verdicts[0].reason.value == "malformed"
    assert elements(engine) == {}


# --- batches and bounded reports ----------------------------------------------------------


def test_a_batchs_signatures_are_verified_before_its_write_transaction(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20: concurrent writers verify side by side; only judging and writing hold
    SQLite's write lock (or a PostgreSQL batch's locks). What verified is still recorded
    in the signature cache, by the batch's transaction."""
    events: list[str] = []
    real_verifies, real_transaction = signatures_module._verifies, db_module.transaction

    def verifies(elements: Any, trust: TrustStore) -> list[bytes]:
        events.append("verify")
        return real_verifies(elements, trust)

    @contextmanager
    def transaction(bound: Engine, **kw: Any) -> Iterator[Any]:
        events.append("write")
        with real_transaction(bound, **kw) as session:
            yield session

    monkeypatch.setattr(signatures_module, "_verifies", verifies)
    monkeypatch.setattr(signatures_module, "workers", lambda: 2)  # a pool on any machine
    monkeypatch.setattr(db_module, "transaction", transaction)
    batch = [offer(world.planner, world.coder) for _ in range(signatures_module.MIN_PARALLEL)]
    report = run(engine, world.trust, [rec(bundle(o), T0 + 1) for o in batch])
    assert outcomes(report) == ["accept"] * len(batch)
    first_write = events.index("write")
    assert events[:first_write] == ["verify"] and "verify" not in events[first_write:]
    assert count(engine, SignatureCacheRow) == len(batch)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # advisory locks: PostgreSQL's
def test_on_postgresql_a_batch_waits_for_its_locks_and_then_needs_no_savepoint(
    engine: Engine, world: World
) -> None:
    """Issue 20: a batch one of whose hops another transaction holds waits for all its
    locks up front, holding none yet, and then runs as on SQLite. (It used to try for
    them and, failing, run each item in a savepoint with statements of its own: with
    concurrent requests over the same dialogs, nearly always.)"""
    offers = [offer(world.planner, world.coder) for _ in range(3)]
    statements: list[str] = []

    def executing(_c: Any, _cursor: Any, sql: str, *_a: Any) -> None:
        statements.append(sql)

    event.listen(engine, "before_cursor_execute", executing)
    held = lock_id(hop_lock(hop_of(offers[1])[1]))
    results: list[IngestReport] = []
    with engine.connect() as holder:
        holder.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": held})
        writer = threading.Thread(
            target=lambda: results.append(
                run(engine, world.trust, [rec(bundle(o), T0 + 1) for o in offers])
            )
        )
        writer.start()
        waiting = text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        with engine.connect() as watcher:
            for _ in range(3000):  # until the batch waits for the lock (or 30 s)
                if watcher.execute(waiting).scalar_one():
                    break
                writer.join(0.01)
            else:
                pytest.fail("the batch never waited for the lock")
        assert not results  # it is waiting, not done without the lock
        holder.rollback()
    writer.join()
    event.remove(engine, "before_cursor_execute", executing)
    assert outcomes(results[0]) == ["accept"] * 3
    assert [s for s in statements if "SAVEPOINT" in s] == []
    assert set(hops(engine)) == {hop_of(o) for o in offers}


def test_a_batch_that_cannot_commit_is_ingested_item_by_item(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    o1, o2 = (offer(world.planner, world.coder) for _ in range(2))
    real = ingest_module.derive_hops
    calls: list[int] = []

    def failing_once(session: Any, keys: Any, **kw: Any) -> None:
        calls.append(len(set(keys)))
        if len(calls) == 1:  # the batch's derivation, after both items ran
            raise OperationalError("INSERT INTO hop", {}, Exception("disk on fire"))
        real(session, keys, **kw)

    monkeypatch.setattr(ingest_module, "derive_hops", failing_once)
    report = run(engine, world.trust, [rec(bundle(o1), T0 + 1), rec(bundle(o2), T0 + 1)])
    assert outcomes(report) == ["accept", "accept"]
    assert (report.errors, report.stored) == ([], 2)
    assert calls == [2, 1, 1]  # the batch, then each item alone
    assert set(hops(engine)) == {hop_of(o1), hop_of(o2)}
    # Nothing of the failed batch was kept: one observation of each.
    assert [observations(engine, o) for o in (o1, o2)] == [1, 1]


def test_with_a_sink_verdicts_are_handed_on_in_order_and_the_report_keeps_counts(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_module, "VERDICT_WINDOW", 2)
    early, late = (offer(world.planner, world.coder, iat=T0 + i) for i in range(2))
    others = [offer(world.planner, world.tester) for _ in range(3)]
    records = [
        rec(st(status(world.coder, early, "accepted", iat=T0 + 5)), T0 + 6),
        rec(bundle(early), T0 + 1),  # within the window: the status above is final
        rec(st(status(world.coder, late, "accepted", iat=T0 + 5)), T0 + 6),
        *(rec(bundle(o), T0 + 2) for o in others),
        rec(bundle(late), T0 + 1),  # three verdicts later: that status was handed on
    ]
    seen: list[Any] = []
    report = ingest_module.ingest(
        pipeline(engine, world.trust),
        [("capture.jsonl", jsonl(records))],
        now=T0 + 30,
        on_verdict=seen.append,
    )
    assert [v.outcome.value for v in seen] == ["accept", "accept", "pending", *["accept"] * 4]
    assert report.verdicts == []
    counts = report.counts
    assert (counts["verdicts"], counts["accept"], counts["pending"]) == (7, 6, 1)
    # The store judged it again all the same.
    assert hops(engine)[hop_of(late)]["state"] == "accepted"


def test_a_replay_of_an_expired_offer_raises_no_flag_on_the_hop_it_copies(
    engine: Engine, world: World
) -> None:
    # Issue 26: someone replays a completed hop's offer, long expired, in a task of their
    # own. The replay is refused (stale), and the state of that other task is not the hop's:
    # no host-divergence on the legitimate, completed hop.
    o = offer(world.planner, world.coder, task="task-1")
    done = status(world.coder, o, "completed", iat=T0 + 5)
    replay = a2a_task(o, "TASK_STATE_SUBMITTED", task="task-evil")
    replay["status"]["message"]["metadata"] = {A2A_EXTENSION_URI: bundle(o)}
    late = T0 + 3600
    report = run(
        engine,
        world.trust,
        [
            rec(bundle(o), T0 + 1),
            rec(a2a_task(done, "TASK_STATE_COMPLETED"), T0 + 6),
            rec(replay, late),
        ],
        now=late,
    )
    assert [v.outcome.value for v in report.verdicts] == ["accept", "accept", "reject"]
    assert hops(engine)[hop_of(o)]["state"] == "completed"
    assert ("host-divergence", None) not in kinds(engine)
