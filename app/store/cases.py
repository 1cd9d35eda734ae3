"""Cases of envelope handoffs as the dashboard and the API read them (docs/envelopes.md).

``list_cases`` reads the derived ledger (``CaseRow``) and the open flag counts;
``case_detail`` derives the ownership timeline again from the stored envelope items with
the pure ``app.envelope.ledger.derive_ledger`` (cheap for one case, and never stale), and
reads the case's flags from the flag table, where ingest and the sweep keep them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlmodel import Session

from app.envelope.extract import ItemKind
from app.envelope.ledger import CaseEvent, CaseRules, Epoch, Item, Ledger
from app.store.envelopes import case_items, case_ledger
from app.store.models import CaseRow, FlagRow

# Epoch, CaseEvent: the timeline's bands and markers, as the pure ledger derives them.
__all__ = [
    "CaseDetail",
    "CaseEvent",
    "CaseSummary",
    "Envelope",
    "Epoch",
    "Fact",
    "Reference",
    "case_detail",
    "list_cases",
]


@dataclass(frozen=True)
class CaseSummary:
    case_id: str
    owner: str | None  # current owner by the ledger, None when nothing establishes one
    epoch: int | None
    handoffs: int
    open_flags: int
    last_at: int


@dataclass(frozen=True)
class Fact:
    key: str
    value: object
    source: str | None
    verified: bool


@dataclass(frozen=True)
class Reference:
    url: str
    media_type: str | None
    filename: str | None
    sha256: str | None
    size: int | None
    outcome: str  # verified | mismatch | unverifiable | missing-hash | expired
    detail: str | None


@dataclass(frozen=True)
class Envelope:
    handoff_id: str
    case_id: str
    from_agent: str
    to_agent: str | None
    epoch: int
    received_at: int
    media_type: str
    errors: tuple[str, ...]  # schema errors; empty when valid
    goal: str | None
    done: tuple[str, ...]
    remaining: tuple[str, ...]
    facts: tuple[Fact, ...]
    open_questions: tuple[str, ...]
    constraints: dict[str, object]
    summary: str | None
    references: tuple[Reference, ...]
    response: str | None  # accepted | rejected | None
    response_detail: str | None


@dataclass(frozen=True)
class CaseDetail:
    case_id: str
    owner: str | None
    epoch: int | None
    epochs: tuple[Epoch, ...]
    events: tuple[CaseEvent, ...]
    envelopes: tuple[Envelope, ...]
    flags: tuple[FlagRow, ...]


def list_cases(
    session: Session,
    *,
    q: str | None = None,
    flagged: bool = False,
    limit: int = 100,
    offset: int = 0,
) -> list[CaseSummary]:
    """Cases, most recent activity first (then by case id); ``q`` matches a substring of
    the case id; ``flagged`` keeps cases with an open flag. ``open_flags`` counts flags in
    status ``open`` (not acknowledged, snoozed or resolved)."""
    open_flags = (
        select(FlagRow.case_id, func.count().label("n"))
        .where(FlagRow.case_id.is_not(None), FlagRow.status == "open")
        .group_by(FlagRow.case_id)
        .subquery()
    )
    count = func.coalesce(open_flags.c.n, 0)
    query = select(CaseRow, count).outerjoin(open_flags, open_flags.c.case_id == CaseRow.case_id)
    if q:
        query = query.where(CaseRow.case_id.contains(q, autoescape=True))
    if flagged:
        query = query.where(count > 0)
    query = query.order_by(CaseRow.last_at.desc(), CaseRow.case_id).limit(limit).offset(offset)
    return [
        CaseSummary(row.case_id, row.owner, row.epoch, row.handoffs, n, row.last_at)
        for row, n in session.execute(query)
    ]


def case_detail(session: Session, case_id: str) -> CaseDetail | None:
    """The case's ledger, timeline, envelopes and flags; None for a case with no item.

    The timeline is derived again from the items (it depends on them alone); the flags are
    read as stored, where ingest and the sweep keep them in step with the clock."""
    if not case_id or session.get(CaseRow, case_id) is None:
        return None
    items = case_items(session, case_id)
    # Neither the clock nor the rules change epochs, events or responses; only flags.
    ledger = case_ledger(session, case_id, now=0, rules=CaseRules())
    flags = session.execute(
        select(FlagRow).where(FlagRow.case_id == case_id).order_by(FlagRow.id)
    ).scalars()
    return CaseDetail(
        case_id=case_id,
        owner=ledger.owner,
        epoch=ledger.epoch,
        epochs=ledger.epochs,
        events=ledger.events,
        envelopes=_envelopes(items, ledger, case_id),
        flags=tuple(flags),
    )


def _envelopes(items: list[Item], ledger: Ledger, case_id: str) -> tuple[Envelope, ...]:
    """One envelope per handoff (its first receipt), and every message that failed."""
    shown: list[Envelope] = []
    seen: set[str] = set()
    for item in sorted(items, key=lambda i: i.order):
        if item.kind == ItemKind.HANDOFF:
            if item.handoff_id in seen:
                continue
            seen.add(item.handoff_id or "")
        elif item.kind != ItemKind.INVALID or not (item.errors or item.drift):
            continue
        elif item.envelope is not None and "accepted" in item.envelope:
            continue  # an invalid acceptance is a timeline marker, not an envelope
        elif item.action is not None or item.envelope is None:
            continue  # an invalid case event
        shown.append(_envelope(item, ledger, case_id))
    return tuple(shown)


def _envelope(item: Item, ledger: Ledger, case_id: str) -> Envelope:
    body: Mapping[str, Any] = item.envelope or {}
    response, why = ledger.responses.get(item.handoff_id or "", (None, None))
    drift = tuple(f"version drift: {m} is not an accepted type" for m in item.drift)
    constraints = body.get("constraints")
    return Envelope(
        handoff_id=item.handoff_id or "",
        case_id=case_id,
        from_agent=item.agent or "(unknown)",
        to_agent=item.to_agent,
        epoch=item.epoch if item.epoch is not None else -1,
        received_at=item.at,
        media_type=item.media_type or "",
        errors=item.errors + drift,
        goal=_str(body.get("goal")),
        done=_strings(body.get("done")),
        remaining=_strings(body.get("remaining")),
        facts=tuple(_fact(f) for f in _list(body.get("facts")) if isinstance(f, Mapping)),
        open_questions=_strings(body.get("open_questions")),
        constraints=dict(constraints) if isinstance(constraints, Mapping) else {},
        summary=_str(body.get("summary")),
        references=tuple(_reference(r) for r in item.references),
        response=response,
        response_detail=why,
    )


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _strings(value: object) -> tuple[str, ...]:
    return tuple(v for v in _list(value) if isinstance(v, str))


def _fact(fact: Mapping[str, Any]) -> Fact:
    source = fact.get("source")
    return Fact(
        key=str(fact.get("key")),
        value=fact.get("value"),
        source=source if isinstance(source, str) and source else None,
        verified=fact.get("verified") is True,
    )


def _reference(ref: Mapping[str, Any]) -> Reference:
    return Reference(
        url=str(ref.get("url")),
        media_type=ref.get("media_type"),
        filename=ref.get("filename"),
        sha256=ref.get("sha256"),
        size=ref.get("size"),
        outcome=str(ref.get("outcome")),
        detail=ref.get("detail"),
    )
