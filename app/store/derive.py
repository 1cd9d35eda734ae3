"""Hop state and flags, re-derived from stored facts (profile §8) by the library's pure
rules (``handoff_context.derive_hop``, and ``canonical_order``, ``equivocation_flag`` and
``rejection_flags`` across a hop's offers and refusals), and the sweep of the hops that
applies the clock. What is here reads the facts and writes the results; the rules are the library's.

Every fact read here depends on the *set* of stored elements and observations, never on
the order they arrived in, so any permutation of the same input yields the same hops and
flags:

- An offer counts for its hop (iss, hop) when some observation of it passed checks 1-3
  (profile §6.4, judged against an empty replay memory) or it arrived in the verified chain of
  an accepted bundle.
- **The hop's offer** (canonical rule, [profile]): among the offers that count, the one
  received first by capture time (``received_at``), ties broken by the smaller digest. A
  verdict's ``equivocation.first`` says which offer *this store* saw first; the hop's offer
  does not depend on ingest order.
- Statuses count when valid and naming any offer that counts for the hop; downstream
  offers are counting offers whose ``prev`` names one of them.
- ``equivocation``: two or more offers count for one hop; one flag per hop, variant
  ``content`` when any of them differs from the hop's offer in what was signed.
- ``rejected-element``: elements whose observation failed a check (replay aside), one
  flag per hop and reason (the variant), grouped under the hop key the element names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from handoff_context import (
    CountingOffer,
    DownstreamFact,
    OfferFact,
    Rejection,
    StatusFact,
    StatusState,
    Timing,
    canonical_order,
    derive_hop,
    equivocation_flag,
    rejection_flags,
)
from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    delete,
    exists,
    func,
    or_,
    select,
)
from sqlmodel import Session

from app.store.db import Locks, digest_lock, execute, hop_lock, pair_params, pairs_in, upsert_many
from app.store.envelopes import case_due_conditions
from app.store.flags import HopFlags, hop_flags, sync_many_flags
from app.store.host import HostFact, host_facts, host_of
from app.store.models import (
    ElementRow,
    HopRow,
    LinkRow,
    ObservationRow,
    RejectedObservationRow,
    RejectedOctetsRow,
    VerdictRow,
)
from app.store.otlp import stamp_changes

HopKey = tuple[str, str]  # (iss, hop) of the offer


# --- which hops an element touches --------------------------------------------------------


_IN_DIGESTS = bindparam("b_digests", expanding=True)
_ELEMENT_HOPS = select(
    ElementRow.hop_iss, ElementRow.hop, ElementRow.type, ElementRow.digest, ElementRow.offer
).where(ElementRow.digest.in_(_IN_DIGESTS))
_PARENTS = select(LinkRow.prev).where(LinkRow.offer.in_(_IN_DIGESTS))
_OFFER_HOPS = select(ElementRow.iss, ElementRow.hop).where(
    ElementRow.type == "offer", ElementRow.digest.in_(_IN_DIGESTS)
)


def affected_hops(session: Session, digests: Iterable[bytes], *, locks: Locks) -> set[HopKey]:
    """The hops whose derived answer may change when these stored elements' judgements do:
    the element's own hop, the hop of a status's offer, and the parent hop of each offer
    (its downstream offers and their cancels feed ``cancel-not-propagated``).

    Reads each offer and parent only under its digest lock, so a concurrent transaction
    storing one of them is either seen or waited for.
    """
    keys: set[HopKey] = set()
    offers: set[bytes] = set()
    for row in execute(session, _ELEMENT_HOPS, {"b_digests": list(set(digests))}):
        keys.add((row.hop_iss, row.hop))
        offers.add(row.digest if row.type == "offer" else row.offer)
    locks.need(digest_lock(d) for d in offers)
    parents = set(execute(session, _PARENTS, {"b_digests": list(offers)}).scalars())
    locks.need(digest_lock(d) for d in parents)
    for row in execute(session, _OFFER_HOPS, {"b_digests": list(offers | parents)}):
        keys.add((row.iss, row.hop))
    return keys


# --- facts ------------------------------------------------------------------------------


_COUNTING = or_(ObservationRow.via.is_not(None), VerdictRow.remembered.is_(True))
_IN_OFFERS = bindparam("b_offers", expanding=True)


def _counts(digest_column: Any) -> Any:
    """EXISTS an observation by which the offer counts: it passed checks 1-3 (profile §6.4),
    or it was carried in a verified chain."""
    return (
        select(ObservationRow.id)
        .outerjoin(VerdictRow, VerdictRow.observation_id == ObservationRow.id)
        .where(ObservationRow.digest == digest_column, _COUNTING)
        .exists()
    )


# Built once: see app.store.db, "dialect-specific statements".
_OFFER_ROWS = (
    select(
        ElementRow.digest,
        ElementRow.iss,
        ElementRow.aud,
        ElementRow.hop,
        ElementRow.dialog,
        ElementRow.task,
        ElementRow.iat,
        ElementRow.exp,
        ElementRow.content,
        LinkRow.prev,
    )
    .outerjoin(LinkRow, LinkRow.offer == ElementRow.digest)
    .where(ElementRow.digest.in_(_IN_OFFERS))
)


def _valid_status_observations(where: Any) -> Select[Any]:
    return (
        select(
            ElementRow.digest,
            ElementRow.offer,
            ElementRow.state,
            ElementRow.iss,
            ElementRow.iat,
            ElementRow.reason,
            ElementRow.ref_count,
            func.min(ObservationRow.received_at).label("received_at"),
        )
        .join(ObservationRow, ObservationRow.digest == ElementRow.digest)
        .join(VerdictRow, VerdictRow.observation_id == ObservationRow.id)
        .where(ElementRow.type == "status", VerdictRow.valid.is_(True), where)
        .group_by(
            ElementRow.digest,
            ElementRow.offer,
            ElementRow.state,
            ElementRow.iss,
            ElementRow.iat,
            ElementRow.reason,
            ElementRow.ref_count,
        )
    )


_STATUSES = _valid_status_observations(ElementRow.offer.in_(_IN_OFFERS))


_CANCELS = _valid_status_observations(
    and_(
        ElementRow.offer.in_(bindparam("b_downstream", expanding=True)),
        ElementRow.state == StatusState.CANCELED.value,
    )
).subquery()
_FIRST_CANCELS = select(_CANCELS.c.offer, func.min(_CANCELS.c.received_at)).group_by(
    _CANCELS.c.offer
)


# --- derivation -------------------------------------------------------------------------


def derive_hops(
    session: Session, keys: Iterable[HopKey], *, now: int, timing: Timing, locks: Locks
) -> None:
    """Re-derive each hop's state and flags at clock ``now`` and store them. Raises
    NeedLocks when another transaction holds one of the hops.

    The facts of many hops are read together, a few set-based queries for a chunk of hops
    instead of about nine for each (``_Facts``); each hop is then derived from its own."""
    keys = sorted(set(keys))
    locks.need(hop_lock(hop) for _, hop in keys)
    for start in range(0, len(keys), _HOPS_PER_QUERY):
        chunk = keys[start : start + _HOPS_PER_QUERY]
        facts = _Facts.load(session, chunk)
        flags = hop_flags(session, hops=chunk)
        derived = [
            _derive_one(session, iss, hop, facts, flags[(iss, hop)], now=now, timing=timing)
            for iss, hop in chunk
        ]
        sync_many_flags(session, [f for _, f in derived], now=now)
        hops = stamp_changes(session, [h for h, _ in derived if h is not None])  # OTLP export
        upsert_many(session, HopRow, hops, ["iss", "hop"])


# Hops whose facts one query reads: bounded, so a sweep of many hops stays within the
# databases' limits on bound parameters.
_HOPS_PER_QUERY = 256
_OFFER_FIRSTS_MANY = (
    select(
        ElementRow.hop_iss,
        ElementRow.hop,
        ElementRow.digest,
        func.min(ObservationRow.received_at).label("first"),
    )
    .join(ObservationRow, ObservationRow.digest == ElementRow.digest)
    .outerjoin(VerdictRow, VerdictRow.observation_id == ObservationRow.id)
    .where(ElementRow.type == "offer", pairs_in(ElementRow.hop_iss, ElementRow.hop))
    .where(_COUNTING)
    .group_by(ElementRow.hop_iss, ElementRow.hop, ElementRow.digest)
)
_REJECTIONS_MANY = (
    select(
        ElementRow.hop_iss,
        ElementRow.hop,
        VerdictRow.fault,
        ElementRow.digest,
        func.min(ObservationRow.received_at).label("first"),
    )
    .join(ObservationRow, ObservationRow.id == VerdictRow.observation_id)
    .join(ElementRow, ElementRow.digest == VerdictRow.digest)
    .where(pairs_in(ElementRow.hop_iss, ElementRow.hop))
    .where(VerdictRow.valid.is_(False), VerdictRow.fault.is_not(None))
    .group_by(ElementRow.hop_iss, ElementRow.hop, VerdictRow.fault, ElementRow.digest)
)
_REFUSED_MANY = (
    select(
        RejectedOctetsRow.hop_iss,
        RejectedOctetsRow.hop,
        RejectedObservationRow.reason,
        RejectedOctetsRow.digest,
        func.min(RejectedObservationRow.received_at).label("first"),
    )
    .join(RejectedOctetsRow, RejectedOctetsRow.digest == RejectedObservationRow.digest)
    .where(pairs_in(RejectedOctetsRow.hop_iss, RejectedOctetsRow.hop))
    .group_by(
        RejectedOctetsRow.hop_iss,
        RejectedOctetsRow.hop,
        RejectedObservationRow.reason,
        RejectedOctetsRow.digest,
    )
)
_DOWNSTREAM_MANY = (
    select(ElementRow.digest, ElementRow.iss, ElementRow.hop, LinkRow.prev)
    .join(LinkRow, LinkRow.offer == ElementRow.digest)
    .where(LinkRow.prev.in_(_IN_OFFERS), _counts(ElementRow.digest))
)


@dataclass
class _Facts:
    """The stored facts of a set of hops, read with one query per kind of fact."""

    offers: dict[HopKey, list[CountingOffer]]  # the hop's offer first (canonical_order)
    elements: dict[bytes, Any]  # rows of _OFFER_ROWS: the offers' columns, by digest
    rejections: dict[HopKey, list[Rejection]]
    statuses: dict[bytes, list[StatusFact]]  # by the offer they name
    downstream: dict[bytes, list[DownstreamFact]]  # by their prev
    host: dict[bytes, list[HostFact]]  # by the element whose tasks they are in

    @classmethod
    def load(cls, session: Session, keys: Sequence[HopKey]) -> _Facts:
        hops = pair_params(keys)
        firsts: dict[HopKey, dict[bytes, int]] = {}
        for r in execute(session, _OFFER_FIRSTS_MANY, hops):
            firsts.setdefault((r.hop_iss, r.hop), {})[r.digest] = r.first
        every = [d for by_digest in firsts.values() for d in by_digest]
        rows = {r.digest: r for r in _rows(session, _OFFER_ROWS, "b_offers", every)}
        offers = {
            key: canonical_order(
                CountingOffer(d, rows[d].content, first) for d, first in by_digest.items()
            )
            for key, by_digest in firsts.items()
        }
        rejections: dict[HopKey, list[Rejection]] = {}
        for statement in (_REJECTIONS_MANY, _REFUSED_MANY):
            for r in execute(session, statement, hops):
                key = (r.hop_iss, r.hop)
                rejections.setdefault(key, []).append(Rejection(r[2], r.digest, r.first))
        statuses: dict[bytes, list[StatusFact]] = {}
        for r in _rows(session, _STATUSES, "b_offers", every):
            statuses.setdefault(r.offer, []).append(_status_fact(r))
        downstream = _downstream_many(session, every)
        observed = every + [s.digest for found in statuses.values() for s in found]
        host = host_facts(session, observed)
        return cls(offers, rows, rejections, statuses, downstream, host)


def _rows(session: Session, statement: Any, name: str, values: Sequence[bytes]) -> list[Any]:
    return list(execute(session, statement, {name: list(values)})) if values else []


def _status_fact(r: Any) -> StatusFact:
    return StatusFact(
        digest=r.digest,
        state=StatusState(r.state),
        iss=r.iss,
        iat=r.iat,
        received_at=r.received_at,
        reason=r.reason,
        refs=r.ref_count,
    )


def _downstream_many(
    session: Session, offers: Sequence[bytes]
) -> dict[bytes, list[DownstreamFact]]:
    rows = _rows(session, _DOWNSTREAM_MANY, "b_offers", offers)
    canceled: dict[bytes, int] = {}
    if rows:
        params = {"b_downstream": [r.digest for r in rows]}
        canceled = dict(execute(session, _FIRST_CANCELS, params).all())
    found: dict[bytes, list[DownstreamFact]] = {}
    for r in rows:
        fact = DownstreamFact(r.digest, r.iss, r.hop, canceled.get(r.digest))
        found.setdefault(r.prev, []).append(fact)
    return found


_DELETE_HOP = delete(HopRow).where(
    HopRow.iss == bindparam("b_iss"), HopRow.hop == bindparam("b_hop")
)


def _derive_one(
    session: Session,
    iss: str,
    hop: str,
    facts: _Facts,
    stored_flags: dict[str, Any],
    *,
    now: int,
    timing: Timing,
) -> tuple[dict[str, Any] | None, HopFlags]:
    """Derive one hop; returns its hop row to store (None: the hop has no offer any more,
    and its row was deleted) and its flags to sync (``sync_many_flags``)."""
    offers = facts.offers.get((iss, hop), [])
    flags = rejection_flags(facts.rejections.get((iss, hop), []))
    if not offers:
        execute(session, _DELETE_HOP, {"b_iss": iss, "b_hop": hop})
        return None, (iss, hop, flags, None, stored_flags)
    element = facts.elements[offers[0].digest]
    fact = OfferFact(
        digest=element.digest,
        iss=element.iss,
        aud=element.aud,
        hop=element.hop,
        dialog=element.dialog,
        task=element.task,
        iat=element.iat,
        exp=element.exp,
        prev=element.prev,
    )
    digests = [o.digest for o in offers]
    statuses = [s for d in digests for s in facts.statuses.get(d, [])]
    observed = [*digests, *(s.digest for s in statuses)]
    view = derive_hop(
        fact,
        statuses,
        now=now,
        timing=timing,
        downstream=[f for d in digests for f in facts.downstream.get(d, [])],
        host=host_of(facts.host, observed),
    )
    values = {
        "iss": iss,
        "hop": hop,
        "offer": fact.digest,
        "aud": fact.aud,
        "dialog": fact.dialog,
        "task": fact.task,
        "iat": fact.iat,
        "exp": fact.exp,
        "state": view.state.value,
        "a2a_state": view.a2a_state,
        "accepted_at": view.accepted_at,
        "terminal_at": view.terminal_at,
        "deadline": view.deadline,
        "derived_at": now,
    }
    flags.extend(view.flags)
    equivocation = equivocation_flag(offers)
    if equivocation is not None:
        flags.append(equivocation)
    return values, (iss, hop, flags, fact.digest, stored_flags)


def sweep_hops(session: Session, *, now: int, timing: Timing) -> int:
    """Apply the clock to the hops: re-derive every hop whose answer changes by ``now``
    (its deadline has passed), or that was derived for a later clock than ``now``. Returns
    how many (``app.ingest.sweep`` sweeps the envelope cases too).

    Run it in its own transaction (``app.store.db.run``); it waits for the hops' locks."""
    due = _due(session, now)
    if not due:
        return 0
    locks = Locks(session, [hop_lock(hop) for _, hop in due])
    # Again, now that no writer of these hops is at work (hops due meanwhile wait for the
    # next sweep).
    due = [key for key in _due(session, now) if hop_lock(key[1]) in locks.held or not locks.active]
    derive_hops(session, due, now=now, timing=timing, locks=locks)
    return len(due)


def anything_due(session: Session, now: int) -> bool:
    """Whether ``sweep`` at ``now`` would re-derive any hop or case: one query of index
    probes, fit for a read-only transaction, so a query takes the write lock (and waits
    behind the ingests for it on SQLite) only when the clock changes something."""
    conditions = [*_hop_due_conditions(now), *case_due_conditions(now)]
    return bool(session.execute(select(or_(*(exists().where(c) for c in conditions)))).scalar())


def _hop_due_conditions(now: int) -> list[ColumnElement[bool]]:
    return [HopRow.deadline <= now, HopRow.derived_at > now]


def _due(session: Session, now: int) -> list[HopKey]:
    rows = session.execute(select(HopRow.iss, HopRow.hop).where(or_(*_hop_due_conditions(now))))
    return [(r.iss, r.hop) for r in rows]
