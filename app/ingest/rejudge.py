"""Judging the store again when the trust file changes (issue 15, item 4).

When an instance loads a trust store it has not judged under before, the elements refused
``untrusted-key`` or ``bad-signature`` may now verify (a key was rolled out), and elements
that verified may now be refused (a key was withdrawn). The store is judged again with
``rederive``'s machinery (``app.ingest.rederive``): every receipt replayed through the one
pipeline under the new trust in a scratch store, and the derived state replaced, so the
result is what ingesting everything under the new trust gives. Signed octets and refused
octets are never touched: an element now refused stays stored as evidence.

Before the replacement, every open ``rejected-element`` flag for those two reasons gets an
audit entry naming the change of trust; so a flag that no longer holds afterwards is
resolved with that entry and "the condition no longer holds" in its audit log, rather than
deleted without a trace, and one that still holds keeps the note.

An instance that starts with a trust file the store was never judged under, while the
store holds such rejections made under another one, judges it again too (a restart after
a key rollout). Instances share one store, so one of them does the work: the first to
claim the trust store's fingerprint in ``trust_rejudge``; the others find the claim and
only swap their trust store. A re-judgement that fails gives its claim up, so the next
check tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from handoff_context.lifecycle import FlagKind
from sqlalchemy import Engine, delete, func, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from app.ingest.pipeline import Pipeline
from app.ingest.rederive import rederive
from app.store import db
from app.store.flags import SYSTEM
from app.store.models import ActionRow, FlagRow, TrustRejudgeRow, VerdictRow
from app.store.transfer import TransferError

log = logging.getLogger("handoff_trace.trust")
# The rejections a change of trust can turn around (SPEC 4).
TRUST_REASONS = ("untrusted-key", "bad-signature")


@dataclass(frozen=True)
class Rejudged:
    trust: str
    judged: int  # receipts replayed under the new trust
    closed: int  # rejected-element flags resolved because they no longer hold


def judged_under_other_trust(engine: Engine, *, trust: str) -> str | None:
    """The fingerprint of an earlier trust store that refused a stored element for a reason
    a change of keys can turn around, when the store was never judged under ``trust`` (an
    instance restarted with a new file); None otherwise."""
    with db.transaction(db.read_only(engine)) as session:
        if session.get(TrustRejudgeRow, trust) is not None:
            return None
        query = (
            select(VerdictRow.trust)
            .where(VerdictRow.trust != trust, VerdictRow.fault.in_(TRUST_REASONS))  # type: ignore[union-attr]
            .limit(1)
        )
        return session.execute(query).scalars().first()


def claim(engine: Engine, *, trust: str, now: int) -> bool:
    """True when this instance is the first to judge under ``trust``."""
    row = {"trust": trust, "started_at": now, "judged": 0, "closed": 0}
    return db.run(engine, lambda s: db.insert_ignore(s, TrustRejudgeRow, row, ["trust"]))


def rejudge(
    engine: Engine,
    pipeline_for: Callable[[Engine], Pipeline],
    *,
    old: str,
    new: str,
    now: int,
    scratch_dir: Path | None = None,
) -> Rejudged | None:
    """Judge the store again under the trust store ``pipeline_for`` builds (fingerprint
    ``new``), unless another instance claimed it first (None). Never raises for a failure:
    it is logged, and the claim is given up for a later try."""
    if not claim(engine, trust=new, now=now):
        return None
    try:
        noted = db.run(engine, lambda s: _note_flags(s, old=old, new=new, now=now))
        done = rederive(engine, pipeline_for, now=now, dry_run=False, scratch_dir=scratch_dir)
        closed = db.run(engine, lambda s: _closed(s, noted))
    except (SQLAlchemyError, TransferError, OSError) as exc:
        log.error("judging the store again under trust %s failed: %s", new[:12], exc)
        db.run(
            engine, lambda s: s.execute(delete(TrustRejudgeRow).where(TrustRejudgeRow.trust == new))
        )
        return None
    result = Rejudged(trust=new, judged=done.replayed.receipts, closed=closed)
    db.run(engine, lambda s: _record(s, result))
    log.info(
        "judged %d receipts again under trust %s; %d flags closed",
        result.judged,
        new[:12],
        result.closed,
        extra={"trust": new, "judged": result.judged, "closed": result.closed},
    )
    return result


def _note_flags(session: Session, *, old: str, new: str, now: int) -> list[int]:
    """An audit entry on every open flag the change may close; their ids."""
    ids = list(
        session.execute(
            select(FlagRow.id).where(
                FlagRow.kind == FlagKind.REJECTED_ELEMENT.value,
                FlagRow.variant.in_(TRUST_REASONS),  # type: ignore[union-attr]
                FlagRow.status != "resolved",
            )
        ).scalars()
    )
    note = f"the trust file changed (fingerprint {old[:12]} -> {new[:12]}): judged again"
    if ids:
        session.execute(
            insert(ActionRow),
            [
                {"flag_id": i, "actor": SYSTEM, "at": now, "action": "rejudge", "note": note}
                for i in ids
            ],
        )
    return [i for i in ids if i is not None]


def _closed(session: Session, noted: list[int]) -> int:
    if not noted:
        return 0
    query = select(func.count()).where(FlagRow.id.in_(noted), FlagRow.status == "resolved")  # type: ignore[union-attr]
    return int(session.execute(query).scalar_one())


def _record(session: Session, result: Rejudged) -> None:
    session.execute(
        update(TrustRejudgeRow)
        .where(TrustRejudgeRow.trust == result.trust)
        .values(judged=result.judged, closed=result.closed)
    )
