"""Hop state and flags: the stored facts they are derived from (profile §8), read for a
chunk of hops with a few set-based queries, and the derived rows written back. The rules
(``handoff_context.derive_hop``, ``canonical_order``, ``equivocation_flag``,
``rejection_flags``) are applied by ``app.ingest.derive``; nothing here decides anything.

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
)
from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    delete,
    exists,
    func,
    literal_column,
    or_,
    select,
    union_all,
)
from sqlmodel import Session

from app.store.db import (
    Locks,
    digest_lock,
    execute,
    pair_params,
    pairs_in,
    select_rows,
    upsert_many,
)
from app.store.envelopes import case_due_conditions
from app.store.flags import HopFlags, sync_many_flags
from app.store.host import HostFact, host_facts
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
    # ``select_rows``: these run once per batch with an IN list of every element the batch
    # touched, and SQLAlchemy's per-call expansion of that list cost more than the query.
    rows = select_rows(session, _ELEMENT_HOPS, {"b_digests": sorted(set(digests))})
    for hop_iss, hop, kind, digest, offer in rows:
        keys.add((hop_iss, hop))
        offers.add(digest if kind == "offer" else offer)
    locks.need(digest_lock(d) for d in offers)
    listed = sorted(offers)
    parents = {prev for (prev,) in select_rows(session, _PARENTS, {"b_digests": listed})}
    locks.need(digest_lock(d) for d in parents)
    both = sorted(offers | parents)
    keys.update((iss, hop) for iss, hop in select_rows(session, _OFFER_HOPS, {"b_digests": both}))
    return keys


# --- facts ------------------------------------------------------------------------------


_COUNTING = or_(ObservationRow.via.is_not(None), VerdictRow.remembered.is_(True))
_IN_OFFERS = bindparam("b_offers", expanding=True)


def _counts(digest_column: Any) -> Any:
    """EXISTS an observation by which the offer counts: it passed checks 1-3 (profile §6.4),
    or it was carried in a verified chain.

    ``OFFSET 0`` keeps PostgreSQL from turning the EXISTS into a join: it then probes the
    observations of each row by index, whatever the statistics say. Flattened, it read
    every observation and verdict into a hash on each call while the tables had no
    statistics yet (a new store's first minute, until autovacuum's first ANALYZE): 13 to
    22 ms a call at 10,000 elements, growing with the store, against about 1 ms. SQLite
    runs an EXISTS per row either way."""
    return (
        select(ObservationRow.id)
        .outerjoin(VerdictRow, VerdictRow.observation_id == ObservationRow.id)
        .where(ObservationRow.digest == digest_column, _COUNTING)
        .offset(literal_column("0"))
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


# --- the facts of many hops ------------------------------------------------------------


# Hops whose facts one query reads: bounded, so a sweep of many hops stays within the
# databases' limits on bound parameters.
HOPS_PER_QUERY = 256
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
# Both kinds of rejected element in one read (one statement fewer per chunk of hops):
# ``rejection_flags`` groups them by reason and sorts their evidence, so the order in which
# the two halves come back does not matter.
_REJECTED_MANY = union_all(_REJECTIONS_MANY, _REFUSED_MANY)
_DOWNSTREAM_MANY = (
    select(ElementRow.digest, ElementRow.iss, ElementRow.hop, LinkRow.prev)
    .join(LinkRow, LinkRow.offer == ElementRow.digest)
    .where(LinkRow.prev.in_(_IN_OFFERS), _counts(ElementRow.digest))
)


@dataclass
class HopFacts:
    """The stored facts of a set of hops (at most ``HOPS_PER_QUERY``), read with one query
    per kind of fact, each through the driver (``select_rows``: plain tuples, no ``Row``
    objects or per-call compiling)."""

    offers: dict[HopKey, list[CountingOffer]]  # the offers that count, in no order
    elements: dict[bytes, OfferFact]  # the offers' stored columns, by digest
    rejections: dict[HopKey, list[Rejection]]
    statuses: dict[bytes, list[StatusFact]]  # by the offer they name
    downstream: dict[bytes, list[DownstreamFact]]  # by their prev
    host: dict[bytes, list[HostFact]]  # by the element whose tasks they are in

    @classmethod
    def load(cls, session: Session, keys: Sequence[HopKey]) -> HopFacts:
        hops = pair_params(keys)
        firsts: dict[HopKey, dict[bytes, int]] = {}
        for hop_iss, hop, digest, first in select_rows(session, _OFFER_FIRSTS_MANY, hops):
            firsts.setdefault((hop_iss, hop), {})[digest] = first
        every = [d for by_digest in firsts.values() for d in by_digest]
        elements: dict[bytes, OfferFact] = {}
        contents: dict[bytes, bytes] = {}
        for digest, iss, aud, hop, dialog, task, iat, exp, content, prev in _rows(
            session, _OFFER_ROWS, "b_offers", every
        ):
            elements[digest] = OfferFact(digest, iss, aud, hop, dialog, task, iat, exp, prev)
            contents[digest] = content
        offers = {
            key: [CountingOffer(d, contents[d], first) for d, first in by_digest.items()]
            for key, by_digest in firsts.items()
        }
        rejections: dict[HopKey, list[Rejection]] = {}
        for hop_iss, hop, reason, digest, first in select_rows(session, _REJECTED_MANY, hops):
            rejections.setdefault((hop_iss, hop), []).append(Rejection(reason, digest, first))
        statuses: dict[bytes, list[StatusFact]] = {}
        for r in _rows(session, _STATUSES, "b_offers", every):
            statuses.setdefault(r[1], []).append(_status_fact(r))
        downstream = _downstream_many(session, every)
        observed = every + [s.digest for found in statuses.values() for s in found]
        host = host_facts(session, observed)
        return cls(offers, elements, rejections, statuses, downstream, host)


def _rows(
    session: Session, statement: Any, name: str, values: Sequence[bytes]
) -> list[tuple[Any, ...]]:
    return select_rows(session, statement, {name: list(values)}) if values else []


def _status_fact(r: tuple[Any, ...]) -> StatusFact:
    """A row of ``_valid_status_observations``: digest, offer, state, iss, iat, reason,
    ref_count, received_at."""
    digest, _offer, state, iss, iat, reason, refs, received_at = r
    return StatusFact(
        digest=digest,
        state=StatusState(state),
        iss=iss,
        iat=iat,
        received_at=received_at,
        reason=reason,
        refs=refs,
    )


def _downstream_many(
    session: Session, offers: Sequence[bytes]
) -> dict[bytes, list[DownstreamFact]]:
    rows = _rows(session, _DOWNSTREAM_MANY, "b_offers", offers)
    canceled: dict[bytes, int] = {}
    if rows:
        params = {"b_downstream": [r[0] for r in rows]}
        canceled = dict(select_rows(session, _FIRST_CANCELS, params))  # type: ignore[arg-type]
    found: dict[bytes, list[DownstreamFact]] = {}
    for digest, iss, hop, prev in rows:
        fact = DownstreamFact(digest, iss, hop, canceled.get(digest))
        found.setdefault(prev, []).append(fact)
    return found


_DELETE_HOP = delete(HopRow).where(
    HopRow.iss == bindparam("b_iss"), HopRow.hop == bindparam("b_hop")
)


def write_hops(
    session: Session,
    *,
    hops: list[dict[str, Any]],
    gone: Sequence[HopKey],
    flags: Sequence[HopFlags],
    now: int,
) -> None:
    """Write what was derived for a chunk of hops: the ``hops`` rows (upserted, stamped for
    the OTLP export), the rows of the hops ``gone`` (no offer counts any more) deleted,
    and each hop's ``flags`` synced with the stored ones (``sync_many_flags``)."""
    for iss, hop in gone:
        execute(session, _DELETE_HOP, {"b_iss": iss, "b_hop": hop})
    sync_many_flags(session, flags, now=now)
    upsert_many(session, HopRow, stamp_changes(session, hops), ["iss", "hop"])


def due_hops(session: Session, now: int) -> list[HopKey]:
    """The hops whose answer changes by ``now`` (their deadline has passed), or that were
    derived for a later clock than ``now`` (``app.ingest.derive.sweep_hops``)."""
    rows = session.execute(select(HopRow.iss, HopRow.hop).where(or_(*_hop_due_conditions(now))))
    return [(r.iss, r.hop) for r in rows]


def anything_due(session: Session, now: int) -> bool:
    """Whether ``sweep`` at ``now`` would re-derive any hop or case: one query of index
    probes, fit for a read-only transaction, so a query takes the write lock (and waits
    behind the ingests for it on SQLite) only when the clock changes something."""
    conditions = [*_hop_due_conditions(now), *case_due_conditions(now)]
    return bool(session.execute(select(or_(*(exists().where(c) for c in conditions)))).scalar())


def _hop_due_conditions(now: int) -> list[ColumnElement[bool]]:
    return [HopRow.deadline <= now, HopRow.derived_at > now]
