"""The ingest pipeline, one path for every entry point (HTTP, upload, CLI, OTLP, import,
rederive): payload -> carriers -> judge (``app.ingest.judge``, where every verdict is
decided) -> write a batch -> derive its hops. This module runs transactions and decides
nothing (docs/architecture.md).

Items are committed in batches of up to ``app.ingest.batches.BATCH_ITEMS``, through the one
batch runner the envelope stage uses too: one transaction holds a run of consecutive
items, the rows they produce are written behind, one statement per table at the end of the
batch (``app.store.writebehind``), and the hops they touched are derived once, at the end
(the derivation reads only stored facts, so deriving once gives what deriving after each
item would have left). Each item is parsed once, and the signatures of a batch are verified
before its write transaction begins, on every core (``app.ingest.signatures``), so that
concurrent writers verify side by side and only judging and writing wait for one another.
On PostgreSQL a batch then waits for every lock its items take, in one statement and one
global order, holding nothing yet; holding them, it runs as on SQLite, with exact batch
memories and no savepoints. Each item still stands alone: when one fails the whole
transaction rolls back, the items before it run again as a batch, and it is run again
alone in its own transaction (restarted with its locks taken up front, retried on
transient errors, reported as an ``ItemError`` when it fails again); when the batch as a
whole cannot commit, each of its items is run again alone. Input order, and so every
order-dependent verdict (duplicate, equivocation, pending), is kept; a bad item never
spoils the rest, and nothing is lost. A transaction waits for locks only before it holds
any (``Locks.need`` only tries). What a batch asks of the store by digest is loaded with
one query per batch.

Inputs stream: a capture given as a binary file is read item by item (``read_capture``),
and with ``on_verdict`` the report keeps only counts and a bounded window of recent
verdicts (``app.ingest.report``). Why the result does not depend on ingest order: see
``app.ingest.judge`` (judgements against an empty replay memory, pending statuses and
stored chains judged again).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import BinaryIO

from handoff_context import Verdict
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from app.capture.carriers import Carried, CarrierError, ExtractStats, Found, read_capture
from app.errors import ItemProblem as ItemError  # an item that could not be stored
from app.errors import NotStored
from app.ingest.batches import (
    BUSY,
    BatchFailed,
    ItemFailed,
    batched,
    not_stored,
    run_batch,
)
from app.ingest.build import Pipeline
from app.ingest.derive import derive_hops
from app.ingest.envelope import EnvelopeIngest
from app.ingest.judge import BatchState, Done, Judge, Parsed, Unparsed, parse, refuse
from app.ingest.live import HostStates, batches, is_pipe
from app.ingest.memory import verified_before
from app.ingest.report import VERDICT_WINDOW, IngestReport
from app.ingest.second_core import SecondCore, second_core
from app.ingest.signatures import verify_before
from app.ingest.span import Span, cut, fraction_read
from app.ingest.verifying import carrier_error_verdict
from app.store import db
from app.store.db import Locks, NeedLocks
from app.store.derive import affected_hops

__all__ = ["VERDICT_WINDOW", "IngestReport", "Pipeline", "ingest", "ingest_carried"]

Progress = Callable[[str, int, float | None], None]  # (input, items done, fraction read)
Capture = bytes | BinaryIO
_Prepared = tuple[Found, Parsed | Unparsed | None]  # an item and what parsing it gave
# Restarts of one item that found a lock taken, before it is reported as an error.
_RESTARTS = 50


def ingest(
    pipeline: Pipeline,
    inputs: Iterable[tuple[str, Capture]],
    *,
    now: int | None = None,
    content_type: str | None = None,
    progress: Progress | None = None,
    on_verdict: Callable[[Verdict], None] | None = None,
    fork: bool = False,
) -> IngestReport:
    """Ingest capture files (profile §10), each ``(name, octets or binary file)``, in order.

    ``now`` is the store's clock (default: wall clock): first-seen times and the time rules
    of profile §8. Freshness is judged at each item's receive time (profile §10), else
    ``options.at``. A file is read as a stream (``read_capture``). ``on_verdict`` receives
    every verdict in input order and bounds what the report keeps (``IngestReport``).
    ``progress`` is called after each batch. ``fork``: a forked child may verify signatures
    ahead on the second core (app.ingest.second_core; only for a caller that runs one
    thread). Never raises for bad input or a failing item.
    """
    with second_core(pipeline, inputs, content_type, fork=fork) as (listed, second):
        clock = int(time.time()) if now is None else now
        report = IngestReport(sink=on_verdict)
        envelopes = EnvelopeIngest(
            pipeline.engine,
            pipeline.envelope,
            pipeline.objects,
            clock,
            report=report.envelopes,
            known=pipeline.known,
        )
        host = HostStates(receiver=pipeline.options.receiver, at=pipeline.options.at)
        span = Span()
        for name, data in listed:
            stats = ExtractStats()
            items = read_capture(
                data,
                name=name,
                content_type=content_type,
                stats=stats,
                on_item=span.reading(envelopes.read),
                on_host=host.read,
            )
            done = 0
            for batch in batches(items, live=is_pipe(data)):
                # A long-running input (a live pipe, app.ingest.live) is judged at the store's
                # clock of each batch, not of its start.
                clock = int(time.time()) if now is None else now
                _run(pipeline, batch, clock, report, second)
                if second is not None:
                    second.judged(batch)
                # The host task states and envelope items read with this batch: stored now,
                # not at the end of the input (docs/envelopes.md).
                if report.cut is None:
                    _flush_host(pipeline, host, report, clock)
                if report.cut is None:
                    envelopes.flush()
                if cut(report, span, batch, exact=not (host.pending or envelopes.pending)):
                    break
                done += len(batch)
                if progress is not None:
                    progress(name, done, fraction_read(data))
            report.skipped += stats.without_handoff
            if report.cut is not None:
                break
            _flush_host(pipeline, host, report, clock)  # read after the last batch
            if report.cut is None:
                envelopes.flush()
            if cut(report, span, [], exact=False):
                break
        report.redelivered += host.redelivered
        report.finish()
        return report


def _flush_host(pipeline: Pipeline, host: HostStates, report: IngestReport, now: int) -> None:
    """Store the host task states read so far (app.ingest.live); a database failure is
    reported, never raised (an unavailable database cuts the ingest short, ``cut``)."""
    try:
        host.flush(pipeline.engine, now=now, timing=pipeline.timing)
    except SQLAlchemyError as exc:
        problem = not_stored("host task states", exc)
        report.errors.append(problem)
        if problem.unavailable:
            report.cut = problem.source
    except BatchFailed:
        report.errors.append(NotStored("host task states", BUSY))


def ingest_carried(pipeline: Pipeline, items: Iterable[Carried], *, now: int) -> IngestReport:
    """Ingest objects already taken out of their carriers, in order, at store clock
    ``now`` (``handoff-trace rederive`` and ``import`` replay stored receipts this way).
    Never raises for bad input or a failing item."""
    report = IngestReport()
    for batch in batched(items):
        _run(pipeline, batch, now, report)
    report.finish()
    return report


def _run(
    pipeline: Pipeline,
    batch: Sequence[Found],
    now: int,
    report: IngestReport,
    second: SecondCore | None = None,
) -> None:
    """One batch of signed items through the batch runner, reported in input order. When
    the database turns out unavailable the batch stops there: ``report.cut`` is set."""
    if all(isinstance(found, CarrierError) for found in batch):
        # Nothing to store (an item no carrier could read has a verdict, not a row): no
        # transaction either, so a body of unreadable items costs no database work.
        for found in batch:
            _report(report, Done(carrier_error_verdict(found)))  # type: ignore[arg-type]
        return
    # Each item parsed once, and its signatures verified before any write transaction
    # begins (what the child verified ahead is marked inside it instead).
    items = [(f, None if isinstance(f, CarrierError) else parse(f.value, pipeline)) for f in batch]
    verified = [] if second is not None else _verify_before(pipeline, items)
    outcomes = run_batch(
        items,
        attempt=functools.partial(_try_batch, pipeline, now=now, second=second, verified=verified),
        alone=functools.partial(_alone, pipeline, now=now),
        stop=_unavailable,
    )
    for outcome in outcomes:
        _report(report, outcome)
    if outcomes and _unavailable(outcomes[-1]):
        report.cut = batch[len(outcomes) - 1].source


def _verify_before(pipeline: Pipeline, items: Sequence[_Prepared]) -> list[bytes]:
    """The signatures of the batch's elements verified outside its write transaction, so
    that concurrent writers verify side by side and only judging and writing queue for the
    write lock (app.ingest.signatures.verify_before); the digests that verified now."""
    fingerprint = pipeline.trust.fingerprint
    ok = [p for _, p in items if isinstance(p, Parsed)]

    def known(digests: list[bytes]) -> set[bytes]:
        # The stored offers the items name are read too: judging a status checks its
        # offer's signature, which then needs no lookup of its own in the transaction.
        named = {n for p in ok for n in p.named}.difference(digests)
        try:
            return verified_before(pipeline.engine, [*digests, *named], trust=fingerprint)
        except SQLAlchemyError:
            return set()  # verified here then; the batch's transaction meets the error

    return verify_before((e for p in ok for e in (p.element, *p.chain)), pipeline.trust, known)


def _unavailable(outcome: Done | ItemError) -> bool:
    return isinstance(outcome, NotStored) and outcome.unavailable


def _report(report: IngestReport, outcome: Done | ItemError) -> None:
    if isinstance(outcome, ItemError):
        report.errors.append(outcome)
        return
    if outcome.verdict is None:
        report.redelivered += 1
        return
    report.add(outcome.verdict, outcome.observation)
    report.stored += outcome.new
    # A status of this run whose offer this item made known: its verdict is now final.
    for observation, verdict in outcome.judged_again.items():
        report.replace(observation, verdict)


# --- one batch: consecutive items in one transaction ---------------------------------------


def _try_batch(
    pipeline: Pipeline,
    items: Sequence[_Prepared],
    *,
    now: int,
    second: SecondCore | None = None,
    verified: Sequence[bytes] = (),
) -> tuple[list[Done | ItemError], int]:
    """Run items in one transaction, derive the hops they touched, and commit. Returns
    their results and ``len(items)``; raises ItemFailed when an item met a database error
    (nothing is kept), BatchFailed when the batch never got its locks, SQLAlchemyError
    when the commit fails. ``verified``: digests whose signatures verified before the
    transaction, recorded in the signature cache with it.

    On PostgreSQL the batch first waits for every lock its items take (``Locks``), in the
    one global order and holding nothing yet, so the wait cannot deadlock. Holding them, no
    other writer can change what the batch asks about its own digests and hops: the batch
    memory is exact, as on SQLite, no item needs a savepoint, and each table is written
    with one statement. A lock found missing later (a hop the batch affects beyond its
    own) starts the batch again holding it from the start, as ``_store`` does."""
    keys = frozenset(k for _, p in items if isinstance(p, Parsed) for k in p.lock_keys)
    for _ in range(_RESTARTS):
        try:
            results = _batch(pipeline, items, keys, now=now, second=second, verified=verified)
        except NeedLocks as exc:
            keys = exc.keys
            continue
        return results, len(items)
    raise BatchFailed("the batch never got the locks it needed")


def _batch(
    pipeline: Pipeline,
    items: Sequence[_Prepared],
    keys: frozenset[str],
    *,
    now: int,
    second: SecondCore | None,
    verified: Sequence[bytes],
) -> list[Done | ItemError]:
    """One attempt of ``_try_batch``, holding ``keys``. Raises NeedLocks, ItemFailed."""
    results: list[Done | ItemError] = []
    with db.transaction(pipeline.engine) as session:
        locks = Locks(session, keys)
        ok = [p for _, p in items if isinstance(p, Parsed)]
        state = BatchState(pipeline, session, now, locks, exact=True)
        digests = {d for p in ok for d in p.digests}
        # Only the items' own (whose locks it holds: no row of the cache is written by two
        # batches at once); a batch tried again in parts passes the others to each part.
        for digest in digests.intersection(verified):
            state.memory.mark_verified(digest, pipeline.trust.fingerprint)
        state.load(
            digests,
            {p.hop for p in ok},
            {f.key for f, _ in items if isinstance(f, Carried) and f.key is not None},
            named={n for p in ok for n in p.named},
        )
        state.writes.reserve(sum(1 + len(p.chain) for p in ok), len(ok))
        if second is not None:  # what the child verified ahead
            second.mark(state.memory)
        touched: set[bytes] = set()
        for index, (found, one) in enumerate(items):
            if isinstance(found, CarrierError) or one is None:
                results.append(Done(carrier_error_verdict(found)))  # type: ignore[arg-type]
                continue
            item = Judge(state)
            try:
                if isinstance(one, Unparsed):  # kept as evidence, within the batch
                    # It re-derives its hop (app.store.rejected), which reads what the
                    # batch has not written yet: written first.
                    state.flush()
                    done = refuse(pipeline, session, found, one, now, locks)
                else:
                    locks.need(one.lock_keys)
                    done = item.run(found, one)
            except SQLAlchemyError as exc:
                # No savepoints: the whole transaction rolls back, the runner tries the
                # items before this one again and runs it alone.
                raise ItemFailed(index) from exc
            results.append(done)
            touched |= item.touched
        state.writes.flush()  # before anything reads what the batch wrote
        # The hops the batch touched are found once, for all its items together.
        hops = affected_hops(session, touched, locks=locks)
        derive_hops(session, hops, now=now, timing=pipeline.timing, locks=locks)
        state.memory.flush()
    return results


def _alone(pipeline: Pipeline, item: _Prepared, *, now: int) -> Done | ItemError:
    """One item in a transaction of its own, reported as an ItemError when it fails."""
    found, one = item
    if isinstance(found, CarrierError) or one is None:
        return Done(carrier_error_verdict(found))  # type: ignore[arg-type]
    try:
        done = _store(pipeline, found, one, now)
    except SQLAlchemyError as exc:
        return not_stored(found.source, exc)
    if done is None:
        return NotStored(found.source, BUSY)
    return done


def _store(pipeline: Pipeline, item: Carried, one: Parsed | Unparsed, now: int) -> Done | None:
    """One item, parsed, in one transaction, started again (with more locks from the
    start) while it finds locks taken. None when it never got them. Raises
    SQLAlchemyError."""
    if isinstance(one, Unparsed):
        bad = one
        return db.run(pipeline.engine, lambda s: refuse(pipeline, s, item, bad, now, Locks(s)))
    keys = frozenset(one.lock_keys)

    def work(session: Session, keys: frozenset[str]) -> Done:
        locks = Locks(session, keys)  # all the item's locks: its memory is exact
        state = BatchState(pipeline, session, now, locks, exact=True)
        retries = {item.key} if item.key is not None else set()
        state.load(set(one.digests), {one.hop}, retries, named=set(one.named))
        state.writes.reserve(1 + len(one.chain), 1)
        item_work = Judge(state)
        done = item_work.run(item, one)
        state.writes.flush()  # the affected hops are read from what it wrote
        derive_hops(session, item_work.hops(), now=now, timing=pipeline.timing, locks=locks)
        state.memory.flush()
        return done

    for _ in range(_RESTARTS):
        try:
            return db.run(pipeline.engine, functools.partial(work, keys=keys))
        except NeedLocks as exc:
            keys = exc.keys
    return None
