"""Dashboard login limits, counted in the database so that every instance and every
restart sees the same count (``app.web.sessions`` decides what the limits are).

Two limits, each one row per key (``LoginLimitRow``), keyed by the SHA-256 of the scope and
the text, so the store never holds what someone typed as a user name:

- **per client address**: at most ``limit`` attempts in a window of ``window`` seconds;
  an attempt that logs in is given back (``forgive``), so only failures use it up.
- **per user name from one address**: ``free`` failures in a row, then each further try
  waits twice as long as the one before (15, 30, 60 ... seconds, at most ``cap``) until the
  name logs in from there. Failures from one address never delay the same name from
  another, so nobody can keep a person out by failing on purpose (SECURITY.md).

``take_attempt`` counts an attempt *before* the password is checked, under the rows' write
lock (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` has one writer
at a time), so concurrent guesses on any number of instances are counted one after the
other and no more than the limits get through.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sqlalchemy import delete, select, update
from sqlmodel import Session

from app.store.db import insert_ignore
from app.store.models import LoginLimitRow

FIRST_DELAY = 15  # seconds: long enough to slow a guesser, short for a person who mistyped


def failure_key(scope: str, text: str) -> str:
    return hashlib.sha256(f"{scope}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Limits:
    address_limit: int  # attempts per address in a window
    window: int  # seconds
    free: int  # failures in a row of one name from one address before delays start
    cap: int  # the longest delay, seconds


def _row(session: Session, key: str, now: int) -> LoginLimitRow:
    """The key's row, made when missing, locked until the transaction ends."""
    insert_ignore(
        session, LoginLimitRow, {"key": key, "count": 0, "started_at": now, "next_at": 0}, ["key"]
    )
    return session.execute(
        select(LoginLimitRow).where(LoginLimitRow.key == key).with_for_update()
    ).scalar_one()


def take_attempt(
    session: Session, *, address_key: str, name_key: str, limits: Limits, now: int
) -> int:
    """Count one login attempt, before its password is checked. Returns 0 when it may go
    ahead, else the seconds until it may (nothing is counted then)."""
    # Always in this order (address, then name), so two attempts never wait on each other.
    address = _row(session, address_key, now)
    name = _row(session, name_key, now)
    if address.started_at <= now - limits.window:
        address.started_at, address.count = now, 0
    if name.started_at <= now - limits.window:  # a window with no try: a fresh start
        name.count = 0
    waits = [max(0, name.next_at - now)]
    if address.count >= limits.address_limit:
        waits.append(max(1, address.started_at + limits.window - now))
    if max(waits) > 0:
        session.flush()
        return max(waits)
    address.count += 1
    name.count += 1
    name.started_at = now  # for a name, the last try
    if name.count >= limits.free:
        # Doubling from FIRST_DELAY; the exponent is bounded before it is used.
        steps = min(name.count - limits.free, 30)
        name.next_at = now + min(limits.cap, FIRST_DELAY * 2**steps)
    session.flush()
    return 0


def forgive(session: Session, *, address_key: str, name_key: str, now: int, limits: Limits) -> None:
    """The attempt logged in: it does not count against the address, and the name's
    failures from there are forgotten. Rows that limit nothing any more go too."""
    prune(session, now=now, window=limits.window)
    session.execute(
        update(LoginLimitRow)
        .where(LoginLimitRow.key == address_key, LoginLimitRow.count > 0)
        .values(count=LoginLimitRow.count - 1)
    )
    session.execute(delete(LoginLimitRow).where(LoginLimitRow.key == name_key))


def prune(session: Session, *, now: int, window: int) -> None:
    """Rows that no longer limit anything: windows and delays long over."""
    session.execute(
        delete(LoginLimitRow).where(
            LoginLimitRow.started_at <= now - window, LoginLimitRow.next_at <= now - window
        )
    )
