"""Dashboard operator accounts and browser sessions.

Passwords are hashed with argon2id (``argon2-cffi``'s defaults, RFC 9106's second
recommended option); a login for an unknown user hashes a dummy password too, so the time it
takes does not tell whether the name exists. A session cookie is 32 random octets and only
its SHA-256 is stored, like an API token (``app.store.tokens``): it has 256 bits of
entropy, so a fast hash is enough and a stolen database holds nothing that logs in.

A session ends at its ``expires_at`` (``HANDOFF_TRACE_SESSION_SECONDS`` after login), at
logout, or as soon as its account is disabled or given a new password: every request looks
the session and its account up again, so nothing about them is cached.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, select
from sqlmodel import Session

from app.errors import HandoffTraceError
from app.store.db import insert_ignore
from app.store.models import UserRow, WebSessionRow
from app.store.tokens import Role, TokenError, check_name

# The roles a person can hold; ``ingest`` is for machines and has no dashboard.
USER_ROLES = (Role.READ, Role.OPERATOR, Role.ADMIN)
MIN_PASSWORD = 12
MAX_PASSWORD = 1024  # argon2 hashes anything, but nobody types more; refuse before hashing

_hasher = PasswordHasher()
# Verified against when the user does not exist, so both paths cost one argon2 verify.
_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))


class UserError(HandoffTraceError):
    """An account cannot be made (bad name or role, name taken, weak password)."""

    reason = "invalid-user"


@dataclass(frozen=True, slots=True)
class WebUser:
    """Who a valid session speaks for, and the CSRF token of that session."""

    id: int
    username: str
    role: Role
    csrf: str
    session_id: int

    @property
    def actor(self) -> str:
        """How the audit log names this person."""
        return f"user:{self.username}"


def generate_password() -> str:
    """A password for a new account: 128 random bits, easy to paste."""
    return secrets.token_urlsafe(16)


def create_user(session: Session, *, username: str, role: Role, password: str, now: int) -> UserRow:
    """Make an account. Raises UserError for a bad name or role, a taken name, or a
    password shorter than ``MIN_PASSWORD`` characters."""
    try:
        check_name(username)
    except TokenError as exc:
        raise UserError(str(exc).replace("token name", "user name")) from exc
    if role not in USER_ROLES:
        raise UserError(f"role must be one of {', '.join(r.value for r in USER_ROLES)}")
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise UserError(f"the password must be {MIN_PASSWORD} to {MAX_PASSWORD} characters")
    values = {
        "username": username,
        "role": role.value,
        "password_hash": _hasher.hash(password),
        "created_at": now,
        "disabled_at": None,
    }
    if not insert_ignore(session, UserRow, values, ["username"]):
        raise UserError(f"a user named {username!r} exists already")
    row = session.execute(select(UserRow).where(UserRow.username == username)).scalar_one()
    return row


def list_users(session: Session) -> list[UserRow]:
    return list(session.execute(select(UserRow).order_by(UserRow.username)).scalars())


# The password hash of an account that logs in through an identity provider: not an argon2
# hash, so no password ever matches it (argon2 refuses it as InvalidHashError).
SSO_HASH = "!sso"


def sso_user(
    session: Session, *, issuer: str, subject: str, label: str, role: Role, now: int
) -> UserRow | None:
    """The account of the person the identity provider ``issuer`` knows as ``subject``
    (the ID token's ``iss`` and ``sub``), made on their first login and given ``role`` at
    every login; None when the account is disabled. The account's name is ``label`` (a
    valid name, ``sso-...``) when it is free, else ``label`` and a digest of the pair: a
    name is only a label, and two people are never one account because their names look
    alike. Raises UserError when ``label`` belongs to a local account (one with a
    password): the provider must not log anyone in under a name people know as local."""
    try:
        check_name(label)
    except TokenError as exc:
        raise UserError(str(exc).replace("token name", "user name")) from exc
    row = session.execute(
        select(UserRow).where(UserRow.sso_issuer == issuer, UserRow.sso_subject == subject)
    ).scalar_one_or_none()
    if row is None:
        holder = session.execute(
            select(UserRow.password_hash).where(UserRow.username == label)
        ).scalar_one_or_none()
        if holder is not None and holder != SSO_HASH:
            raise UserError(f"the user name {label} belongs to a local account")
        name = label if holder is None else _distinct(label, issuer, subject)
        values = {
            "username": name, "role": role.value, "password_hash": SSO_HASH,
            "created_at": now, "disabled_at": None, "sso_issuer": issuer, "sso_subject": subject,
        }  # fmt: skip
        # Two first logins of one person at once: the unique (issuer, subject) index keeps
        # one row, and both find it below.
        insert_ignore(session, UserRow, values, ["sso_issuer", "sso_subject"])
        row = session.execute(
            select(UserRow).where(UserRow.sso_issuer == issuer, UserRow.sso_subject == subject)
        ).scalar_one()
    if row.disabled_at is not None:
        return None
    if row.role != role.value:
        row.role = role.value
        session.flush()
    return row


def _distinct(label: str, issuer: str, subject: str) -> str:
    """``label`` made this person's own: a digest of (issuer, subject) appended."""
    digest = hashlib.sha256(f"{issuer}\0{subject}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"{label[: 64 - 13]}-{digest[:12]}"


def check_password(session: Session, *, username: str, password: str) -> UserRow | None:
    """The active local account with this name and password, else None. Takes one argon2
    verify, against a hash made with the same parameters, whether the name is unknown, a
    local account's, or an account that logs in only through the identity provider (no
    user-name enumeration by timing)."""
    row = None
    # No account name holds NUL, and PostgreSQL fails on one in a query: not looked up.
    if len(username) <= 64 and "\x00" not in username and len(password) <= MAX_PASSWORD:
        row = session.execute(
            select(UserRow).where(UserRow.username == username, UserRow.disabled_at.is_(None))
        ).scalar_one_or_none()
    local = row is not None and row.password_hash != SSO_HASH
    try:
        _hasher.verify(
            row.password_hash if local and row is not None else _DUMMY_HASH,
            password[:MAX_PASSWORD],
        )
    except (VerificationError, InvalidHashError):
        return None
    return row if local else None


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def open_session(session: Session, *, user: UserRow, now: int, lifetime: int) -> str:
    """Start a browser session for ``user`` that lasts ``lifetime`` seconds; returns the
    cookie value (shown once)."""
    assert user.id is not None
    token = secrets.token_urlsafe(32)
    session.add(
        WebSessionRow(
            token_hash=_hash(token),
            user_id=user.id,
            csrf=secrets.token_urlsafe(32),
            created_at=now,
            expires_at=now + lifetime,
        )
    )
    # Expired sessions of anyone are dropped while we are here; nothing else reads them.
    session.execute(delete(WebSessionRow).where(WebSessionRow.expires_at <= now))
    return token


def session_user(session: Session, *, token: str, now: int) -> WebUser | None:
    """The user of a live session cookie, else None (unknown, expired, disabled account)."""
    if not token or len(token) > 128:
        return None
    row = session.execute(
        select(WebSessionRow, UserRow)
        .join(UserRow, UserRow.id == WebSessionRow.user_id)
        .where(
            WebSessionRow.token_hash == _hash(token),
            WebSessionRow.expires_at > now,
            UserRow.disabled_at.is_(None),
        )
    ).first()
    if row is None:
        return None
    web, user = row
    assert user.id is not None and web.id is not None
    return WebUser(user.id, user.username, Role(user.role), web.csrf, web.id)


def close_session(session: Session, *, token: str) -> None:
    """Log a browser out: its session row is deleted."""
    session.execute(delete(WebSessionRow).where(WebSessionRow.token_hash == _hash(token)))


def disable_user(session: Session, *, username: str, now: int) -> int:
    """Disable the account: it cannot log in, and its open sessions end at once. Returns
    how many sessions ended. Raises UserError when there is no enabled account of that
    name."""
    row = session.execute(
        select(UserRow).where(UserRow.username == username, UserRow.disabled_at.is_(None))
    ).scalar_one_or_none()
    if row is None:
        raise UserError(f"no enabled user named {username[:70]!r}")
    row.disabled_at = now
    session.add(row)
    ended = session.execute(
        delete(WebSessionRow).where(WebSessionRow.user_id == row.id).returning(WebSessionRow.id)
    )
    return len(ended.all())


def set_password(session: Session, *, username: str, role: Role, password: str, now: int) -> None:
    """Create the account, or give the existing one this role and password (and enable it).
    For ``run-demo``'s one-time login. Raises UserError like ``create_user``."""
    row = session.execute(select(UserRow).where(UserRow.username == username)).scalar_one_or_none()
    if row is None:
        create_user(session, username=username, role=role, password=password, now=now)
        return
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise UserError(f"the password must be {MIN_PASSWORD} to {MAX_PASSWORD} characters")
    row.role = role.value
    row.password_hash = _hasher.hash(password)
    row.disabled_at = None
    session.add(row)
    # Whoever logged in with the old password is logged out.
    session.execute(delete(WebSessionRow).where(WebSessionRow.user_id == row.id))
