"""Judgement in one place: every verdict the service gives, and every verdict it gives again.

A newcomer looking for where a verdict kind is decided:

- **first judgement** of an item (accept, reject with its reason, pending, duplicate,
  equivocation: the library's ``Verifier`` over the batch's memories): ``Judge.run``;
- **the judgement beside a duplicate or an equivocation** (the verdict the element would get
  against an empty replay memory, which hops and flags are derived from, so that they do
  not depend on ingest order): ``Judge.run`` and ``_judge_status_again``, in the same
  pass as the first judgement (``Verifier.judge_object``: each check runs once);
- **a chain taken from stored offers** when an offer names ``prev`` and carries none
  (profile §7: "a party that holds the earlier offer can still check the link"):
  ``Judge._with_stored_chain``;
- **pending statuses judged again** when their offer becomes known (profile §6.8):
  ``Judge._judge_status_again``;
- **offers judged again** when an earlier offer completes a chain built from stored
  elements: ``Judge._judge_offer_again`` (a duplicate or an equivocation keeps what was
  reported; only its judgement is completed);
- **a refused item** (malformed, or a key in its header, profile §2), judged without any
  memory and kept as evidence: ``refuse``.

It works on what the store loaded for the batch (``BatchState``: one verifier over one
memory of the store, app.ingest.memory, and the batch's known digests); the transaction
around it is ``app.ingest.pipeline``'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from handoff_context import (
    MAX_ELEMENT_OCTETS,
    Context,
    Element,
    HandoffObject,
    Offer,
    Outcome,
    Result,
    StatusObject,
    Verdict,
    Verifier,
    parse_element,
    parse_object,
)
from handoff_context._frozen import quick_init
from handoff_context.errors import HandoffError, MalformedError, Reason
from sqlmodel import Session

from app.capture.carriers import Carried
from app.ingest.build import Pipeline
from app.ingest.derive import derive_hops
from app.ingest.live import host_values
from app.ingest.memory import StoreMemory, fresh_verifier, store_verifier
from app.ingest.refused import (
    octets_row,
    receipt_row,
    refused,
    refused_object,
    refused_value,
)
from app.ingest.verifying import context_for
from app.store.db import Locks, digest_lock, hop_lock
from app.store.derive import HopKey, affected_hops
from app.store.host import stored_keys
from app.store.records import (
    Judgement,
    Observed,
    add_observation,
    children,
    children_of,
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

# Read once: Python 3.11 reads ``Enum.X`` through the enum metaclass's ``__getattr__`` hook
# (~900 instructions a read), and these are read for every item.
_MALFORMED = Reason.MALFORMED
_PASS = Result.PASS


def refuse(
    pipeline: Pipeline, session: Session, item: Carried, unparsed: Unparsed, now: int, locks: Locks
) -> Done:
    """A malformed item, or one with a key inside the message: judged without any memory
    (the verdict depends on the octets alone, and is the one ``Verifier.verify_value``
    gives); the octets are kept as evidence (app.ingest.refused, app.store.rejected).
    Raises NeedLocks or SQLAlchemyError."""
    ctx = context_for(item, pipeline.options)
    if unparsed.obj is None:
        # Profile §1.4: neither a handoff nor a status object (or an element above the
        # size limit), as the verifier reports it.
        verdict = Verdict(
            source=item.source,
            element=None,
            reason=Reason.MALFORMED,
            detail=unparsed.error.detail,
        )
        # A deployment's lower size limit refuses octets the profile would read: their
        # evidence is read at the profile's own limit.
        limited = pipeline.options.max_element_bytes < MAX_ELEMENT_OCTETS
        evidence = refused(item.value) if limited else refused_value(item.value)
    else:
        verifier = Verifier(trust=pipeline.trust, policy=pipeline.options.policy)
        verdict = verifier.verify_object(unparsed.obj, ctx, source=item.source)
        evidence = refused_object(unparsed.obj, unparsed.error)
    kept = keep_refused(
        session,
        octets=octets_row(evidence, now=now),
        receipt=receipt_row(evidence, item=item, ctx=ctx, verdict=verdict, now=now),
        hop=evidence.hop_key,
        locks=locks,
    )
    if not kept:
        return Done(None)  # its observation id is stored already: a shipper's retry
    if evidence.hop_key is not None:  # its rejected-element flag (profile §8)
        derive_hops(session, [evidence.hop_key], now=now, timing=pipeline.timing, locks=locks)
    return Done(verdict)


def receipt_columns(item: Carried) -> dict[str, object]:
    """The observation columns of an item's receipt besides its digest, clock and source."""
    return {
        # ``_value_``: ``.value`` without the enum property's descriptor call.
        "carrier": item.carrier._value_,
        "role": item.role._value_,
        "task_id": item.task_id,
        "task_state": item.task_state,
        "received_exact": item.received_at,
        "observation_key": item.key,
    }


@dataclass
class Done:
    verdict: Verdict | None  # None: a redelivered observation (its id is stored already)
    observation: int | None = None
    new: int = 0
    judged_again: dict[int, Verdict] = field(default_factory=dict)


@quick_init
@dataclass(frozen=True, slots=True)
class Parsed:
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


@dataclass(frozen=True, slots=True)
class Unparsed:
    """An item whose object (``obj`` None) or element did not parse, with what parsing it
    raised: ``refuse`` judges it and keeps its evidence without parsing it again."""

    obj: HandoffObject | StatusObject | None
    error: HandoffError


def parse(value: object, pipeline: Pipeline) -> Parsed | Unparsed:
    """The object and its element, parsed once for the whole way (the element size limit
    enforced here, for every entry point); what does not parse is ``refuse``'s."""
    try:
        obj = parse_object(value, max_element=pipeline.options.max_element_bytes)
    except MalformedError as exc:
        return Unparsed(None, exc)
    try:
        octets = obj.status if isinstance(obj, StatusObject) else obj.offer
        element = parse_element(octets, obj.form)
    except HandoffError as exc:
        return Unparsed(obj, exc)
    chain: list[Element] = []
    if isinstance(obj, HandoffObject):
        for link in obj.chain:
            with contextlib.suppress(HandoffError):
                chain.append(parse_element(link, obj.form))
    digests = frozenset(e.digest for e in (element, *chain))
    return Parsed(obj, element, tuple(chain), digests, _lock_keys([element, *chain]))


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


class BatchState:
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


class Judge:
    """One item's work in a transaction: verify, persist, judge again what it completes;
    ``hops`` then says which hops to re-derive."""

    def __init__(self, batch: BatchState) -> None:
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
        time, or judging one twin would make the next an equivocation. Only an offer judged
        *again* needs one (its first judgement is ``judge_object``'s, in one pass): the
        store's replay memory holds it already, and asking that memory again must not
        record anything."""
        return fresh_verifier(self.memory, policy=self.p.options.policy, objects=self.p.objects)

    def run(self, item: Carried, parsed: Parsed) -> Done:
        if item.key is not None and item.key in self.batch.keys:
            return Done(None)  # a shipper's retry of a stored observation (app.store.host)
        element = parsed.element
        ctx = context_for(item, self.p.options)
        obj = self._with_stored_chain(parsed.obj, element)
        known_before = element.digest in self.memory.stored
        # One pass: the reported verdict, and the one without the replay memory that hops
        # and flags are derived from (the same verdict unless it depends on the memory).
        both = self.verifier.judge_object(obj, ctx, source=item.source)
        verdict, judged = both.verdict, both.without_replay
        if verdict.reason is _MALFORMED:  # e.g. a status where an offer belongs
            return Done(verdict)
        self.memory.store(element)  # a no-op for an offer that verified (stored already)
        new = not known_before and element.digest in self.memory.inserted
        observation = self._add_observation(item, element, ctx, verdict, judged)
        if item.key is not None:
            self.batch.keys.add(item.key)
        self.touched.add(element.digest)
        known = self._observe_chain(judged, element, ctx, item.source)
        if element.is_offer and _passed(judged, "signature"):
            known.add(element.digest)
        self._complete(known)
        return Done(verdict, observation, int(new), self.judged_again)

    def _add_observation(
        self, item: Carried, element: Element, ctx: Context, verdict: Verdict, judged: Verdict
    ) -> int:
        """Buffer the item's receipt (with the host task state it rode in) and verdict;
        returns the observation's id."""
        writes = self.batch.writes
        host = None
        if item.task_id is not None and item.task_state is not None:
            host = host_values(item, received_at=ctx.now, received_by=ctx.receiver, now=self.now)
        observation = add_observation(
            self.session,
            digest=element.digest,
            ctx=ctx,
            source=item.source,
            now=self.now,
            carried=receipt_columns(item),
            host=host,
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
            outcome=verdict.outcome._value_,
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
        known = {e.digest for e in judged.chain.elements if e.result is _PASS and e.digest}
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
        both = self.verifier.judge_object(status, observed.ctx, source=observed.source)
        self._replace(observed, both.verdict, both.without_replay)

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
    return any(c.check == check and c.result is _PASS for c in verdict.checks)
