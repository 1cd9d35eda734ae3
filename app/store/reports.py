"""Upload reports (the dashboard's upload page), kept in the database for a set time so
that any instance serves the download link another instance gave out.

Only the report's user may read it, and only until ``expires_at``; expired reports, and a
user's reports beyond the newest ``keep``, are deleted whenever a new one is kept.
"""

from __future__ import annotations

import secrets

from sqlalchemy import delete, select
from sqlmodel import Session

from app.store.models import UploadReportRow


def keep_report(
    session: Session, *, user_id: int, body: bytes, now: int, lifetime: int, keep: int
) -> str:
    """Store a report; returns the key of its download link."""
    session.execute(delete(UploadReportRow).where(UploadReportRow.expires_at <= now))
    key = secrets.token_urlsafe(18)
    session.add(
        UploadReportRow(
            key=key, user_id=user_id, body=body, created_at=now, expires_at=now + lifetime
        )
    )
    session.flush()
    older = (
        select(UploadReportRow.key)
        .where(UploadReportRow.user_id == user_id, UploadReportRow.key != key)
        .order_by(UploadReportRow.created_at.desc(), UploadReportRow.key)  # type: ignore[attr-defined]
        .offset(keep - 1)
    )
    stale = list(session.execute(older).scalars())
    if stale:
        session.execute(delete(UploadReportRow).where(UploadReportRow.key.in_(stale)))  # type: ignore[attr-defined]
    return key


def get_report(session: Session, *, user_id: int, key: str, now: int) -> bytes | None:
    """The report, when it is this user's and has not expired."""
    row = session.get(UploadReportRow, key)
    if row is None or row.user_id != user_id or row.expires_at <= now:
        return None
    return row.body
