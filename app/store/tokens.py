"""API bearer tokens: made, listed, revoked and looked up, stored hashed.

A token is 32 random octets (``secrets``), base64url, behind the prefix ``ht_`` so secret
scanners can spot one in a log or a repository. Only its SHA-256 is stored: a token has
256 bits of entropy, so a fast hash is enough (a slow password hash only helps guessable
secrets), and a stolen database holds nothing that authenticates.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import select, update
from sqlmodel import Session

from .db import insert_ignore
from .models import TokenRow

TOKEN_PREFIX = "ht_"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
# The longest token anyone could present; longer ones are refused before hashing.
MAX_TOKEN_LENGTH = 256


class Role(StrEnum):
    """What a token may do (the role matrix lives in ``app.web.auth``)."""

    INGEST = "ingest"
    READ = "read"
    OPERATOR = "operator"
    ADMIN = "admin"


class TokenError(ValueError):
    """A token cannot be made or revoked (bad name, name taken, no such token)."""


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


def create_token(session: Session, *, name: str, role: Role, now: int) -> str:
    """Make a token for ``name`` and return it (the only time it is seen).

    Raises TokenError for a bad name or one already used (revoked names are not reused,
    so the audit log's actors stay unambiguous)."""
    check_name(name)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    values = {
        "name": name,
        "role": role.value,
        "token_hash": hash_token(token),
        "created_at": now,
        "revoked_at": None,
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


def authenticate(session: Session, token: str) -> Principal | None:
    """The principal of an active token, or None (unknown, revoked or malformed)."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > MAX_TOKEN_LENGTH:
        return None
    wanted = hash_token(token)
    row = session.execute(
        select(TokenRow).where(TokenRow.token_hash == wanted, TokenRow.revoked_at.is_(None))
    ).scalar_one_or_none()
    # The lookup is by hash, so its timing tells nothing about the token; the comparison
    # is constant-time anyway, so no later change to the lookup can make it an oracle.
    if row is None or not hmac.compare_digest(row.token_hash, wanted):
        return None
    return Principal(name=row.name, role=Role(row.role))
