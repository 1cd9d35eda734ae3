"""Comments on flags: the thread people keep while they work on a flag (alembic 0010).

The audit log (``action``) says what was done to a flag; a comment is conversation beside
it, so it changes nothing about the flag. A flag with a comment is kept when its condition
stops holding, as one with an audit entry is (``app.store.flags``).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlmodel import Session

from app.errors import HandoffTraceError
from app.store.models import CommentRow, FlagRow

MAX_COMMENT = 4000


class CommentError(HandoffTraceError, ValueError):
    """A comment that cannot be added (no such flag, empty, too long)."""

    reason = "bad-comment"


def add_comment(session: Session, *, flag_id: int, author: str, body: str, now: int) -> CommentRow:
    """Add ``body`` by ``author`` to the thread of flag ``flag_id``. Raises CommentError."""
    text = body.strip()
    if not text:
        raise CommentError("Write something first: the comment is empty.")
    if len(text) > MAX_COMMENT:
        raise CommentError(f"A comment may be at most {MAX_COMMENT} characters.")
    if session.get(FlagRow, flag_id) is None:
        raise CommentError(f"There is no flag {flag_id}.")
    row = CommentRow(flag_id=flag_id, author=author, at=now, body=text)
    session.add(row)
    session.flush()
    return row


def comments_of(session: Session, *, flag_id: int) -> list[CommentRow]:
    """The thread of one flag, oldest first."""
    query = select(CommentRow).where(CommentRow.flag_id == flag_id).order_by(CommentRow.id)
    return list(session.execute(query).scalars())
