"""Cases of envelope handoffs as the dashboard and the API read them (docs/envelopes.md).

``list_cases`` reads the derived ledger (``CaseRow``) and the open flag counts; a case's
detail (``app.ingest.cases.case_detail``) reads its flags here, where ingest and the sweep
keep them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlmodel import Session

from app.store.models import CaseRow, FlagRow


@dataclass(frozen=True)
class CaseSummary:
    case_id: str
    owner: str | None  # current owner by the ledger, None when nothing establishes one
    epoch: int | None
    handoffs: int
    open_flags: int
    last_at: int


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


def case_stored(session: Session, case_id: str) -> bool:
    """Whether the case has a derived row (some item named it)."""
    return bool(case_id) and session.get(CaseRow, case_id) is not None


def case_flags(session: Session, case_id: str) -> tuple[FlagRow, ...]:
    """The case's flags as stored, first raised first."""
    query = select(FlagRow).where(FlagRow.case_id == case_id).order_by(FlagRow.id)
    return tuple(session.execute(query).scalars())
