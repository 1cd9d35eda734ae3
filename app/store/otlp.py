"""What the OTLP export reads (``app.otlp``, docs/otlp.md): the hops that changed, by the
change sequence derivation writes, and for a page of hops everything their spans say (the
offer's ``prev``, the verified statuses, the flags, the carrier the offer came in, the
offer's judgement), with three statements for the whole page. Also the reverse look-ups
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

import functools
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Integer, Select, bindparam, case, func, select, text, tuple_
from sqlmodel import Session

from app.store.db import execute, select_rows
from app.store.models import ElementRow, FlagRow, HopRow, LinkRow, ObservationRow, VerdictRow

# A hop's position in the export order: (change, iss, hop).
Position = tuple[int, str, str]


# Named tuples, not dataclasses: a page makes one per hop and per status straight from the
# database's row, and their fields are read by the span builder (an attribute of
# SQLAlchemy's ``Row`` cost 0.35 us a read, ~40 reads a hop).


class StatusFact(NamedTuple):
    digest: bytes
    state: str
    reason: str | None
    iat: int
    iss: str


class FlagFact(NamedTuple):
    id: int
    kind: str
    variant: str | None
    severity: str
    detail: str
    opened_at: int


class HopTrace(NamedTuple):
    """One hop (the columns of its row the export reads) and what its span says about it."""

    iss: str
    hop: str
    offer: bytes
    aud: str
    dialog: str
    task: str | None
    iat: int
    exp: int
    state: str
    accepted_at: int | None
    terminal_at: int | None
    change: int | None
    prev: bytes | None  # the offer's
    prev_dialog: str | None  # the dialog of the offer ``prev`` names, when stored
    carrier: str | None  # of the offer's first observation
    valid: bool  # some observation of the offer passed every check (replay aside)
    fault: str | None  # the reason when none did
    chain_length: int | None  # s0..sn when a chain was carried (profile §7)
    statuses: list[StatusFact]  # the verified ones, oldest first
    flags: list[FlagFact]  # those of no envelope case
    # How many flags the hop has (envelope cases' included) and when one last changed:
    # lets the exporter tell a hop it already sent without building its span again.
    flag_mark: tuple[int, int] | None


# The fields a page's statement reads, in order: the hop's columns, then what is read
# beside them (``_span_columns``).
_ROW_FIELDS = HopTrace._fields[: HopTrace._fields.index("prev")]
_READ_FIELDS = HopTrace._fields[: HopTrace._fields.index("statuses")]
_ISS, _HOP, _OFFER = (_READ_FIELDS.index(name) for name in ("iss", "hop", "offer"))


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
        # Through the driver (``select_rows``): once a batch, HTTP ingest's every request.
        ((mark,),) = select_rows(session, _NEXT)
    return [{**h, "change": int(mark)} for h in hops]


def change_horizon(session: Session) -> int:
    """Every change mark below this is committed (or rolled back): the walk may read up to
    it and never has to come back."""
    if _postgresql(session):
        return int(session.connection().execute(_XMIN).scalar_one())
    return int(session.connection().execute(_NEXT).scalar_one())


# The backlog: hops changed at or after ``start`` and past the position (``a0``, ``a1``,
# ``a2``) in the walk's order (a walk not under way passes one below every hop's).
_COUNT_CHANGED = (
    select(func.count())
    .select_from(HopRow)
    .where(
        HopRow.change >= bindparam("start"),  # type: ignore[operator]
        tuple_(HopRow.change, HopRow.iss, HopRow.hop)  # type: ignore[arg-type]
        > tuple_(bindparam("a0"), bindparam("a1"), bindparam("a2")),
    )
)


def count_changed(session: Session, *, start: int, after: Position | None = None) -> int:
    """How many hops changed at or after ``start`` (and past ``after``): the backlog."""
    a0, a1, a2 = (start - 1, "", "") if after is None else after
    params = {"start": start, "a0": a0, "a1": a1, "a2": a2}
    return int(execute(session, _COUNT_CHANGED, params).scalar_one())


# --- a page of hops and what their spans say ---------------------------------------------
#
# A page is read with three statements whatever its size: the hops with, per hop, what
# its span says in one value each (its ``prev`` and that offer's dialog, the carrier of
# its first observation, its judgement, the length of a carried chain: correlated probes
# of indexed columns, answered inside the database), then the page's verified statuses
# and its flags, each selecting the page again by the same condition. The page's keys are
# never sent back as parameters: a list of 512 digests bound per statement cost more CPU
# in Python than the database spent answering, and rows decoded per table more again.


def _span_columns() -> Select[Any]:
    prev_element = ElementRow.__table__.alias("prev_element")  # type: ignore[attr-defined]
    offer = HopRow.offer
    carrier = (
        select(ObservationRow.carrier)
        .where(ObservationRow.digest == offer, ObservationRow.via.is_(None))  # type: ignore[union-attr]
        .order_by(ObservationRow.id)
        .limit(1)
        .scalar_subquery()
    )
    # Some receipt of the offer passed every check; else the first receipt's fault that
    # has one.
    passed = VerdictRow.valid.is_(True)  # type: ignore[attr-defined]
    valid = select(VerdictRow.id).where(VerdictRow.digest == offer, passed).exists()
    fault = (
        select(VerdictRow.fault)
        .where(VerdictRow.digest == offer, VerdictRow.fault.is_not(None))  # type: ignore[union-attr]
        .order_by(VerdictRow.id)
        .limit(1)
        .scalar_subquery()
    )
    # The length of the first chain a receipt carried (read in the database, not decoded
    # whole for two members); only an offer with a ``prev`` can carry one.
    carried = VerdictRow.chain["carried"].as_boolean()  # type: ignore[index]
    length = VerdictRow.chain["length"].as_integer()  # type: ignore[index]
    chain_length = (
        select(length)
        .where(VerdictRow.digest == offer, carried, length.is_not(None))
        .order_by(VerdictRow.id)
        .limit(1)
        .scalar_subquery()
    )
    hop = HopRow.__table__.c  # type: ignore[attr-defined]
    read = {
        **{name: hop[name] for name in _ROW_FIELDS},
        "prev": LinkRow.prev,
        "prev_dialog": prev_element.c.dialog,
        "carrier": carrier,
        "valid": valid,
        "fault": case((valid, None), else_=fault),
        "chain_length": case((LinkRow.prev.is_not(None), chain_length)),  # type: ignore[union-attr]
    }
    return (
        select(*(read[name].label(name) for name in _READ_FIELDS))
        .select_from(HopRow)
        .outerjoin(LinkRow, LinkRow.offer == HopRow.offer)  # type: ignore[arg-type]
        .outerjoin(prev_element, prev_element.c.digest == LinkRow.prev)
    )


# A verified status counts once some receipt of it passed every check (an index probe of
# the verdicts per status; a join against every valid verdict scanned them all).
_VERIFIED = (
    select(VerdictRow.digest)
    .where(VerdictRow.digest == ElementRow.digest, VerdictRow.valid.is_(True))  # type: ignore[arg-type,attr-defined]
    .exists()
)


@dataclass(frozen=True)
class _Page:
    """The three statements that read one page of hops (see above)."""

    hops: Any
    statuses: Any
    flags: Any


@functools.cache
def _page(order: str) -> _Page:
    """The page's statements for the exporter's walk (``order`` "change": marks in
    [``start``, ``end``)) or the bulk export (``order`` "iat": offers issued at ``since``
    or later), past the position (``a0``, ``a1``, ``a2``) in that order. Built once each;
    a first page passes a position below every hop's, so one statement serves every page
    (and is compiled once)."""
    if order == "change":
        first = HopRow.change
        where = [first >= bindparam("start"), first < bindparam("end")]  # type: ignore[operator]
    else:
        first = HopRow.iat
        where = [first >= bindparam("since")]
    key = (first, HopRow.iss, HopRow.hop)
    where.append(tuple_(*key) > tuple_(bindparam("a0"), bindparam("a1"), bindparam("a2")))  # type: ignore[arg-type]
    limit = bindparam("limit", type_=Integer)

    def page(*columns: Any) -> Select[Any]:
        return select(*columns).where(*where).order_by(*key).limit(limit)

    hops = _span_columns().where(*where).order_by(*key).limit(limit)
    statuses = (
        select(
            ElementRow.offer,
            ElementRow.digest,
            ElementRow.state,
            ElementRow.reason,
            ElementRow.iat,
            ElementRow.iss,
        )
        .where(
            ElementRow.offer.in_(page(HopRow.offer)),  # type: ignore[union-attr]
            ElementRow.type == "status",
            _VERIFIED,
        )
        .order_by(ElementRow.iat, ElementRow.digest)
    )
    flags = (
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
        .where(tuple_(FlagRow.iss, FlagRow.hop).in_(page(HopRow.iss, HopRow.hop)))
        .order_by(FlagRow.opened_at, FlagRow.id)
    )
    return _Page(hops, statuses, flags)


def _traces(session: Session, page: _Page, params: dict[str, Any]) -> list[HopTrace]:
    rows = execute(session, page.hops, params).all()
    if not rows:
        return []
    statuses: dict[bytes, list[StatusFact]] = defaultdict(list)
    for offer, digest, state, reason, iat, iss in execute(session, page.statuses, params):
        statuses[offer].append(StatusFact(digest, state or "", reason, iat, iss))
    flags: dict[tuple[str, str], list[FlagFact]] = defaultdict(list)
    marks: dict[tuple[str, str], tuple[int, int]] = {}
    for f in execute(session, page.flags, params):
        key = (f.iss, f.hop)
        count, changed = marks.get(key, (0, 0))
        marks[key] = (count + 1, max(changed, int(f.updated_at or 0)))
        if f.case_id is None:
            flags[key].append(
                FlagFact(int(f.id or 0), f.kind, f.variant, f.severity, f.detail, f.opened_at)
            )
    none: list[Any] = []  # shared by every hop without statuses or flags (never changed)
    return [
        HopTrace(
            *r,
            statuses.get(r[_OFFER], none),
            flags.get((r[_ISS], r[_HOP]), none),
            marks.get((r[_ISS], r[_HOP])),
        )
        for r in rows
    ]


def changed_traces(
    session: Session, *, start: int, end: int, after: Position | None = None, limit: int = 500
) -> list[HopTrace]:
    """The hops whose change mark is in [``start``, ``end``), in (change, iss, hop) order,
    from just after ``after``, with what their spans say: one page of the exporter's
    keyset walk (``change`` is indexed)."""
    a0, a1, a2 = (start - 1, "", "") if after is None else after
    params = {"start": start, "end": end, "a0": a0, "a1": a1, "a2": a2, "limit": limit}
    return _traces(session, _page("change"), params)


def traces_since(session: Session, *, since: int, limit: int = 500) -> Iterator[list[HopTrace]]:
    """Every hop whose offer was issued at ``since`` or later (``iat``), with what its span
    says, page by page in (iat, iss, hop) order: the CLI's bulk export."""
    a0, a1, a2 = since - 1, "", ""
    while True:
        params = {"since": since, "a0": a0, "a1": a1, "a2": a2, "limit": limit}
        page = _traces(session, _page("iat"), params)
        if not page:
            return
        yield page
        last = page[-1]
        a0, a1, a2 = last.iat, last.iss, last.hop


def count_hops_since(session: Session, *, since: int) -> int:
    return int(session.execute(select(func.count()).where(HopRow.iat >= since)).scalar_one())


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
    "changed_traces",
    "count_changed",
    "count_hops_since",
    "dialog_for_trace",
    "hops_for_span",
    "stamp_changes",
    "traces_since",
]
