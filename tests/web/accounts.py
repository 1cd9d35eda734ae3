"""Dashboard accounts and browser sessions for the access tests, made in the store directly
(no login round trip, no argon2 per session, no rate limit in the way)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from app.store.db import transaction
from app.store.models import UserRow, WebSessionRow
from app.store.tokens import Role
from app.store.users import create_user, open_session

PASSWORD = "a long enough password"
# One account per role a person can hold; the ingest role is for machines and has none.
ACCOUNTS = {"read": "rita", "operator": "otto", "admin": "ada"}
COOKIE = "ht_session"


@dataclass(frozen=True)
class Login:
    """A browser session: the cookie value and the CSRF token its pages carry."""

    cookie: str
    csrf: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Cookie": f"{COOKIE}={self.cookie}"}


def create_accounts(engine: Any) -> None:
    with transaction(engine) as session:
        for role, name in ACCOUNTS.items():
            create_user(session, username=name, role=Role(role), password=PASSWORD, now=1)


def log_in(engine: Any, username: str, *, now: int | None = None, lifetime: int = 3600) -> Login:
    """Open a session for ``username`` as if it had logged in at ``now`` (default: now)."""
    at = int(time.time()) if now is None else now
    with transaction(engine) as session:
        user = session.execute(select(UserRow).where(UserRow.username == username)).scalar_one()
        cookie = open_session(session, user=user, now=at, lifetime=lifetime)
        csrf = (
            session.execute(
                select(WebSessionRow.csrf)
                .where(WebSessionRow.user_id == user.id)
                .order_by(WebSessionRow.id.desc())
            )
            .scalars()
            .first()
        )
    assert csrf is not None
    return Login(cookie, csrf)
