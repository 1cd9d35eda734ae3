"""The ingest pipeline, one path for every entry point (HTTP, upload, CLI):
payload -> carriers -> verify (profile §6, §7, §5) -> persist -> re-derive hops and flags.

Items are committed in batches of up to ``app.ingest.batches.BATCH_ITEMS``, through the one
batch runner the envelope stage uses too (``app.ingest.batches.run_batch``; envelope items
are stored after each batch of signed items, ``app.ingest.envelope``): one transaction holds
a run of consecutive items, the rows they produce are written behind, with one statement per
table at the end of the batch (``app.store.writebehind``), and the hops they touched are
re-derived once, at the end of the batch, instead of after every item (the derivation reads
only stored facts, so deriving once gives what deriving after each item would have left).
A per-item transaction cost ~40 statements and a commit per element; a batch shares the
commit, the statements and the derivation of hops that several items touch (an offer, its
statuses, its children). On PostgreSQL a batch first tries for every lock its items take,
in one statement; holding them, it runs as on SQLite, with exact batch memories and no
savepoints; otherwise each item runs in a SAVEPOINT of its own (``_item_scope``), with its
memories in the database. Each item still stands alone:

- an item that fails (a database error, or on PostgreSQL a lock held by another writer)
  rolls back to its savepoint, leaving nothing of itself (without savepoints the whole
  transaction rolls back and the items before it run again as a batch); the items before
  it are kept,
  it is run again alone in its own transaction (the way every item ran before batching:
  restarted with its locks taken up front, retried on transient errors, and reported as an
  ``ItemError`` when it fails again), and the next batch starts after it. Input order, and
  so every order-dependent verdict (duplicate, equivocation, pending), is kept;
- when the batch as a whole cannot commit (or its derivation fails), nothing of it was kept
  and each of its items is run again alone.

So a bad item never spoils the rest of a batch, and nothing is lost. On PostgreSQL a batch
never waits for a lock while holding others (``Locks.need`` only tries); the item that would
have to wait is the one run alone. The same pieces as the database-less ``verify`` are used
(``read_capture``, ``context_for``, ``carrier_error_verdict``, the ``Verifier``), with the
verifier's memories in the database (``app.store.memory``), one verifier per batch. What a
batch asks of the store by digest (which elements are stored, which signatures verified)
is loaded with one query per batch, and the batch's signatures are verified ahead on every
core (``app.ingest.signatures``).

Inputs stream: a capture given as a binary file is read item by item (``read_capture``), and
with ``on_verdict`` the report keeps only counts and a bounded window of recent verdicts
(``IngestReport``), so memory does not grow with the capture.

What makes the result independent of ingest order (the hypothesis test proves it):
- every verdict row also records the element judged against an empty replay memory
  (``Judgement``); hops and flags are derived from that, never from duplicate/equivocation;
- a status whose offer is unknown is kept pending and judged again when any item makes
  the offer known (profile §6.8);
- an offer with ``prev`` but no carried chain is checked against the earlier offers the
  store holds (profile §7: "a party that holds the earlier offer can still check the link"),
  and judged again when an earlier offer arrives later.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from handoff_context import (
    Context,
    Element,
    HandoffObject,
    ObjectIndex,
    Offer,
    Outcome,
    Result,
    StatusObject,
    Timing,
    TrustStore,
    Verdict,
    Verifier,
    parse_element,
    parse_object,
)
from handoff_context.errors import HandoffError, Reason
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from app.capture.carriers import Carried, CarrierError, ExtractStats, Found, read_capture
from app.capture.items import CaptureItem
from app.envelope.config import EnvelopeConfig
from app.errors import ItemProblem as ItemError  # an item that could not be stored
from app.errors import NotStored
from app.ingest.batches import (
    BATCH_ITEMS,
    BUSY,
    BatchFailed,
    ItemFailed,
    batched,
    not_stored,
    run_batch,
)
from app.ingest.envelope import EnvelopeIngest, EnvelopeReport
from app.ingest.live import HostStates, timed_batches
from app.ingest.signatures import verify_ahead
from app.ingest.verifying import VerifyOptions, carrier_error_verdict, context_for
from app.store import db
from app.store.db import Locks, NeedLocks, digest_lock, hop_lock
from app.store.derive import HopKey, affected_hops, derive_hops
from app.store.host import stored_keys
from app.store.memory import StoreMemory, fresh_verifier, store_verifier
from app.store.records import (
    Judgement,
    Observed,
    add_observation,
    children,
    children_of,
    depends_on_replay,
    judgement_values,
    named_by_pending,
    observation_values,
    offers_judged_without_chain,
    pending_statuses,
    ref_rows,
    stored_ancestors,
    update_judgement,
    update_verdict,
    verdict_values,
)
from app.store.rejected import keep_refused
from app.store.writebehind import BatchWrites, by_observation

# Restarts of one item that found a lock taken, before it is reported as an error.
_RESTARTS = 50
# With ``on_verdict``: verdicts kept for a later item to complete (a pending status whose
# offer arrives later in the same run) before they are handed on as they are.
VERDICT_WINDOW = 4096
Progress = Callable[[str, int, float | None], None]  # (input, items done, fraction read)
Capture = bytes | BinaryIO


@dataclass(frozen=True)
class Pipeline:
    """Everything an ingest needs besides its input."""

    engine: Engine
    trust: TrustStore
    options: VerifyOptions  # profile §12; ``at`` is the receive time of items without one
    timing: Timing = field(default_factory=Timing)
    objects: ObjectIndex = field(default_factory=ObjectIndex)
    envelope: EnvelopeConfig = field(default_factory=EnvelopeConfig)


@dataclass
class IngestReport:
    """Profile §11 verdicts in input order, plus what the store made of them.

    Without ``sink`` every verdict is kept in ``verdicts``. With one, each verdict is handed
    to it, in input order, once ``VERDICT_WINDOW`` later verdicts have been made (or at the
    end), and only those not yet handed on stay in ``verdicts`` (none once ``ingest``
    returns). A verdict judged again by a later item of the same run (a pending status
    whose offer comes later) is handed on in its final form when that item lies within the
    window. ``counts`` covers every verdict either way, in the shape of
    ``verifying.outcome_counts`` plus ``errors`` and ``stored``.
    """

    verdicts: list[Verdict] = field(default_factory=list)
    errors: list[ItemError] = field(default_factory=list)
    skipped: int = 0  # items with neither a signed handoff nor an envelope item
    stored: int = 0  # elements stored for the first time
    # Observations whose observation id was stored already (a shipper's retry): neither
    # stored nor judged again, and never counted as a duplicate.
    redelivered: int = 0
    envelopes: EnvelopeReport = field(default_factory=EnvelopeReport)
    # The source of the first capture record from which on nothing was stored, when the
    # database could not be written (an outage, a full disk, read-only) and the ingest
    # stopped there; None when it read its input to the end.
    cut: str | None = None
    sink: Callable[[Verdict], None] | None = None
    _outcomes: Counter[str] = field(default_factory=Counter)
    _observations: deque[int | None] = field(default_factory=deque)  # beside ``verdicts``
    _where: dict[int, int] = field(default_factory=dict)  # observation -> absolute position
    _first: int = 0  # absolute position of verdicts[0]

    @property
    def complete(self) -> bool:
        """Whether every item read was stored (or refused with its verdict): nothing to
        send again. An item error (``errors``, ``envelopes.errors`` that were not stored)
        or a cut input makes it False."""
        if self.cut is not None or self.errors:
            return False
        return not any(isinstance(e, NotStored) for e in self.envelopes.errors)

    @property
    def counts(self) -> dict[str, int]:
        counts = {o.value: self._outcomes[o.value] for o in Outcome}
        counts.update(verdicts=self._first + len(self.verdicts), skipped=self.skipped)
        counts.update(errors=len(self.errors), stored=self.stored, **self.envelopes.counts)
        counts.update(redelivered=self.redelivered)
        return counts

    def add(self, verdict: Verdict, observation: int | None = None) -> None:
        if observation is not None:
            self._where[observation] = self._first + len(self.verdicts)
        self.verdicts.append(verdict)
        self._observations.append(observation)
        self._outcomes[verdict.outcome.value] += 1
        if self.sink is not None and len(self.verdicts) > VERDICT_WINDOW:
            self._hand_on(len(self.verdicts) - VERDICT_WINDOW)

    def replace(self, observation: int, verdict: Verdict) -> None:
        """A verdict of this run judged again; ignored once it was handed on."""
        position = self._where.get(observation)
        if position is None:
            return
        old = self.verdicts[position - self._first]
        self._outcomes[old.outcome.value] -= 1
        self._outcomes[verdict.outcome.value] += 1
        self.verdicts[position - self._first] = verdict

    def finish(self) -> None:
        """Hand every remaining verdict to the sink (no-op without one)."""
        if self.sink is not None:
            self._hand_on(len(self.verdicts))

    def _hand_on(self, n: int) -> None:
        assert self.sink is not None
        for verdict in self.verdicts[:n]:
            self.sink(verdict)
            observation = self._observations.popleft()
            if observation is not None:
                del self._where[observation]
        del self.verdicts[:n]
        self._first += n


def ingest(
    pipeline: Pipeline,
    inputs: Iterable[tuple[str, Capture]],
    *,
    now: int | None = None,
    content_type: str | None = None,
    progress: Progress | None = None,
    on_verdict: Callable[[Verdict], None] | None = None,
) -> IngestReport:
    """Ingest capture files (profile §10), each ``(name, octets or binary file)``, in order.

    ``now`` is the store's clock (default: wall clock): first-seen times and the time rules
    of profile §8. Freshness is judged at each item's receive time (profile §10), else
    ``options.at``. A file is read as a stream (``read_capture``). ``on_verdict`` receives
    every verdict in input order and bounds what the report keeps (``IngestReport``).
    ``progress`` is called after each batch. Never raises for bad input or a failing item.
    """
    clock = int(time.time()) if now is None else now
    report = IngestReport(sink=on_verdict)
    envelopes = EnvelopeIngest(
        pipeline.engine, pipeline.envelope, pipeline.objects, clock, report=report.envelopes
    )
    host = HostStates(receiver=pipeline.options.receiver, at=pipeline.options.at)
    span = _Span()
    for name, data in inputs:
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
        for batch in _batches(items, live=_is_pipe(data)):
            # A long-running input (a live pipe, app.ingest.live) is judged at the store's
            # clock of each batch, not of its start.
            clock = int(time.time()) if now is None else now
            _run(pipeline, batch, clock, report)
            # The host task states and envelope items read with this batch: stored now,
            # not at the end of the input (docs/envelopes.md).
            if report.cut is None:
                _flush_host(pipeline, host, report, clock)
            if report.cut is None:
                envelopes.flush()
            if _cut(report, span, batch, exact=not (host.pending or envelopes.pending)):
                break
            done += len(batch)
            if progress is not None:
                progress(name, done, _fraction_read(data))
        report.skipped += stats.without_handoff
        if report.cut is not None:
            break
        _flush_host(pipeline, host, report, clock)  # read after the last batch
        if report.cut is None:
            envelopes.flush()
        if _cut(report, span, [], exact=False):
            break
    report.redelivered += host.redelivered
    report.finish()
    return report


class _Span:
    """The source of the first capture record read since everything before it was stored:
    where an ingest cut short by an unavailable database says to start again. (The
    signed items, host task states and envelope items of the records read with a batch
    are stored after it, so the span covers all three.)"""

    def __init__(self) -> None:
        self.first: str | None = None

    def reading(self, on_item: Callable[[CaptureItem], bool]) -> Callable[[CaptureItem], bool]:
        def read(item: CaptureItem) -> bool:
            if self.first is None:
                self.first = item.source
            return on_item(item)

        return read


def _cut(report: IngestReport, span: _Span, batch: Sequence[Found], *, exact: bool) -> bool:
    """Whether the ingest stops here, the database being unavailable; else the span
    starts again (everything read so far was stored or reported). ``exact``: the signed
    items are all that was read and not stored, so the cut is where they stopped."""
    unavailable = report.cut is not None or any(
        isinstance(e, NotStored) and e.unavailable for e in report.envelopes.errors[-1:]
    )
    if not unavailable:
        span.first = None
        return False
    if exact and report.cut is not None:
        return True
    first = span.first or (batch[0].source if batch else None) or report.cut
    report.cut = first or "(the end of the input)"
    return True


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


def _run(pipeline: Pipeline, batch: Sequence[Found], now: int, report: IngestReport) -> None:
    """One batch of signed items through the batch runner, reported in input order. When
    the database turns out unavailable the batch stops there: ``report.cut`` is set."""
    if all(isinstance(found, CarrierError) for found in batch):
        # Nothing to store (an item no carrier could read has a verdict, not a row): no
        # transaction either, so a body of unreadable items costs no database work.
        for found in batch:
            _report(report, _Done(carrier_error_verdict(found)))  # type: ignore[arg-type]
        return
    outcomes = run_batch(
        batch,
        attempt=functools.partial(_try_batch, pipeline, now=now),
        alone=functools.partial(_alone, pipeline, now=now),
        stop=_unavailable,
    )
    for outcome in outcomes:
        _report(report, outcome)
    if outcomes and _unavailable(outcomes[-1]):
        report.cut = batch[len(outcomes) - 1].source


def _unavailable(outcome: _Done | ItemError) -> bool:
    return isinstance(outcome, NotStored) and outcome.unavailable


def _batches(items: Iterable[Found], *, live: bool = False) -> Iterator[list[Found]]:
    """Batches of ``BATCH_ITEMS``; from a stream (``live``), also cut after
    ``live.FLUSH_SECONDS``, so that a trickling pipe is committed at least once a second."""
    if live:
        return timed_batches(items, size=BATCH_ITEMS)
    return batched(items)


def _is_pipe(data: Capture) -> bool:
    """A stream that cannot seek (stdin on a pipe): it may trickle, so it is batched by
    time too (``app.ingest.live``)."""
    if isinstance(data, bytes):
        return False
    try:
        return not data.seekable()
    except (OSError, ValueError):
        return True


def _fraction_read(data: Capture) -> float | None:
    """How far into a seekable file reading has got; None for octets or a pipe."""
    if isinstance(data, bytes):
        return None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        size = os.fstat(data.fileno()).st_size
        return min(1.0, data.tell() / size) if size else None
    return None


def _report(report: IngestReport, outcome: _Done | ItemError) -> None:
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
    pipeline: Pipeline, batch: Sequence[Found], *, now: int
) -> tuple[list[_Done | ItemError], int]:
    """Run items in one transaction, each in a savepoint, until one fails; derive the hops
    of those that ran, and commit. Returns their results and the index of the failed item
    (``len(batch)`` when none failed). Raises SQLAlchemyError when the commit fails."""
    results: list[_Done | ItemError] = []
    failed = len(batch)
    parsed = [None if isinstance(f, CarrierError) else _parse(f.value, pipeline) for f in batch]
    with db.transaction(pipeline.engine) as session:
        locks = Locks(session)  # a batch holds locks, so it only ever tries for more
        ok = [p for p in parsed if p is not None]
        # On PostgreSQL: every lock the batch's items take, tried for at once. Holding
        # them, no other writer can change what the batch asks about its own digests and
        # hops, so the batch memory is exact, as on SQLite, and no item needs a savepoint.
        exact = locks.try_take(k for p in ok for k in p.lock_keys)
        state = _Batch(pipeline, session, now, locks, exact=exact)
        state.load(
            {d for p in ok for d in p.digests},
            {p.hop for p in ok},
            {f.key for f in batch if isinstance(f, Carried) and f.key is not None},
            named={n for p in ok for n in p.named},
        )
        state.writes.reserve(sum(1 + len(p.chain) for p in ok), len(ok))
        signed = (e for p in parsed if p is not None for e in (p.element, *p.chain))
        verify_ahead(signed, pipeline.trust, state.memory)
        hops: set[HopKey] = set()
        touched: set[bytes] = set()
        for index, (found, one) in enumerate(zip(batch, parsed, strict=True)):
            if isinstance(found, CarrierError):
                results.append(_Done(carrier_error_verdict(found)))
                continue
            item = _Item(state)
            if one is None:
                # A malformed item re-derives its hop (app.store.rejected), which reads
                # what the batch has not written yet: written first, outside its savepoint.
                state.flush()
            try:
                with _item_scope(session, state.writes, savepoint=not exact):
                    if one is None:  # malformed: kept as evidence, within the batch
                        done = _refuse(pipeline, session, found, now, locks)
                    else:
                        locks.need(one.lock_keys)
                        done = item.run(found, one)
                        if not exact:
                            hops |= item.hops()  # their locks, taken inside the savepoint
            except (NeedLocks, SQLAlchemyError) as exc:
                if exact:
                    raise ItemFailed(index) from exc  # the whole transaction rolls back
                failed = index
                break
            results.append(done)
            touched |= item.touched
        state.writes.flush()  # before anything reads what the batch wrote
        try:
            if exact:
                # The hops the batch touched are found once, for all its items together.
                hops = affected_hops(session, touched, locks=locks)
            derive_hops(session, hops, now=now, timing=pipeline.timing, locks=locks)
        except NeedLocks as exc:
            # Another writer holds a hop: nothing of the batch is kept, each item runs alone.
            raise BatchFailed("a hop of the batch is locked by another writer") from exc
        state.memory.flush()
    return results, failed


@contextlib.contextmanager
def _item_scope(session: Session, writes: BatchWrites, *, savepoint: bool) -> Iterator[None]:
    """Each item of a batch in a SAVEPOINT on PostgreSQL when the batch could not take all
    its locks up front: an item that finds a lock taken is then common (concurrent
    writers), and the items before it are kept. SQLite (one writer, no locks) and a batch
    holding its locks fail an item only on a database error or a lock beyond its own,
    which is rare: no savepoint (two statements an item saved), and a failing item rolls
    the whole transaction back (``ItemFailed``; the runner tries the items before it
    again). Without a savepoint the batch memory need not be undone either."""
    if not savepoint:
        yield
        return
    mark = writes.mark()
    try:
        with db.savepoint(session):
            yield
    except BaseException:
        writes.rollback(mark)  # the rows it buffered go with its savepoint
        raise


def _alone(pipeline: Pipeline, found: Found, *, now: int) -> _Done | ItemError:
    """One item in a transaction of its own, reported as an ItemError when it fails."""
    if isinstance(found, CarrierError):
        return _Done(carrier_error_verdict(found))
    try:
        done = _store(pipeline, found, now)
    except SQLAlchemyError as exc:
        return not_stored(found.source, exc)
    if done is None:
        return NotStored(found.source, BUSY)
    return done


def _store(pipeline: Pipeline, item: Carried, now: int) -> _Done | None:
    """One item in one transaction, started again (with more locks from the start) while
    it finds locks taken. None when it never got them. Raises SQLAlchemyError."""
    one = _parse(item.value, pipeline)
    if one is None:
        return db.run(pipeline.engine, lambda s: _refuse(pipeline, s, item, now, Locks(s)))
    keys = frozenset(one.lock_keys)

    def work(session: Session, keys: frozenset[str]) -> _Done:
        locks = Locks(session, keys)  # all the item's locks: its memory is exact
        state = _Batch(pipeline, session, now, locks, exact=True)
        retries = {item.key} if item.key is not None else set()
        state.load(set(one.digests), {one.hop}, retries, named=set(one.named))
        state.writes.reserve(1 + len(one.chain), 1)
        item_work = _Item(state)
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


def _refuse(pipeline: Pipeline, session: Session, item: Carried, now: int, locks: Locks) -> _Done:
    """A malformed item, or one with a key inside the message: judged without any memory
    (the verdict depends on the octets alone); the octets are kept as evidence
    (app.store.rejected). Raises NeedLocks or SQLAlchemyError."""
    ctx = context_for(item, pipeline.options)
    verifier = Verifier(trust=pipeline.trust, policy=pipeline.options.policy)
    verdict = verifier.verify_value(item.value, ctx, source=item.source)
    kept = keep_refused(
        session, item=item, ctx=ctx, verdict=verdict, now=now, timing=pipeline.timing, locks=locks
    )
    if kept is None:
        return _Done(None)  # its observation id is stored already: a shipper's retry
    return _Done(verdict)


@dataclass
class _Done:
    verdict: Verdict | None  # None: a redelivered observation (its id is stored already)
    observation: int | None = None
    new: int = 0
    judged_again: dict[int, Verdict] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Parsed:
    """An item's object and element, parsed once (the element size limit enforced here,
    for every entry point), with what its locks and the batch's lookups need."""

    obj: HandoffObject | StatusObject
    element: Element
    chain: tuple[Element, ...]  # the carried chain elements that parse
    digests: frozenset[bytes]  # the element's and its carried chain's
    lock_keys: frozenset[str]

    @property
    def hop(self) -> tuple[str, str]:
        """(iss, hop) of the element, as the replay memory keys it (profile §6.4)."""
        return self.element.payload.iss, self.element.payload.hop

    @property
    def named(self) -> frozenset[bytes]:
        """The offer the element names by digest: a status's offer, an offer's ``prev``."""
        p = self.element.payload
        named = p.prev if isinstance(p, Offer) else p.offer
        return frozenset() if named is None else frozenset({named})


def _parse(value: object, pipeline: Pipeline) -> _Parsed | None:
    """The object and its element, when both parse within the size limit; the verifier
    reports what does not (``_refuse``)."""
    try:
        obj = parse_object(value, max_element=pipeline.options.max_element_bytes)
        octets = obj.status if isinstance(obj, StatusObject) else obj.offer
        element = parse_element(octets, obj.form)
    except HandoffError:
        return None
    chain: list[Element] = []
    if isinstance(obj, HandoffObject):
        for link in obj.chain:
            with contextlib.suppress(HandoffError):
                chain.append(parse_element(link, obj.form))
    digests = frozenset(e.digest for e in (element, *chain))
    return _Parsed(obj, element, tuple(chain), digests, _lock_keys([element, *chain]))


def _lock_keys(elements: Iterable[Element]) -> frozenset[str]:
    """The locks an item takes before anything else: its hops, and the elements it stores
    or names by digest (see ``app.store.db.Locks``)."""
    keys = set()
    for e in elements:
        p = e.payload
        named = p.prev if isinstance(p, Offer) else p.offer
        keys |= {hop_lock(p.hop), digest_lock(e.digest)}
        if named is not None:
            keys.add(digest_lock(named))
    return frozenset(keys)


class _Batch:
    """What the items of one transaction share: one verifier over one memory of the store
    (built once per batch, not per item), and the batch's known digests."""

    def __init__(
        self, pipeline: Pipeline, session: Session, now: int, locks: Locks, *, exact: bool
    ) -> None:
        self.p = pipeline
        self.exact = exact
        self.session = session
        self.now = now
        self.locks = locks
        self.verifier = store_verifier(
            session,
            trust=pipeline.trust,
            policy=pipeline.options.policy,
            objects=pipeline.objects,
            now=now,
        )
        assert isinstance(self.verifier.offers, StoreMemory)
        self.memory: StoreMemory = self.verifier.offers
        # The rows the batch produces, written when it ends (app.store.writebehind); when
        # the batch knows exactly what is stored (``exact``), its new elements too.
        self.writes = BatchWrites(session, elements=exact)
        self.memory.writes = self.writes
        # ``exact`` (SQLite: one writer; PostgreSQL: the batch holds the locks of all its
        # digests and hops, so no one else writes them while it runs): which of the
        # batch's digests a stored pending status names, and their stored children, loaded
        # once (``load``), so an offer that completes nothing costs no query (what the
        # batch adds is in ``writes``). Otherwise another writer may add either at any
        # time: the store is asked each time.
        self.loaded: frozenset[bytes] = frozenset()
        self.pending: set[bytes] = set()
        self.children: dict[bytes, set[bytes]] = {}
        # The batch's observation ids already stored (a shipper's retry, app.store.host),
        # loaded with one query and kept up to date as the batch stores more. On PostgreSQL
        # another writer may store one meanwhile: the unique index then fails that item,
        # which is run alone and finds it stored.
        self.keys: set[str] = set()

    def load(
        self,
        digests: set[bytes],
        hops: set[tuple[str, str]],
        keys: set[str] | None = None,
        *,
        named: set[bytes] | None = None,
    ) -> None:
        self.keys = stored_keys(self.session, keys or set())
        exact = self.exact
        self.memory.load_batch(digests, hops=hops, exact=exact, named=named or set())
        if exact:
            self.loaded = frozenset(digests)
            self.pending = named_by_pending(self.session, offers=digests)
            self.children = children_of(self.session, offers=digests)

    def flush(self) -> None:
        """Write the buffer before the batch ends, keeping the batch memory exact: the
        statuses it writes pending are then the store's to find."""
        self.pending |= self.writes.pending_offers()
        self.writes.flush()

    def pending_statuses(self, digests: set[bytes]) -> list[Observed]:
        """The pending statuses naming one of ``digests``, stored or buffered, in the
        store's order."""
        stored = {d for d in digests if d in self.pending or d not in self.loaded}
        found = pending_statuses(self.session, stored) if stored else []
        return by_observation(found, self.writes.pending_statuses(digests))

    def children_of(self, digests: set[bytes]) -> list[bytes]:
        """The offers naming one of ``digests`` as their ``prev``, stored or buffered, in
        digest order."""
        found = self.writes.children(digests)
        unknown = set()
        for d in digests:
            if d in self.loaded:
                found |= self.children.get(d, set())
            else:
                unknown.add(d)
        if unknown:
            found.update(children(self.session, unknown))
        return sorted(found)

    def offers_without_chain(self, digests: Sequence[bytes]) -> list[Observed]:
        """``offers_judged_without_chain`` over the store and the buffer. An offer this
        batch stored first has no observation in the store (they are all buffered)."""
        written = self.writes.flushes > 0  # then some may be in the store after all
        stored = [d for d in digests if written or d not in self.memory.inserted]
        found = offers_judged_without_chain(self.session, stored) if stored else []
        return by_observation(found, self.writes.offers_without_chain(set(digests)))


class _Item:
    """One item's work in a transaction: verify, persist, judge again what it completes;
    ``hops`` then says which hops to re-derive."""

    def __init__(self, batch: _Batch) -> None:
        self.batch = batch
        self.p = batch.p
        self.session = batch.session
        self.now = batch.now
        self.locks = batch.locks
        self.verifier = batch.verifier
        self.memory = batch.memory
        self.touched: set[bytes] = set()  # elements whose judgement changed
        self.judged_again: dict[int, Verdict] = {}

    @property
    def fresh(self) -> Verifier:
        """A verifier for one judgement as if nothing had been seen before: a new one each
        time, or judging one twin would make the next an equivocation."""
        return fresh_verifier(self.memory, policy=self.p.options.policy, objects=self.p.objects)

    def run(self, item: Carried, parsed: _Parsed) -> _Done:
        if item.key is not None and item.key in self.batch.keys:
            return _Done(None)  # a shipper's retry of a stored observation (app.store.host)
        element = parsed.element
        ctx = context_for(item, self.p.options)
        obj = self._with_stored_chain(parsed.obj, element)
        known_before = element.digest in self.memory.stored
        verdict = self.verifier.verify_object(obj, ctx, source=item.source)
        if verdict.reason is Reason.MALFORMED:  # e.g. a status where an offer belongs
            return _Done(verdict)
        self.memory.store(element)  # a no-op for an offer that verified (stored already)
        new = not known_before and element.digest in self.memory.inserted
        judged = verdict
        if depends_on_replay(verdict):
            judged = self.fresh.verify_object(obj, ctx, source=item.source)
        observation = self._add_observation(item, element, ctx, verdict, judged)
        if item.key is not None:
            self.batch.keys.add(item.key)
        self.touched.add(element.digest)
        known = self._observe_chain(judged, element, ctx, item.source)
        if element.is_offer and _passed(judged, "signature"):
            known.add(element.digest)
        self._complete(known)
        return _Done(verdict, observation, int(new), self.judged_again)

    def _add_observation(
        self, item: Carried, element: Element, ctx: Context, verdict: Verdict, judged: Verdict
    ) -> int:
        """Buffer the item's receipt (with the host task state it rode in) and verdict;
        returns the observation's id."""
        writes = self.batch.writes
        observation = add_observation(
            self.session,
            digest=element.digest,
            ctx=ctx,
            source=item.source,
            now=self.now,
            item=item,
            writes=writes,
        )
        row = verdict_values(verdict, Judgement.of(judged), self.p.trust.fingerprint, self.now)
        verdict_id = writes.verdict_id()
        row.update(id=verdict_id, observation_id=observation)
        observed = Observed(
            verdict_id=verdict_id,
            observation_id=observation,
            source=item.source,
            ctx=ctx,
            octets=element.octets,
            form=element.form,
            outcome=verdict.outcome.value,
            reason=None if verdict.reason is None else verdict.reason.value,
        )
        p = element.payload
        kind, named = ("offer", None) if isinstance(p, Offer) else ("status", p.offer)
        refs = ref_rows(verdict_id, verdict)
        writes.add_verdict(row, refs, observed, kind=kind, offer=named)
        return observation

    def hops(self) -> set[HopKey]:
        """The hops to derive again for what ``run`` changed, their locks held."""
        keys = affected_hops(self.session, self.touched, locks=self.locks)
        self.locks.need(hop_lock(hop) for _, hop in keys)
        return keys

    def _with_stored_chain(
        self, obj: HandoffObject | StatusObject, element: Element
    ) -> HandoffObject | StatusObject:
        """An offer naming ``prev`` without a carried chain is checked against the earlier
        offers the store holds (profile §7); the report then says ``carried: false``."""
        offer = element.payload
        if not isinstance(obj, HandoffObject) or obj.chain or not isinstance(offer, Offer):
            return obj
        if offer.prev is None:
            return obj
        limit = self.p.options.max_chain - 1
        ancestors = stored_ancestors(
            self.session,
            offer.prev,
            form=obj.form,
            limit=limit,
            locks=self.locks,
            known=self.memory.ancestor,
        )
        if not ancestors:
            return obj
        return HandoffObject(
            offer=obj.offer, chain=tuple(ancestors), form=obj.form, chain_carried=False
        )

    def _observe_chain(
        self, judged: Verdict, element: Element, ctx: Context, source: str
    ) -> set[bytes]:
        """The verified chain elements of this bundle: observed (they count for their
        hops) when the chain check passed; known offers either way."""
        if judged.chain is None:
            return set()
        known = {e.digest for e in judged.chain.elements if e.result is Result.PASS and e.digest}
        if judged.chain.carried and _passed(judged, "chain"):
            for e in judged.chain.elements:
                assert e.digest is not None
                row = observation_values(
                    digest=e.digest,
                    ctx=ctx,
                    source=f"{source} chain[{e.index}]",
                    now=self.now,
                    via=element.digest,
                )
                self.batch.writes.add_observation(row)
        self.touched.update(known)
        return known

    def _complete(self, known: set[bytes]) -> None:
        """Judge again what the offers in ``known`` complete: pending statuses naming them,
        and offers below them whose chain was built from stored elements."""
        for observed in self.batch.pending_statuses(known):
            self._judge_status_again(observed)
        frontier, seen = known, set(known)
        for _ in range(self.p.options.max_chain):
            # Offers below one we hold took its lock when they were stored.
            self.locks.need(digest_lock(d) for d in frontier)
            below = [d for d in self.batch.children_of(frontier) if d not in seen]
            if not below:
                break
            seen.update(below)
            for observed in self.batch.offers_without_chain(below):
                self._judge_offer_again(observed)
            frontier = set(below)

    def _judge_status_again(self, observed: Observed) -> None:
        status = StatusObject(status=observed.octets, form=observed.form)
        verdict = self.verifier.verify_object(status, observed.ctx, source=observed.source)
        judged = verdict
        if depends_on_replay(verdict):
            judged = self.fresh.verify_object(status, observed.ctx, source=observed.source)
        self._replace(observed, verdict, judged)

    def _judge_offer_again(self, observed: Observed) -> None:
        element = parse_element(observed.octets, observed.form)
        bare = HandoffObject(observed.octets, (), observed.form, chain_carried=False)
        obj = self._with_stored_chain(bare, element)
        # Against an empty replay memory: the store's own memory already holds this offer.
        judged = self.fresh.verify_object(obj, observed.ctx, source=observed.source)
        if observed.outcome == Outcome.DUPLICATE.value or observed.reason == "equivocation":
            # What was reported stays reported; only the judgement is completed.
            judgement, trust = Judgement.of(judged), self.p.trust.fingerprint
            if self.batch.writes.holds_verdict(observed.verdict_id):
                values = judgement_values(judgement, trust, self.now)
                self.batch.writes.update_verdict(observed.verdict_id, values, None)
            else:
                update_judgement(
                    self.session,
                    observed.verdict_id,
                    judgement=judgement,
                    trust=trust,
                    now=self.now,
                )
            self.touched.add(element.digest)
        else:
            self._replace(observed, judged, judged)

    def _replace(self, observed: Observed, verdict: Verdict, judged: Verdict) -> None:
        judgement, trust = Judgement.of(judged), self.p.trust.fingerprint
        writes = self.batch.writes
        if writes.holds_verdict(observed.verdict_id):
            values = verdict_values(verdict, judgement, trust, self.now)
            writes.update_verdict(observed.verdict_id, values, ref_rows(0, verdict))
        else:
            update_verdict(
                self.session,
                observed.verdict_id,
                verdict=verdict,
                judgement=judgement,
                trust=trust,
                now=self.now,
            )
        self.judged_again[observed.observation_id] = verdict
        if verdict.digest is not None:
            self.touched.add(verdict.digest)


def _passed(verdict: Verdict, check: str) -> bool:
    return any(c.check == check and c.result is Result.PASS for c in verdict.checks)
