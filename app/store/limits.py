"""Failed dashboard logins, counted in the database so that every instance and every
restart sees the same count (``app.web.sessions`` decides what the limits are).

A failure is one row per key (a user name, a client address), keyed by the SHA-256 of the
scope and the text: the store never holds what someone typed as a user name. Counting is a
sliding window over ``at``; rows older than the window are deleted as new failures arrive.
Two instances may both let one attempt through in the same instant, so the limit can be
passed by the number of instances at most, never multiplied by it.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import delete, insert, select
from sqlmodel import Session

from app.store.models import LoginFailureRow


def failure_key(scope: str, text: str) -> str:
    return hashlib.sha256(f"{scope}\0{text}".encode()).hexdigest()


def retry_after(session: Session, *, key: str, limit: int, window: int, now: int) -> int:
    """Seconds until ``key`` may try again (0: now): the time at which enough of its
    failures in the window have left it that fewer than ``limit`` remain."""
    times = list(
        session.execute(
            select(LoginFailureRow.at)
            .where(LoginFailureRow.key == key, LoginFailureRow.at > now - window)
            .order_by(LoginFailureRow.at)
        ).scalars()
    )
    if len(times) < limit:
        return 0
    return max(1, times[len(times) - limit] + window - now)


def record_failure(session: Session, *, keys: list[str], now: int, window: int) -> None:
    """One failure for each key; the failures of these keys that left the window go."""
    session.execute(
        delete(LoginFailureRow).where(
            LoginFailureRow.key.in_(keys),  # type: ignore[attr-defined]
            LoginFailureRow.at <= now - window,
        )
    )
    session.execute(insert(LoginFailureRow), [{"key": key, "at": now} for key in keys])


def forget_failures(session: Session, *, key: str) -> None:
    session.execute(delete(LoginFailureRow).where(LoginFailureRow.key == key))
