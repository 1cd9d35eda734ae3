"""Writing what ingest learned: observations, verdicts, ref outcomes; and finding the stored
observations that a newly known offer lets us judge again.

A verdict row keeps two judgements of its observation (see ``VerdictRow``): the SPEC 11
verdict as reported, and ``Judgement``, the same observation judged against an empty replay
memory, which is what hop states and flags are derived from.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlmodel import Session

from app.carriers import Carried
from app.protocol.errors import Reason
from app.protocol.model import Form
from app.protocol.verdict import Outcome, Result, Verdict
from app.protocol.verify import Context

from .db import Locks, digest_lock
from .models import ElementRow, LinkRow, ObservationRow, RefOutcomeRow, VerdictRow

# SPEC 6.4: the replay memory holds what passed checks 1-3.
_REMEMBERED_AFTER = ("signature", "audience", "freshness")


@dataclass(frozen=True, slots=True)
class Judgement:
    """An observation judged as if it were the first ever seen (replay aside)."""

    remembered: bool  # an offer that passed checks 1-3 (SPEC 6.4)
    valid: bool  # every check passed
    fault: str | None  # the reason it failed; None when valid or still pending

    @classmethod
    def of(cls, verdict: Verdict) -> Judgement:
        """Read a judgement off a verdict made with an empty replay memory."""
        results = {c.check: c.result for c in verdict.checks}
        remembered = verdict.element == "offer" and all(
            results.get(name) in (Result.PASS, Result.NOT_CHECKED) for name in _REMEMBERED_AFTER
        )
        valid = verdict.outcome is Outcome.ACCEPT
        fault = verdict.reason.value if verdict.reason is not None else None
        return cls(remembered=remembered, valid=valid, fault=None if valid else fault)


def depends_on_replay(verdict: Verdict) -> bool:
    """True when the verdict says more about the memory than about the element."""
    return verdict.outcome is Outcome.DUPLICATE or verdict.reason is Reason.EQUIVOCATION


def add_observation(
    session: Session,
    *,
    digest: bytes,
    ctx: Context,
    source: str,
    now: int,
    item: Carried | None = None,
    via: bytes | None = None,
) -> int:
    """Record one receipt of a stored element; ``ctx`` is what it was judged against."""
    values: dict[str, Any] = {
        "digest": digest,
        "received_at": ctx.now,
        "received_by": ctx.receiver,
        "dialog": ctx.dialog,
        "source": source,
        "via": via,
        "ingested_at": now,
    }
    if item is not None:
        values.update(
            carrier=item.carrier.value,
            role=item.role.value,
            task_id=item.task_id,
            task_state=item.task_state,
        )
    result = session.execute(
        ObservationRow.__table__.insert().values(**values).returning(ObservationRow.id)
    )
    return int(result.scalar_one())


def _verdict_values(verdict: Verdict, judgement: Judgement, trust: str, now: int) -> dict[str, Any]:
    assert verdict.digest is not None and verdict.element is not None
    equivocation = verdict.equivocation
    return {
        "digest": verdict.digest,
        "element": verdict.element,
        "outcome": verdict.outcome.value,
        "reason": None if verdict.reason is None else verdict.reason.value,
        "detail": verdict.detail,
        "checks": [c.to_json() for c in verdict.checks],
        "chain": None if verdict.chain is None else verdict.chain.to_json(),
        "equivocation_first": None if equivocation is None else equivocation.first,
        "equivocation_variant": None if equivocation is None else equivocation.variant.value,
        "trust": trust,
        "remembered": judgement.remembered,
        "valid": judgement.valid,
        "fault": judgement.fault,
        "judged_at": now,
    }


def add_verdict(
    session: Session,
    *,
    observation_id: int,
    verdict: Verdict,
    judgement: Judgement,
    trust: str,
    now: int,
) -> int:
    values = _verdict_values(verdict, judgement, trust, now)
    result = session.execute(
        VerdictRow.__table__.insert()
        .values(observation_id=observation_id, **values)
        .returning(VerdictRow.id)
    )
    verdict_id = int(result.scalar_one())
    _write_refs(session, verdict_id, verdict)
    return verdict_id


def update_verdict(
    session: Session,
    verdict_id: int,
    *,
    verdict: Verdict,
    judgement: Judgement,
    trust: str,
    now: int,
) -> None:
    """Replace a verdict judged again (a pending status, a chain completed later)."""
    values = _verdict_values(verdict, judgement, trust, now)
    session.execute(update(VerdictRow).where(VerdictRow.id == verdict_id).values(**values))
    session.execute(delete(RefOutcomeRow).where(RefOutcomeRow.verdict_id == verdict_id))
    _write_refs(session, verdict_id, verdict)


def update_judgement(
    session: Session, verdict_id: int, *, judgement: Judgement, trust: str, now: int
) -> None:
    """Keep the reported verdict (a duplicate stays a duplicate); refresh the judgement."""
    session.execute(
        update(VerdictRow)
        .where(VerdictRow.id == verdict_id)
        .values(
            remembered=judgement.remembered,
            valid=judgement.valid,
            fault=judgement.fault,
            trust=trust,
            judged_at=now,
        )
    )


def _write_refs(session: Session, verdict_id: int, verdict: Verdict) -> None:
    rows = [
        {
            "verdict_id": verdict_id,
            "index": r.index,
            "kind": r.kind,
            "outcome": r.outcome.value,
            "detail": r.detail,
        }
        for r in verdict.refs
    ]
    if rows:
        session.execute(RefOutcomeRow.__table__.insert(), rows)


# --- judging again ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Observed:
    """A stored observation with what it takes to judge it again."""

    verdict_id: int
    observation_id: int
    source: str
    ctx: Context
    octets: bytes
    form: Form
    outcome: str  # as reported
    reason: str | None


def _observed(rows: Iterable[Any]) -> list[Observed]:
    return [
        Observed(
            verdict_id=r.verdict_id,
            observation_id=r.observation_id,
            source=r.source,
            ctx=Context(now=r.received_at, receiver=r.received_by, dialog=r.dialog),
            octets=r.octets,
            form=Form(r.form),
            outcome=r.outcome,
            reason=r.reason,
        )
        for r in rows
    ]


def _observed_query() -> Any:
    return (
        select(
            VerdictRow.id.label("verdict_id"),
            ObservationRow.id.label("observation_id"),
            ObservationRow.source,
            ObservationRow.received_at,
            ObservationRow.received_by,
            ObservationRow.dialog,
            ElementRow.octets,
            ElementRow.form,
            VerdictRow.outcome,
            VerdictRow.reason,
        )
        .join(ObservationRow, ObservationRow.id == VerdictRow.observation_id)
        .join(ElementRow, ElementRow.digest == VerdictRow.digest)
        .order_by(ObservationRow.id)
    )


def pending_statuses(session: Session, offers: Collection[bytes]) -> list[Observed]:
    """Observations of statuses naming one of ``offers`` that are still pending."""
    if not offers:
        return []
    query = _observed_query().where(
        VerdictRow.outcome == Outcome.PENDING.value,
        ElementRow.type == "status",
        ElementRow.offer.in_(offers),
    )
    return _observed(session.execute(query))


def children(session: Session, offers: Collection[bytes]) -> list[bytes]:
    """Stored offers whose ``prev`` names one of ``offers``."""
    if not offers:
        return []
    query = select(LinkRow.offer).where(LinkRow.prev.in_(offers)).order_by(LinkRow.offer)
    return list(session.execute(query).scalars())


def offers_judged_without_chain(session: Session, offers: Collection[bytes]) -> list[Observed]:
    """Observations of ``offers`` that carried no chain (or an empty one): their chain was
    built from stored elements, and can be completed now that more of them are known."""
    if not offers:
        return []
    query = _observed_query().where(VerdictRow.digest.in_(offers))
    found = []
    for row in session.execute(query.add_columns(VerdictRow.chain)):
        chain = row.chain
        if chain is None or not chain.get("carried") or chain.get("length") == 1:
            found.append(row)
    return _observed(found)


def stored_ancestors(
    session: Session, prev: bytes, *, form: Form, limit: int, locks: Locks
) -> list[bytes]:
    """The stored offers up the chain from ``prev``, oldest first, at most ``limit``: the
    chain a receiver holding them can check (SPEC 7, last rule). Only elements of
    ``form`` qualify, as in a carried chain (SPEC 1.4)."""
    found: list[bytes] = []
    digest: bytes | None = prev
    while digest is not None and len(found) < limit:
        locks.need([digest_lock(digest)])
        row = session.execute(
            select(ElementRow.octets, ElementRow.form, LinkRow.prev)
            .outerjoin(LinkRow, LinkRow.offer == ElementRow.digest)
            .where(ElementRow.digest == digest, ElementRow.type == "offer")
        ).first()
        if row is None or row.form != form.value:
            break
        found.append(row.octets)
        digest = row.prev
    found.reverse()
    return found
