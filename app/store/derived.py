"""The derived state of a store, compared and replaced (``handoff-trace rederive``).

Derived means re-computable from the signed octets and the receipts as ingested: chain
receipts (an element observed in a verified chain), links, verdicts with their judgements
and ref outcomes, replay memory and seen statuses, hops and flags. ``snapshot`` reads it
in a comparable form (clock bookkeeping such as ``derived_at`` and ``judged_at`` left out,
operators' workflow columns too); ``compare`` says table by table what differs;
``replace`` writes a re-derived store's state over a stored one, re-deriving hops and flags
with ``app.store.derive`` so operators' workflow columns and audit log stay.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from handoff_context import digest_text
from sqlalchemy import delete, select, text
from sqlmodel import Session, SQLModel

from app.errors import HandoffTraceError
from app.store.derive import HopKey
from app.store.models import (
    ElementRow,
    FlagRow,
    HopRow,
    LinkRow,
    ObservationRow,
    RefOutcomeRow,
    RejectedObservationRow,
    RejectedOctetsRow,
    ReplayRow,
    SeenStatusRow,
    VerdictRow,
)

Table = dict[Any, Any]  # comparable key -> comparable value
_VERDICT_SKIP = ("id", "observation_id", "judged_at")
_VERDICT = [c.name for c in VerdictRow.__table__.columns if c.name not in _VERDICT_SKIP]
_HOP = [c.name for c in HopRow.__table__.columns if c.name not in ("derived_at", "change")]
_FLAG = ["kind", "variant", "severity", "evidence", "iss", "hop", "offer", "opened_at", "detail"]
_OBSERVATION = [c.name for c in ObservationRow.__table__.columns if c.name != "id"]


class ReplaceError(HandoffTraceError):
    """The re-derived store does not line up with the stored one (its receipts differ)."""

    reason = "rederive-mismatch"


def _columns(row: Any, names: list[str]) -> tuple[Any, ...]:
    return tuple(getattr(row, n) for n in names)


def _verdicts(session: Session) -> Table:
    """Each receipt's verdict and ref outcomes, by the receipt's place in ingest order."""
    refs: dict[int, list[tuple[Any, ...]]] = {}
    for r in session.execute(select(RefOutcomeRow).order_by(RefOutcomeRow.index)).scalars():
        refs.setdefault(r.verdict_id, []).append((r.index, r.kind, r.outcome, r.detail))
    query = (
        select(ObservationRow.digest, ObservationRow.source, VerdictRow)
        .outerjoin(VerdictRow, VerdictRow.observation_id == ObservationRow.id)
        .where(ObservationRow.via.is_(None))
        .order_by(ObservationRow.id)
    )
    table: Table = {}
    for n, (digest, source, v) in enumerate(session.execute(query)):
        value = None if v is None else (_columns(v, _VERDICT), tuple(refs.get(v.id, ())))
        table[n, digest_text(digest), source] = value
    return table


def _refused(session: Session) -> Table:
    query = select(RejectedObservationRow).order_by(RejectedObservationRow.id)
    return {
        (n, digest_text(r.digest), r.source): (r.reason, r.detail, r.verdict)
        for n, r in enumerate(session.execute(query).scalars())
    }


def _chain_receipts(session: Session) -> Table:
    rows = session.execute(select(ObservationRow).where(ObservationRow.via.is_not(None)))
    return dict(Counter(_columns(r, _OBSERVATION) for r in rows.scalars()))


def _keyed(session: Session, model: type[SQLModel], key: list[str], value: list[str]) -> Table:
    rows = session.execute(select(model)).scalars()
    return {_columns(r, key): _columns(r, value) for r in rows}


def snapshot(session: Session) -> dict[str, Table]:
    """The derived state, table by table, in a form two stores can be compared in."""
    flags = {
        f.key: (*_columns(f, _FLAG[:3]), tuple(sorted(f.evidence)), *_columns(f, _FLAG[4:]))
        for f in session.execute(select(FlagRow)).scalars()
    }
    return {
        "chain receipts": _chain_receipts(session),
        "links": _keyed(session, LinkRow, ["offer"], ["prev", "dialog"]),
        "verdicts": _verdicts(session),
        "refused verdicts": _refused(session),
        "replay memory": _keyed(session, ReplayRow, ["iss", "hop"], ["digest", "content"]),
        "seen statuses": _keyed(session, SeenStatusRow, ["digest"], []),
        "hops": _keyed(session, HopRow, ["iss", "hop"], _HOP),
        "flags": flags,
    }


@dataclass
class TableDiff:
    """How one derived table differs: rows only stored, only re-derived, or changed."""

    table: str
    stored: int
    rederived: int
    missing: list[Any] = field(default_factory=list)  # stored, not re-derived
    extra: list[Any] = field(default_factory=list)  # re-derived, not stored
    changed: list[Any] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return bool(self.missing or self.extra or self.changed)


def compare(stored: dict[str, Table], rederived: dict[str, Table]) -> list[TableDiff]:
    out = []
    for name, before in stored.items():
        after = rederived[name]
        out.append(
            TableDiff(
                name,
                sum(before.values()) if name == "chain receipts" else len(before),
                sum(after.values()) if name == "chain receipts" else len(after),
                missing=[k for k in before if k not in after],
                extra=[k for k in after if k not in before],
                changed=[k for k in before if k in after and before[k] != after[k]],
            )
        )
    return out


# --- replacing the stored derived state ---------------------------------------------------


def replace(session: Session, rederived: Session) -> list[HopKey]:
    """Make ``session``'s derived state that of ``rederived`` (a store re-derived from the
    same octets and receipts); returns every hop, for the caller to derive again with its
    flags (``app.ingest.derive.derive_every_hop``) in the same transaction.

    Holds off concurrent writers for the whole transaction. Raises ReplaceError when the
    two stores' receipts do not line up (nothing is changed then)."""
    _exclusive(session)
    receipts = _receipt_ids(session, rederived)
    for model in (RefOutcomeRow, VerdictRow, LinkRow, ReplayRow, SeenStatusRow):
        session.execute(delete(model))
    session.execute(delete(ObservationRow).where(ObservationRow.via.is_not(None)))
    chain = rederived.execute(select(ObservationRow).where(ObservationRow.via.is_not(None)))
    _copy(session, ObservationRow, chain.scalars(), skip=frozenset({"id"}))
    for model in (LinkRow, ReplayRow, SeenStatusRow):
        _copy(session, model, rederived.execute(select(model)).scalars())
    _copy_verdicts(session, rederived, receipts)
    return _every_hop(session)


def _exclusive(session: Session) -> None:
    # SQLite: the transaction began IMMEDIATE, so no other writer runs. PostgreSQL: writers
    # wait until this commits; readers go on.
    if session.get_bind().dialect.name == "postgresql":
        tables = "element, observation, verdict, hop, flag, rejected_octets"
        session.execute(text(f"LOCK TABLE {tables} IN EXCLUSIVE MODE"))


def _receipt_ids(session: Session, rederived: Session) -> dict[int, int]:
    """Re-derived receipt id -> stored receipt id, by place in ingest order."""

    def receipts(s: Session) -> list[Any]:
        query = (
            select(ObservationRow.id, ObservationRow.digest, ObservationRow.source)
            .where(ObservationRow.via.is_(None))
            .order_by(ObservationRow.id)
        )
        return list(s.execute(query))

    mine, theirs = receipts(session), receipts(rederived)
    pairs = list(zip(theirs, mine, strict=False))
    if len(mine) != len(theirs) or any(a[1:] != b[1:] for a, b in pairs):
        raise ReplaceError("the re-derived receipts do not match the stored ones")
    return {a.id: b.id for a, b in pairs}


def _copy(session: Session, model: Any, rows: Any, *, skip: frozenset[str] = frozenset()) -> None:
    names = [c.name for c in model.__table__.columns if c.name not in skip]
    batch = [{n: getattr(r, n) for n in names} for r in rows]
    if batch:
        session.execute(model.__table__.insert(), batch)


def _copy_verdicts(session: Session, rederived: Session, receipts: dict[int, int]) -> None:
    refs: dict[int, list[dict[str, Any]]] = {}
    for r in rederived.execute(select(RefOutcomeRow)).scalars():
        row = {"index": r.index, "kind": r.kind, "outcome": r.outcome, "detail": r.detail}
        refs.setdefault(r.verdict_id, []).append(row)
    names = [c.name for c in VerdictRow.__table__.columns if c.name not in ("id", "observation_id")]
    for v in rederived.execute(select(VerdictRow).order_by(VerdictRow.id)).scalars():
        values = {n: getattr(v, n) for n in names}
        values["observation_id"] = receipts[v.observation_id]
        new_id = session.execute(
            VerdictRow.__table__.insert().values(**values).returning(VerdictRow.id)
        ).scalar_one()
        rows = [{**r, "verdict_id": new_id} for r in refs.get(v.id or 0, [])]
        if rows:
            session.execute(RefOutcomeRow.__table__.insert(), rows)


def _every_hop(session: Session) -> set[HopKey]:
    """Every hop that has or had a derived answer: hops, flags, and what elements name."""
    keys: set[HopKey] = set()
    queries = [
        select(HopRow.iss, HopRow.hop),
        select(FlagRow.iss, FlagRow.hop),
        select(ElementRow.hop_iss, ElementRow.hop),
        select(ElementRow.iss, ElementRow.hop).where(ElementRow.type == "offer"),
        select(RejectedOctetsRow.hop_iss, RejectedOctetsRow.hop).where(
            RejectedOctetsRow.hop.is_not(None)
        ),
    ]
    for query in queries:
        keys.update((iss, hop) for iss, hop in session.execute(query.distinct()))
    return keys
