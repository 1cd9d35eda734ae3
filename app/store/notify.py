"""The notifier's reads and writes: which flag events are new (a cursor over flag ids and
over the audit log's reopen entries), the webhook delivery log, and what is due to be sent.

The notifier reads flags after ingest committed them; nothing here runs inside an ingest
transaction, so a slow or failing webhook can never hold up or roll back a capture.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlmodel import Session

from app.store.models import ActionRow, DeliveryRow, FlagRow, NotifyCursorRow

FLAGS = "flag"
REOPENS = "reopen"


@dataclass(frozen=True)
class FlagEvent:
    event: str  # opened | reopened
    flag: FlagRow


def _cursor(session: Session, name: str, start: int) -> int:
    # FOR UPDATE: with several workers, one at a time reads and moves a cursor (SQLite has
    # one writer anyway), so no event is queued twice.
    row = session.execute(
        select(NotifyCursorRow).where(NotifyCursorRow.name == name).with_for_update()
    ).scalar()
    if row is None:
        # A first start announces nothing from before it: only what happens from now on.
        session.add(NotifyCursorRow(name=name, value=start))
        session.flush()
        return start
    return int(row.value)


def _advance(session: Session, name: str, value: int) -> None:
    session.execute(update(NotifyCursorRow).where(NotifyCursorRow.name == name).values(value=value))


def new_events(session: Session, *, limit: int = 500) -> list[FlagEvent]:
    """Flags opened and flags reopened since the last call, oldest first, and move the
    cursors past them (call inside the transaction that also enqueues their deliveries)."""
    top_flag = session.execute(select(func.coalesce(func.max(FlagRow.id), 0))).scalar_one()
    top_action = session.execute(select(func.coalesce(func.max(ActionRow.id), 0))).scalar_one()
    after_flag = _cursor(session, FLAGS, int(top_flag))
    after_action = _cursor(session, REOPENS, int(top_action))
    opened = list(
        session.execute(
            select(FlagRow).where(FlagRow.id > after_flag).order_by(FlagRow.id).limit(limit)
        ).scalars()
    )
    reopens = session.execute(
        select(ActionRow.id, FlagRow)
        .join(FlagRow, FlagRow.id == ActionRow.flag_id)
        .where(ActionRow.id > after_action, ActionRow.action == "reopen")
        .order_by(ActionRow.id)
        .limit(limit)
    ).all()
    last_action = session.execute(
        select(func.max(ActionRow.id)).where(ActionRow.id > after_action)
    ).scalar_one()
    if opened:
        _advance(session, FLAGS, int(opened[-1].id or 0))
    if reopens:
        _advance(session, REOPENS, int(reopens[-1][0]))
    elif last_action is not None:
        _advance(session, REOPENS, int(last_action))
    events = [FlagEvent("opened", f) for f in opened]
    return events + [FlagEvent("reopened", f) for _, f in reopens]


def enqueue(
    session: Session, *, target: str, flag: FlagRow, event: str, body: str, now: int
) -> None:
    session.add(
        DeliveryRow(
            target=target,
            flag_id=int(flag.id or 0),
            event=event,
            severity=flag.severity,
            body=body,
            created_at=now,
            next_at=now,
        )
    )


def due(
    session: Session,
    *,
    now: int,
    target: str | None = None,
    exclude: list[str] | None = None,
    limit: int = 50,
) -> list[DeliveryRow]:
    """Pending deliveries whose time has come, oldest first: of one ``target``, or of every
    target but those ``exclude`` names."""
    query = select(DeliveryRow).where(DeliveryRow.status == "pending", DeliveryRow.next_at <= now)
    if target is not None:
        query = query.where(DeliveryRow.target == target)
    if exclude:
        query = query.where(DeliveryRow.target.not_in(exclude))  # type: ignore[attr-defined]
    query = query.order_by(DeliveryRow.next_at, DeliveryRow.id).limit(limit)
    return list(session.execute(query).scalars())


def claim(session: Session, *, delivery_id: int, now: int, lease: int) -> bool:
    """Take a due delivery for one sender: it is not due again for ``lease`` seconds (longer
    than a call may take, ``app.notify.worker``), so no other worker or instance sends it
    meanwhile. One UPDATE whose condition only one of them can meet: False when someone
    else took it first."""
    taken = session.execute(
        update(DeliveryRow)
        .where(
            DeliveryRow.id == delivery_id,
            DeliveryRow.status == "pending",
            DeliveryRow.next_at <= now,
        )
        .values(next_at=now + lease)
    )
    return bool(taken.rowcount)  # type: ignore[attr-defined]


def record_attempt(
    session: Session,
    *,
    delivery_id: int,
    now: int,
    response: int | None,
    error: str | None,
    delivered: bool,
    retry_at: int | None,
) -> None:
    """One attempt's outcome: delivered, due again at ``retry_at``, or (neither) failed."""
    status = "delivered" if delivered else "pending" if retry_at is not None else "failed"
    session.execute(
        update(DeliveryRow)
        .where(DeliveryRow.id == delivery_id)
        .values(
            attempts=DeliveryRow.attempts + 1,
            status=status,
            response=response,
            error=error,
            next_at=retry_at if retry_at is not None else now,
            delivered_at=now if delivered else None,
        )
    )


def deliveries(session: Session, *, limit: int = 100) -> list[DeliveryRow]:
    """The delivery log, newest first."""
    query = select(DeliveryRow).order_by(DeliveryRow.id.desc()).limit(limit)
    return list(session.execute(query).scalars())
