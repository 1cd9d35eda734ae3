"""The key history, operators' revocations and the trust audit log in the database (issue
21): every SQL statement trust sources need.

``KeyHistory`` is the library's ``KeyHistoryStore`` over the shared database, so every
instance judges with one history. Merges follow ``plan_merge``: a window is inserted only if
absent and closed only while open, so two instances that fetch a rotation together record
it once, with the first instance's times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from handoff_context.sources import KeyWindow, MergePlan, PublishedKey, Revocation, plan_merge
from sqlalchemy import Engine, select, update
from sqlmodel import Session

from app.store import db
from app.store.models import TrustEventRow, TrustKeyWindowRow, TrustRevocationRow

_WINDOW_KEYS = ["source", "kid", "thumbprint", "generation"]


@dataclass(frozen=True)
class TrustEvent:
    at: int
    kind: str
    source: str
    detail: str
    keys: list[list[str]]


class KeyHistory:
    """``handoff_context.sources.KeyHistoryStore`` in the service's database."""

    def __init__(self, engine: Engine, *, clock: Callable[[], int]) -> None:
        self.engine = engine
        self.clock = clock

    def merge(self, *, source: str, fetched_at: int, keys: Sequence[PublishedKey]) -> MergePlan:
        def work(session: Session) -> MergePlan:
            rows = session.execute(
                select(TrustKeyWindowRow).where(TrustKeyWindowRow.source == source)
            ).scalars()
            existing = [_window(r) for r in rows]
            plan = plan_merge(existing, source=source, fetched_at=fetched_at, keys=keys)
            for w in plan.opens:
                db.insert_ignore(session, TrustKeyWindowRow, _row(w), _WINDOW_KEYS)
            for w in plan.closes:
                session.execute(
                    update(TrustKeyWindowRow)
                    .where(
                        TrustKeyWindowRow.source == w.source,
                        TrustKeyWindowRow.kid == w.kid,
                        TrustKeyWindowRow.thumbprint == w.thumbprint,
                        TrustKeyWindowRow.generation == w.generation,
                        TrustKeyWindowRow.stopped_at.is_(None),  # type: ignore[union-attr]
                    )
                    .values(stopped_at=w.stopped_at)
                )
            return plan

        return db.run(self.engine, work)

    def windows(self) -> list[KeyWindow]:
        with db.transaction(db.read_only(self.engine)) as session:
            rows = session.execute(select(TrustKeyWindowRow)).scalars()
            return [_window(r) for r in rows]

    def revoke(self, revocation: Revocation) -> bool:
        row = {
            "thumbprint": revocation.thumbprint or "",
            "kid": revocation.kid or "",
            "at": revocation.at,
            "reason": revocation.reason,
            "actor": revocation.by,
            "created_at": self.clock(),
        }
        return db.run(
            self.engine,
            lambda s: db.insert_ignore(s, TrustRevocationRow, row, ["thumbprint", "kid", "at"]),
        )

    def revocations(self) -> list[Revocation]:
        with db.transaction(db.read_only(self.engine)) as session:
            rows = session.execute(
                select(TrustRevocationRow).order_by(TrustRevocationRow.id)  # type: ignore[arg-type]
            ).scalars()
            return [
                Revocation(
                    at=r.at,
                    thumbprint=r.thumbprint or None,
                    kid=r.kid or None,
                    reason=r.reason,
                    by=r.actor,
                )
                for r in rows
            ]


def record_event(
    engine: Engine, *, at: int, kind: str, source: str, detail: str, keys: Sequence[Sequence[str]]
) -> None:
    """One entry of the trust audit log."""
    values = {
        "at": at,
        "kind": kind,
        "source": source,
        "detail": detail[:2000],
        "keys": [list(k) for k in keys],
    }
    db.run(engine, lambda s: s.add(TrustEventRow(**values)))


def recent_events(session: Session, *, limit: int = 50) -> list[TrustEvent]:
    rows = session.execute(
        select(TrustEventRow).order_by(TrustEventRow.id.desc()).limit(limit)  # type: ignore[union-attr]
    ).scalars()
    return [TrustEvent(r.at, r.kind, r.source, r.detail, list(r.keys)) for r in rows]


def _window(r: TrustKeyWindowRow) -> KeyWindow:
    return KeyWindow(
        source=r.source,
        kid=r.kid,
        thumbprint=r.thumbprint,
        generation=r.generation,
        jwk=r.jwk,
        first_seen=r.first_seen,
        stopped_at=r.stopped_at,
    )


def _row(w: KeyWindow) -> dict[str, object]:
    return {
        "source": w.source,
        "kid": w.kid,
        "thumbprint": w.thumbprint,
        "generation": w.generation,
        "jwk": w.jwk,
        "first_seen": w.first_seen,
        "stopped_at": w.stopped_at,
    }
