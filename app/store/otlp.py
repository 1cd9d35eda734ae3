"""What the OTLP export reads (``app.otlp``, docs/otlp.md): the hops that changed, by the
change sequence derivation writes, and for a page of hops everything their spans say (the
offer's ``prev``, the verified statuses, the flags, the carrier the offer came in, the
offer's judgement), with one query per table for the whole page. Also the reverse look-ups
of a trace id (a dialog) and a span id (an offer digest) for search.

The change sequence (``hop.change``, alembic 0018_otel23b). Every derivation of a hop
stamps it with a mark (``stamp_changes``, called where derivation writes the hop, in the
same transaction), and the exporter walks the marks from where it stopped up to a
*horizon* below which every mark is committed (``change_horizon``), so it reads each
change once, none twice and none too early. A mark committed after a higher one must not
be passed over; what makes each dialect safe:

- PostgreSQL: the mark is the writing transaction's id (``pg_current_xact_id()``, 64 bits,
  never wraps, assigned in increasing order), and the horizon is the ``xmin`` of the
  exporter's snapshot: every transaction with a lower id has ended (committed or rolled
  back). A transaction still running has an id at or above the horizon, and one that has
  not yet written gets a higher id than any assigned so far, so every mark the walk has not
  reached yet is at or above the horizon. Several serve processes on one database share
  this order with no lock and no counter row that would serialise their ingests. A long
  transaction holds the horizon back: the export waits for it and loses nothing.
- SQLite: one writer at a time, and a write transaction starts with ``BEGIN IMMEDIATE``,
  so ``max(change) + 1`` read inside it cannot race; marks are committed in the order they
  are given, and the horizon is one above the largest committed mark.

Nothing here builds spans or knows OTLP; ``app.otlp.spans`` does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, func, select, text, tuple_
from sqlmodel import Session

from app.store.db import execute
from app.store.models import ElementRow, FlagRow, HopRow, LinkRow, ObservationRow, VerdictRow

# A hop's position in the export order: (change, iss, hop).
Position = tuple[int, str, str]


@dataclass(frozen=True, slots=True)
class StatusFact:
    digest: bytes
    state: str
    reason: str | None
    iat: int
    iss: str


@dataclass(frozen=True, slots=True)
class FlagFact:
    id: int
    kind: str
    variant: str | None
    severity: str
    detail: str
    opened_at: int


@dataclass(frozen=True, slots=True)
class HopTrace:
    """One hop and what its span says about it."""

    hop: Any  # a HopRow, or a row with its columns (``changed_hops``)
    prev: bytes | None = None
    prev_dialog: str | None = None  # the dialog of the offer ``prev`` names, when stored
    carrier: str | None = None  # of the offer's first observation
    valid: bool = False  # some observation of the offer passed every check (replay aside)
    fault: str | None = None  # the reason when none did
    chain_length: int | None = None  # s0..sn when a chain was carried (profile §7)
    statuses: list[StatusFact] = field(default_factory=list)
    flags: list[FlagFact] = field(default_factory=list)


# The hop table's columns, read as plain rows (no ORM identity map: the exporter re-reads
# the same hops round after round).
_HOP_COLUMNS = tuple(HopRow.__table__.columns)  # type: ignore[attr-defined]


# --- the change sequence -----------------------------------------------------------------

_XACT_ID = text("SELECT pg_current_xact_id()::text::bigint")
_XMIN = text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
_NEXT = select(func.coalesce(func.max(HopRow.change), 0) + 1)


def _postgresql(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def stamp_changes(session: Session, hops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``hops`` (the values of hop rows about to be written) with this transaction's mark
    in the change sequence. Call it in the transaction that writes them."""
    if not hops:
        return hops
    if _postgresql(session):
        mark = int(session.connection().execute(_XACT_ID).scalar_one())
    else:
        mark = int(session.connection().execute(_NEXT).scalar_one())
    return [{**h, "change": mark} for h in hops]


def change_horizon(session: Session) -> int:
    """Every change mark below this is committed (or rolled back): the walk may read up to
    it and never has to come back."""
    if _postgresql(session):
        return int(session.connection().execute(_XMIN).scalar_one())
    return int(session.connection().execute(_NEXT).scalar_one())


def changed_hops(
    session: Session, *, start: int, end: int, after: Position | None = None, limit: int = 500
) -> list[Any]:
    """Hops whose change mark is in [``start``, ``end``), in (change, iss, hop) order, from
    just after ``after``: one page of the exporter's keyset walk (``change`` is indexed).
    Rows with the columns of ``HopRow`` as attributes."""
    query = select(*_HOP_COLUMNS).where(HopRow.change >= start, HopRow.change < end)  # type: ignore[operator]
    if after is not None:
        query = query.where(
            tuple_(HopRow.change, HopRow.iss, HopRow.hop) > tuple_(*after)  # type: ignore[arg-type]
        )
    query = query.order_by(HopRow.change, HopRow.iss, HopRow.hop).limit(limit)
    return list(execute(session, query))


def count_changed(session: Session, *, start: int, after: Position | None = None) -> int:
    """How many hops changed at or after ``start`` (and past ``after``): the backlog."""
    query = select(func.count()).select_from(HopRow).where(HopRow.change >= start)  # type: ignore[operator]
    if after is not None:
        query = query.where(
            tuple_(HopRow.change, HopRow.iss, HopRow.hop) > tuple_(*after)  # type: ignore[arg-type]
        )
    return int(session.execute(query).scalar_one())


HopFlagFacts = dict[tuple[str, str], tuple[tuple[int, int], list["FlagFact"]]]

_PAGE_FLAGS = (
    select(
        FlagRow.iss,
        FlagRow.hop,
        FlagRow.id,
        FlagRow.kind,
        FlagRow.variant,
        FlagRow.severity,
        FlagRow.detail,
        FlagRow.opened_at,
        FlagRow.updated_at,
        FlagRow.case_id,
    )
    # Each column's own list finds the rows by the (iss, hop) index; the exact pairs are
    # picked below (a row-value IN list beside them doubled the cost of rendering the query).
    .where(
        FlagRow.iss.in_(bindparam("i", expanding=True)),  # type: ignore[attr-defined]
        FlagRow.hop.in_(bindparam("h", expanding=True)),  # type: ignore[attr-defined]
    )
    .order_by(FlagRow.opened_at, FlagRow.id)
)


def page_flags(session: Session, hops: Sequence[Any]) -> HopFlagFacts:
    """For each hop with flags: a mark (how many, and the last time one changed) that lets
    the exporter tell a hop it already sent without rebuilding it, and the flags its span
    shows (those of no envelope case). One indexed query for the page."""
    if not hops:
        return {}
    keys = {(h.iss, h.hop) for h in hops}
    params = {"i": sorted({i for i, _ in keys}), "h": sorted({h for _, h in keys})}
    out: HopFlagFacts = {}
    for f in execute(session, _PAGE_FLAGS, params):
        if (f.iss, f.hop) not in keys:
            continue
        (count, changed), facts = out.get((f.iss, f.hop), ((0, 0), []))
        if f.case_id is None:
            facts.append(
                FlagFact(int(f.id or 0), f.kind, f.variant, f.severity, f.detail, f.opened_at)
            )
        out[(f.iss, f.hop)] = ((count + 1, max(changed, int(f.updated_at or 0))), facts)
    return out


def hops_since(session: Session, *, since: int, limit: int = 500) -> Iterator[list[HopRow]]:
    """Every hop whose offer was issued at ``since`` or later (``iat``), page by page in
    (iat, iss, hop) order: the CLI's bulk export."""
    after: tuple[int, str, str] | None = None
    while True:
        query = select(HopRow).where(HopRow.iat >= since)
        if after is not None:
            query = query.where(tuple_(HopRow.iat, HopRow.iss, HopRow.hop) > tuple_(*after))  # type: ignore[arg-type]
        rows = list(
            session.execute(
                query.order_by(HopRow.iat, HopRow.iss, HopRow.hop).limit(limit)
            ).scalars()
        )
        if not rows:
            return
        yield rows
        last = rows[-1]
        after = (last.iat, last.iss, last.hop)


def count_hops_since(session: Session, *, since: int) -> int:
    return int(session.execute(select(func.count()).where(HopRow.iat >= since)).scalar_one())


def hop_traces(
    session: Session, hops: Sequence[Any], flags: HopFlagFacts | None = None
) -> list[HopTrace]:
    """What the spans of ``hops`` say, in their order: one query per table for all (the
    flags from ``flags`` when the caller has read them with ``page_flags``)."""
    if not hops:
        return []
    offers = [h.offer for h in hops]
    prevs = _prevs(session, offers)
    prev_dialogs = _dialogs(session, [p for p in prevs.values()])
    carriers = _carriers(session, offers)
    judged = _judgements(session, offers, [o for o in offers if o in prevs])
    statuses = _statuses(session, offers)
    if flags is None:
        flags = page_flags(session, hops)
    traces = []
    for h in hops:
        prev = prevs.get(h.offer)
        valid, fault, length = judged.get(h.offer, (False, None, None))
        traces.append(
            HopTrace(
                hop=h,
                prev=prev,
                prev_dialog=None if prev is None else prev_dialogs.get(prev),
                carrier=carriers.get(h.offer),
                valid=valid,
                fault=fault,
                chain_length=length,
                statuses=statuses.get(h.offer, []),
                flags=flags[(h.iss, h.hop)][1] if (h.iss, h.hop) in flags else [],
            )
        )
    return traces


# The page's reads, built once (a statement built per call spent more CPU on coercing its
# ``IN`` lists than the database spent answering it); ``d`` is the page's digests.
_D = bindparam("d", expanding=True)
_PREVS = select(LinkRow.offer, LinkRow.prev).where(LinkRow.offer.in_(_D))  # type: ignore[attr-defined]
_DIALOGS = select(ElementRow.digest, ElementRow.dialog).where(ElementRow.digest.in_(_D))  # type: ignore[attr-defined]
_FIRST = (
    select(ObservationRow.digest, func.min(ObservationRow.id).label("first"))
    .where(ObservationRow.digest.in_(_D), ObservationRow.via.is_(None))  # type: ignore[attr-defined,union-attr]
    .group_by(ObservationRow.digest)
    .subquery()
)
_CARRIERS = select(ObservationRow.digest, ObservationRow.carrier).join(
    _FIRST, ObservationRow.id == _FIRST.c.first
)
# Each receipt's judgement of the page's offers, with what the chain it carried says (read
# in the database, not decoded whole for two members).
_JUDGED = (
    select(
        VerdictRow.digest,
        VerdictRow.valid,
        VerdictRow.fault,
        VerdictRow.chain["carried"].as_boolean().label("carried"),  # type: ignore[index]
        VerdictRow.chain["length"].as_integer().label("length"),  # type: ignore[index]
    )
    .where(VerdictRow.digest.in_(_D))  # type: ignore[attr-defined]
    .order_by(VerdictRow.id)
)
# The verified statuses of the page's offers: a status counts once some receipt of it
# passed every check (an index probe of the verdicts per status; a join against every
# valid verdict scanned them all).
_VERIFIED = (
    select(VerdictRow.digest)
    .where(VerdictRow.digest == ElementRow.digest, VerdictRow.valid.is_(True))  # type: ignore[arg-type]
    .exists()
)
_STATUSES = (
    select(
        ElementRow.offer,
        ElementRow.digest,
        ElementRow.state,
        ElementRow.reason,
        ElementRow.iat,
        ElementRow.iss,
    )
    .where(ElementRow.offer.in_(_D), ElementRow.type == "status", _VERIFIED)  # type: ignore[union-attr]
    .order_by(ElementRow.iat, ElementRow.digest)
)


def _prevs(session: Session, offers: list[bytes]) -> dict[bytes, bytes]:
    return {r.offer: r.prev for r in execute(session, _PREVS, {"d": offers})}


def _dialogs(session: Session, digests: list[bytes]) -> dict[bytes, str | None]:
    if not digests:
        return {}
    return {r.digest: r.dialog for r in execute(session, _DIALOGS, {"d": digests})}


def _carriers(session: Session, offers: list[bytes]) -> dict[bytes, str | None]:
    return {r.digest: r.carrier for r in execute(session, _CARRIERS, {"d": offers})}


def _judgements(
    session: Session, offers: list[bytes], chained: list[bytes]
) -> dict[bytes, tuple[bool, str | None, int | None]]:
    """Whether some receipt of each offer passed every check (else the first fault), and
    for the offers in ``chained`` (those with a ``prev``: only they can carry a chain) the
    length of the first carried chain."""
    judged: dict[bytes, tuple[bool, str | None]] = {}
    lengths: dict[bytes, int] = {}
    with_chain = set(chained)
    for r in execute(session, _JUDGED, {"d": offers}):
        valid, fault = judged.get(r.digest, (False, None))
        if r.valid:
            valid, fault = True, None
        elif not valid and fault is None:
            fault = r.fault
        judged[r.digest] = (valid, fault)
        first = r.digest in with_chain and r.digest not in lengths
        if first and r.carried and isinstance(r.length, int):
            lengths[r.digest] = r.length
    return {d: (*judged[d], lengths.get(d)) for d in judged}


def _statuses(session: Session, offers: list[bytes]) -> dict[bytes, list[StatusFact]]:
    """The verified statuses of each offer (profile §6: only those change a hop), oldest
    first."""
    out: dict[bytes, list[StatusFact]] = defaultdict(list)
    for r in execute(session, _STATUSES, {"d": offers}):
        out[r.offer].append(StatusFact(r.digest, r.state or "", r.reason, r.iat, r.iss))
    return out


# --- the reverse look-ups of search ------------------------------------------------------


def dialog_for_trace(
    session: Session, trace_id: bytes, derive: Callable[[str], bytes]
) -> str | None:
    """The dialog whose trace id (``derive(dialog)``) is ``trace_id``, if any hop has it.

    A trace id is a hash of its dialog, so the dialogs are walked (distinct values of the
    indexed column, one index probe each) and hashed; a store of 100,000 dialogs takes a
    fraction of a second, and only an exact 32-digit trace id asks for it."""
    walk = select(func.min(HopRow.dialog).label("value")).cte("walk", recursive=True)
    following = select(func.min(HopRow.dialog)).where(HopRow.dialog > walk.c.value)
    walk = walk.union_all(select(following.scalar_subquery()).where(walk.c.value.is_not(None)))
    for (dialog,) in session.execute(select(walk.c.value)):
        if dialog is not None and derive(dialog) == trace_id:
            return str(dialog)
    return None


def hops_for_span(session: Session, span_id: bytes, *, limit: int = 20) -> list[HopRow]:
    """Hops whose offer digest starts with the 8 octets of ``span_id`` (a range probe of the
    offer index)."""
    value = int.from_bytes(span_id, "big") + 1
    query = select(HopRow).where(HopRow.offer >= span_id)
    if value < 1 << 64:  # else every digest from ``span_id`` on starts with it
        query = query.where(HopRow.offer < value.to_bytes(8, "big"))
    return list(session.execute(query.order_by(HopRow.offer).limit(limit)).scalars())


__all__ = [
    "FlagFact",
    "HopTrace",
    "Position",
    "StatusFact",
    "change_horizon",
    "changed_hops",
    "count_changed",
    "count_hops_since",
    "dialog_for_trace",
    "hop_traces",
    "hops_for_span",
    "hops_since",
    "page_flags",
    "stamp_changes",
]
