"""The ingest pipeline, one path for every entry point (HTTP, upload, CLI):
payload -> carriers -> verify (SPEC 6, 7, 5) -> persist -> re-derive hops and flags.

Each carried object is one transaction. A database error rolls back that item alone and is
reported as its error; the rest of the batch goes on. The same pieces as the database-less
``verify`` are used (``read_capture``, ``context_for``, ``carrier_error_verdict``, the
``Verifier``), with the verifier's memories in the database (``app.store.memory``).

What makes the result independent of ingest order (the hypothesis test proves it):
- every verdict row also records the element judged against an empty replay memory
  (``Judgement``); hops and flags are derived from that, never from duplicate/equivocation;
- a status whose offer is unknown is kept pending and judged again when any item makes
  the offer known (SPEC 6, last paragraph);
- an offer with ``prev`` but no carried chain is checked against the earlier offers the
  store holds (SPEC 7: "a party that holds the earlier offer can still check the link"),
  and judged again when an earlier offer arrives later.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from .carriers import Carried, CarrierError, ExtractStats, Found, read_capture
from .envelope.ingest import EnvelopeConfig, EnvelopeIngest, EnvelopeReport
from .protocol.errors import HandoffError, Reason
from .protocol.handoff import HandoffObject, StatusObject, parse_object
from .protocol.lifecycle import Timing
from .protocol.model import Element, Offer
from .protocol.refs import ObjectIndex
from .protocol.trust import TrustStore
from .protocol.verdict import Outcome, Result, Verdict
from .protocol.verify import Context, Verifier, parse_element
from .store import db
from .store.db import Locks, NeedLocks, digest_lock, hop_lock
from .store.derive import affected_hops, derive_hops
from .store.memory import store_element, store_verifier
from .store.models import ElementRow
from .store.records import (
    Judgement,
    Observed,
    add_observation,
    add_verdict,
    children,
    depends_on_replay,
    offers_judged_without_chain,
    pending_statuses,
    stored_ancestors,
    update_judgement,
    update_verdict,
)
from .store.rejected import keep_refused
from .verifying import VerifyOptions, carrier_error_verdict, context_for, outcome_counts

# Restarts of one item that found a lock taken, before it is reported as an error.
_RESTARTS = 50
Progress = Callable[[str, int, int], None]  # (input name, items done, items in it)


@dataclass(frozen=True)
class Pipeline:
    """Everything an ingest needs besides its input."""

    engine: Engine
    trust: TrustStore
    options: VerifyOptions  # SPEC 12; ``at`` is the receive time of items without one
    timing: Timing = field(default_factory=Timing)
    objects: ObjectIndex = field(default_factory=ObjectIndex)
    envelope: EnvelopeConfig = field(default_factory=EnvelopeConfig)


@dataclass(frozen=True)
class ItemError:
    """An item that could not be stored (a database error); nothing of it was kept."""

    source: str
    detail: str


@dataclass
class IngestReport:
    """SPEC 11 verdicts in input order, plus what the store made of them."""

    verdicts: list[Verdict] = field(default_factory=list)
    errors: list[ItemError] = field(default_factory=list)
    skipped: int = 0  # items that carried no handoff at all
    stored: int = 0  # elements stored for the first time
    envelopes: EnvelopeReport = field(default_factory=EnvelopeReport)

    @property
    def counts(self) -> dict[str, int]:
        counts = outcome_counts(self.verdicts, skipped=self.skipped)
        counts.update(errors=len(self.errors), stored=self.stored, **self.envelopes.counts)
        return counts


def ingest(
    pipeline: Pipeline,
    inputs: Iterable[tuple[str, bytes]],
    *,
    now: int | None = None,
    content_type: str | None = None,
    progress: Progress | None = None,
) -> IngestReport:
    """Ingest capture files (SPEC 10), each ``(name, octets)``, in order.

    ``now`` is the store's clock (default: wall clock): first-seen times and the time rules
    of SPEC 8. Freshness is judged at each item's receive time (SPEC 10), else
    ``options.at``. Never raises for bad input or a failing item.
    """
    clock = int(time.time()) if now is None else now
    report = IngestReport()
    index: dict[int, int] = {}  # observation id -> position in report.verdicts
    envelopes = EnvelopeIngest(pipeline.engine, pipeline.envelope, pipeline.objects, clock)
    for name, data in inputs:
        stats = ExtractStats()
        read = read_capture(
            data, name=name, content_type=content_type, stats=stats, on_item=envelopes.read
        )
        items = list(read)
        for done, item in enumerate(items, 1):
            _ingest_found(pipeline, item, clock, report, index)
            if progress is not None:
                progress(name, done, len(items))
        report.skipped += stats.without_handoff
        envelopes.flush(report.envelopes)  # docs/envelopes.md
    return report


def ingest_carried(pipeline: Pipeline, items: Iterable[Carried], *, now: int) -> IngestReport:
    """Ingest objects already taken out of their carriers, in order, at store clock
    ``now`` (``handoff-trace rederive`` and ``import`` replay stored receipts this way).
    Never raises for bad input or a failing item."""
    report = IngestReport()
    index: dict[int, int] = {}
    for item in items:
        _ingest_found(pipeline, item, now, report, index)
    return report


def _ingest_found(
    pipeline: Pipeline, item: Found, now: int, report: IngestReport, index: dict[int, int]
) -> None:
    if isinstance(item, CarrierError):
        report.verdicts.append(carrier_error_verdict(item))
        return
    try:
        done = _store(pipeline, item, now)
    except SQLAlchemyError as exc:
        first_line = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
        report.errors.append(ItemError(item.source, f"database error: {first_line}"))
        return
    if done is None:
        report.errors.append(ItemError(item.source, "busy: too many concurrent writers"))
        return
    if done.observation is not None:
        index[done.observation] = len(report.verdicts)
    report.verdicts.append(done.verdict)
    report.stored += done.new
    # A status of this run whose offer this item made known: its verdict is now final.
    for observation, verdict in done.judged_again.items():
        if observation in index:
            report.verdicts[index[observation]] = verdict


def _store(pipeline: Pipeline, item: Carried, now: int) -> _Done | None:
    """One item in one transaction, started again (with more locks from the start) while
    it finds locks taken. None when it never got them. Raises SQLAlchemyError."""
    obj, element = _parse(item.value)
    if obj is None or element is None:
        # Malformed, or a key inside the message: judged without any memory (the verdict
        # depends on the octets alone); the octets are kept as evidence (app.store.rejected).
        ctx = context_for(item, pipeline.options)
        verifier = Verifier(trust=pipeline.trust, policy=pipeline.options.policy)
        verdict = verifier.verify_value(item.value, ctx, source=item.source)
        keep = functools.partial(
            keep_refused, item=item, ctx=ctx, verdict=verdict, now=now, timing=pipeline.timing
        )
        db.run(pipeline.engine, keep)
        return _Done(verdict)
    keys = frozenset(_lock_keys(obj, element))

    def work(session: Session, keys: frozenset[str]) -> _Done:
        return _Item(pipeline, session, now, Locks(session, keys)).run(item, obj, element)

    for _ in range(_RESTARTS):
        try:
            return db.run(pipeline.engine, functools.partial(work, keys=keys))
        except NeedLocks as exc:
            keys = exc.keys
    return None


@dataclass
class _Done:
    verdict: Verdict
    observation: int | None = None
    new: int = 0
    judged_again: dict[int, Verdict] = field(default_factory=dict)


Parsed = tuple[HandoffObject | StatusObject | None, Element | None]


def _parse(value: object) -> Parsed:
    """The object and its element, when both parse; the verifier reports what does not."""
    try:
        obj = parse_object(value)
        octets = obj.status if isinstance(obj, StatusObject) else obj.offer
        return obj, parse_element(octets, obj.form)
    except HandoffError:
        return None, None


def _lock_keys(obj: HandoffObject | StatusObject, element: Element) -> set[str]:
    """The locks an item takes before anything else: its hops, and the elements it stores
    or names by digest (see ``app.store.db.Locks``)."""
    elements = [element]
    if isinstance(obj, HandoffObject):
        for octets in obj.chain:
            with contextlib.suppress(HandoffError):
                elements.append(parse_element(octets, obj.form))
    keys = set()
    for e in elements:
        p = e.payload
        named = p.prev if isinstance(p, Offer) else p.offer
        keys |= {hop_lock(p.hop), digest_lock(e.digest)}
        if named is not None:
            keys.add(digest_lock(named))
    return keys


class _Item:
    """One item's transaction: verify, persist, judge again what it completes, re-derive."""

    def __init__(self, pipeline: Pipeline, session: Session, now: int, locks: Locks) -> None:
        self.p = pipeline
        self.session = session
        self.now = now
        self.locks = locks
        self.verifier = self._verifier(fresh=False)
        self.touched: set[bytes] = set()  # elements whose judgement changed
        self.judged_again: dict[int, Verdict] = {}

    def _verifier(self, *, fresh: bool) -> Verifier:
        return store_verifier(
            self.session,
            trust=self.p.trust,
            policy=self.p.options.policy,
            objects=self.p.objects,
            now=self.now,
            fresh=fresh,
        )

    @property
    def fresh(self) -> Verifier:
        """A verifier for one judgement as if nothing had been seen before: a new one each
        time, or judging one twin would make the next an equivocation."""
        return self._verifier(fresh=True)

    def run(self, item: Carried, obj: HandoffObject | StatusObject, element: Element) -> _Done:
        ctx = context_for(item, self.p.options)
        obj = self._with_stored_chain(obj, element)
        new = self._is_new(element.digest)
        verdict = self.verifier.verify_object(obj, ctx, source=item.source)
        if verdict.reason is Reason.MALFORMED:  # e.g. a status where an offer belongs
            return _Done(verdict)
        store_element(self.session, element, now=self.now)
        judged = verdict
        if depends_on_replay(verdict):
            judged = self.fresh.verify_object(obj, ctx, source=item.source)
        observation = add_observation(
            self.session,
            digest=element.digest,
            ctx=ctx,
            source=item.source,
            now=self.now,
            item=item,
        )
        add_verdict(
            self.session,
            observation_id=observation,
            verdict=verdict,
            judgement=Judgement.of(judged),
            trust=self.p.trust.fingerprint,
            now=self.now,
        )
        self.touched.add(element.digest)
        known = self._observe_chain(judged, element, ctx, item.source)
        if element.is_offer and _passed(judged, "signature"):
            known.add(element.digest)
        self._complete(known)
        keys = affected_hops(self.session, self.touched, locks=self.locks)
        derive_hops(self.session, keys, now=self.now, timing=self.p.timing, locks=self.locks)
        return _Done(verdict, observation, int(new), self.judged_again)

    def _is_new(self, digest: bytes) -> bool:
        query = select(ElementRow.digest).where(ElementRow.digest == digest)
        return self.session.execute(query).first() is None

    def _with_stored_chain(
        self, obj: HandoffObject | StatusObject, element: Element
    ) -> HandoffObject | StatusObject:
        """An offer naming ``prev`` without a carried chain is checked against the earlier
        offers the store holds (SPEC 7); the report then says ``carried: false``."""
        offer = element.payload
        if not isinstance(obj, HandoffObject) or obj.chain or not isinstance(offer, Offer):
            return obj
        if offer.prev is None:
            return obj
        limit = self.p.options.max_chain - 1
        ancestors = stored_ancestors(
            self.session, offer.prev, form=obj.form, limit=limit, locks=self.locks
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
                add_observation(
                    self.session,
                    digest=e.digest,
                    ctx=ctx,
                    source=f"{source} chain[{e.index}]",
                    now=self.now,
                    via=element.digest,
                )
        self.touched.update(known)
        return known

    def _complete(self, known: set[bytes]) -> None:
        """Judge again what the offers in ``known`` complete: pending statuses naming them,
        and offers below them whose chain was built from stored elements."""
        for observed in pending_statuses(self.session, known):
            self._judge_status_again(observed)
        frontier, seen = known, set(known)
        for _ in range(self.p.options.max_chain):
            # Offers below one we hold took its lock when they were stored.
            self.locks.need(digest_lock(d) for d in frontier)
            below = [d for d in children(self.session, frontier) if d not in seen]
            if not below:
                break
            seen.update(below)
            for observed in offers_judged_without_chain(self.session, below):
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
            update_judgement(
                self.session,
                observed.verdict_id,
                judgement=Judgement.of(judged),
                trust=self.p.trust.fingerprint,
                now=self.now,
            )
            self.touched.add(element.digest)
        else:
            self._replace(observed, judged, judged)

    def _replace(self, observed: Observed, verdict: Verdict, judged: Verdict) -> None:
        update_verdict(
            self.session,
            observed.verdict_id,
            verdict=verdict,
            judgement=Judgement.of(judged),
            trust=self.p.trust.fingerprint,
            now=self.now,
        )
        self.judged_again[observed.observation_id] = verdict
        if verdict.digest is not None:
            self.touched.add(verdict.digest)


def _passed(verdict: Verdict, check: str) -> bool:
    return any(c.check == check and c.result is Result.PASS for c in verdict.checks)
