"""API bearer tokens: made, listed, revoked and looked up, stored hashed.

A token is 32 random octets (``secrets``), base64url, behind the prefix ``ht_`` so secret
scanners can spot one in a log or a repository. Only its SHA-256 is stored: a token has
256 bits of entropy, so a fast hash is enough (a slow password hash only helps guessable
secrets), and a stolen database holds nothing that authenticates.

A token may carry an expiry (``expires_in`` seconds from its making); it is checked on
every request, like revocation, so neither needs the service to restart.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import bindparam, or_, select, update
from sqlmodel import Session

from app.errors import HandoffTraceError
from app.store.db import insert_ignore, select_rows
from app.store.models import TokenRow

TOKEN_PREFIX = "ht_"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
# The longest token anyone could present; longer ones are refused before hashing.
MAX_TOKEN_LENGTH = 256
# Ten years: a longer expiry is a typo (or a token that should simply not expire).
MAX_EXPIRES_IN = 10 * 366 * 24 * 3600


class Role(StrEnum):
    """What a token may do (the role matrix lives in ``app.web.auth``)."""

    INGEST = "ingest"
    READ = "read"
    OPERATOR = "operator"
    ADMIN = "admin"


class TokenError(HandoffTraceError):
    """A token cannot be made or revoked (bad name, name taken, no such token)."""

    reason = "invalid-token"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a valid token speaks for."""

    name: str
    role: Role


def hash_token(token: str) -> str:
    """The stored form of a token: SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_name(name: str) -> str:
    """A token name: 1-64 characters of letters, digits and ``._@-``. Raises TokenError."""
    if not _NAME.fullmatch(name):
        raise TokenError(
            f"token name {name[:70]!r} must be 1-64 characters of letters, digits and ._@- "
            "starting with a letter or digit"
        )
    return name


def create_token(
    session: Session, *, name: str, role: Role, now: int, expires_in: int | None = None
) -> str:
    """Make a token for ``name`` and return it (the only time it is seen); with
    ``expires_in`` it stops working that many seconds after ``now``.

    Raises TokenError for a bad name or one already used (revoked names are not reused,
    so the audit log's actors stay unambiguous), or an ``expires_in`` outside 1 s to ten
    years."""
    check_name(name)
    if expires_in is not None and not 0 < expires_in <= MAX_EXPIRES_IN:
        raise TokenError(f"a token expires 1 s to {MAX_EXPIRES_IN // 86400} days after it is made")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    values = {
        "name": name,
        "role": role.value,
        "token_hash": hash_token(token),
        "created_at": now,
        "revoked_at": None,
        "expires_at": None if expires_in is None else now + expires_in,
    }
    if not insert_ignore(session, TokenRow, values, ["name"]):
        raise TokenError(f"a token named {name!r} exists already (names are never reused)")
    return token


def list_tokens(session: Session) -> list[TokenRow]:
    """Every token, revoked ones included, in name order."""
    return list(session.execute(select(TokenRow).order_by(TokenRow.name)).scalars())


def revoke_token(session: Session, *, name: str, now: int) -> None:
    """Revoke the token named ``name``. Raises TokenError when there is no active one."""
    done = session.execute(
        update(TokenRow)
        .where(TokenRow.name == name, TokenRow.revoked_at.is_(None))
        .values(revoked_at=now)
        .returning(TokenRow.id)
    ).first()
    if done is None:
        raise TokenError(f"no active token named {name[:70]!r}")


# The active token of a hash at a time: built once and run by ``select_rows`` (every API
# request asks it, and building and compiling it anew cost more than the lookup itself).
_ACTIVE = select(TokenRow.token_hash, TokenRow.name, TokenRow.role).where(
    TokenRow.token_hash == bindparam("b_hash"),
    TokenRow.revoked_at.is_(None),
    or_(TokenRow.expires_at.is_(None), TokenRow.expires_at > bindparam("b_now")),
)


def authenticate(session: Session, token: str, *, now: int) -> Principal | None:
    """The principal of an active token at ``now``, or None (unknown, revoked, expired or
    malformed)."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_LENGTH:
        return None
    wanted = hash_token(token)
    rows = select_rows(session, _ACTIVE, {"b_hash": wanted, "b_now": now})
    # The lookup is by hash, so its timing tells nothing about the token; the comparison
    # is constant-time anyway, so no later change to the lookup can make it an oracle.
    # The hash is unique: one row at most.
    if not rows or not hmac.compare_digest(rows[0][0], wanted):
        return None
    return Principal(name=rows[0][1], role=Role(rows[0][2]))
