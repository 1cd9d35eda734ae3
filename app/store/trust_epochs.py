"""Which trust stores the store was judged under again (``app.ingest.rejudge``), and the
flags a change of trust may close: every SQL statement trust rotation needs.

``trust_rejudge`` holds one row per trust store (by fingerprint) under which the store was
judged again; the first instance to insert it does the work, so three instances that see a
new trust file together judge the store once.
"""

from __future__ import annotations

from sqlalchemy import Engine, delete, func, insert, select, update
from sqlmodel import Session

from app.store import db
from app.store.flags import SYSTEM
from app.store.models import ActionRow, FlagRow, TrustRejudgeRow, VerdictRow

REJECTED_ELEMENT = "rejected-element"


def judged_under_other_trust(engine: Engine, *, trust: str, reasons: tuple[str, ...]) -> str | None:
    """The fingerprint of an earlier trust store that refused a stored element for one of
    ``reasons``, when the store was never judged again under ``trust``; None otherwise."""
    with db.transaction(db.read_only(engine)) as session:
        if session.get(TrustRejudgeRow, trust) is not None:
            return None
        query = (
            select(VerdictRow.trust)
            .where(VerdictRow.trust != trust, VerdictRow.fault.in_(reasons))  # type: ignore[union-attr]
            .limit(1)
        )
        return session.execute(query).scalars().first()


def claim(engine: Engine, *, trust: str, now: int) -> bool:
    """True when this call is the first to claim judging the store under ``trust``."""
    row = {"trust": trust, "started_at": now, "judged": 0, "closed": 0}
    return db.run(engine, lambda s: db.insert_ignore(s, TrustRejudgeRow, row, ["trust"]))


def give_up(engine: Engine, *, trust: str) -> None:
    """Withdraw a claim whose work failed, so that a later check tries again."""
    db.run(
        engine, lambda s: s.execute(delete(TrustRejudgeRow).where(TrustRejudgeRow.trust == trust))
    )


def note_flags(engine: Engine, *, reasons: tuple[str, ...], note: str, now: int) -> list[int]:
    """An audit entry ``rejudge`` with ``note`` on every unresolved ``rejected-element``
    flag for one of ``reasons``; their ids."""

    def work(session: Session) -> list[int]:
        ids = [
            i
            for i in session.execute(
                select(FlagRow.id).where(
                    FlagRow.kind == REJECTED_ELEMENT,
                    FlagRow.variant.in_(reasons),  # type: ignore[union-attr]
                    FlagRow.status != "resolved",
                )
            ).scalars()
            if i is not None
        ]
        if ids:
            rows = [
                {"flag_id": i, "actor": SYSTEM, "at": now, "action": "rejudge", "note": note}
                for i in ids
            ]
            session.execute(insert(ActionRow), rows)
        return ids

    return db.run(engine, work)


def resolved_among(engine: Engine, ids: list[int]) -> int:
    """How many of these flags are resolved now."""
    if not ids:
        return 0
    with db.transaction(db.read_only(engine)) as session:
        query = select(func.count()).where(
            FlagRow.id.in_(ids),  # type: ignore[union-attr]
            FlagRow.status == "resolved",
        )
        return int(session.execute(query).scalar_one())


def record(engine: Engine, *, trust: str, judged: int, closed: int) -> None:
    db.run(
        engine,
        lambda s: s.execute(
            update(TrustRejudgeRow)
            .where(TrustRejudgeRow.trust == trust)
            .values(judged=judged, closed=closed)
        ),
    )
