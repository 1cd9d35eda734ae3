"""Envelope items and case ledgers as stored (docs/envelopes.md): the one place for their SQL.

Items are append-only evidence (``EnvelopeItemRow``). A case's ledger and flags are derived
again from all its items whenever one arrives (``derive_cases``), and when a handoff's
acceptance window runs out (``sweep_cases``, run by the service's sweep like the hops'),
so they depend on the set of stored items and the clock, never on ingest order.

Concurrency follows ``app.store.db.Locks``: a transaction that writes or derives a case
holds ``case_lock`` of it, and one that reads or writes items by context id holds
``context_lock``, because ``context-id-reuse`` compares cases.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import ColumnElement, or_, select
from sqlmodel import Session

from app.envelope.ledger import CaseRules, Item, Ledger, derive_ledger, first_receivers
from app.store.db import Locks, insert_ignore_many_new, upsert
from app.store.flags import sync_case_flags
from app.store.models import CaseRow, EnvelopeItemRow

UNKNOWN_CASE = ""  # the flag table's case_id for items whose case could not be read


def case_lock(case_id: str | None) -> str:
    return "case:" + (case_id or UNKNOWN_CASE)


def context_lock(context_id: str) -> str:
    return "context:" + context_id


def store_items(session: Session, rows: Sequence[EnvelopeItemRow]) -> int:
    """Insert the items not stored yet (a repeated receipt is a no-op). Returns how many
    were new."""
    return insert_ignore_many_new(session, EnvelopeItemRow, [r.model_dump() for r in rows], ["key"])


def affected_cases(session: Session, rows: Sequence[EnvelopeItemRow], *, locks: Locks) -> set[str]:
    """The cases whose ledger these items may change: their own, and every case with a
    message presenting the same context id to a receiver (the context's first receiver may
    have changed; see ``app.envelope.ledger.first_receivers``). Raises NeedLocks."""
    cases = {r.case_id or UNKNOWN_CASE for r in rows}
    contexts = {r.context_id for r in rows if _presents_context(r)}
    if contexts:
        locks.need(context_lock(c) for c in contexts)
        query = select(EnvelopeItemRow.case_id).where(
            EnvelopeItemRow.context_id.in_(contexts), EnvelopeItemRow.to_agent.is_not(None)
        )
        cases |= {c or UNKNOWN_CASE for c in session.execute(query.distinct()).scalars()}
    return cases


def _presents_context(row: EnvelopeItemRow) -> bool:
    # Only a message with a known receiver presents its context id to someone; an
    # acceptance's context id is its sender's own.
    return bool(row.context_id and row.to_agent)


def derive_cases(
    session: Session, case_ids: Iterable[str], *, now: int, rules: CaseRules, locks: Locks
) -> None:
    """Derive each case's ledger at clock ``now`` and store it with its flags. Raises
    NeedLocks when another transaction holds one of the cases."""
    case_ids = sorted(set(case_ids))
    locks.need(case_lock(c) for c in case_ids)
    for case_id in case_ids:
        ledger = case_ledger(session, case_id, now=now, rules=rules)
        sync_case_flags(session, case_id, ledger.flags, now=now)
        if case_id != UNKNOWN_CASE:
            upsert(session, CaseRow, _case_values(ledger, case_id, now), ["case_id"])


def case_ledger(session: Session, case_id: str, *, now: int, rules: CaseRules) -> Ledger:
    """The pure ledger of one case over its stored items."""
    items = case_items(session, case_id)
    contexts = {i.context_id for i in items if i.context_id and i.to_agent}
    return derive_ledger(
        case_id or None,
        items,
        now=now,
        rules=rules,
        contexts=first_receivers(_items_with_contexts(session, contexts)),
    )


def case_items(session: Session, case_id: str) -> list[Item]:
    where = (
        EnvelopeItemRow.case_id.is_(None)
        if case_id == UNKNOWN_CASE
        else EnvelopeItemRow.case_id == case_id
    )
    rows = session.execute(select(EnvelopeItemRow).where(where)).scalars()
    return [item_of(r) for r in rows]


def _items_with_contexts(session: Session, contexts: set[str]) -> list[Item]:
    if not contexts:
        return []
    query = select(EnvelopeItemRow).where(
        EnvelopeItemRow.context_id.in_(contexts), EnvelopeItemRow.to_agent.is_not(None)
    )
    return [item_of(r) for r in session.execute(query).scalars()]


def item_of(row: EnvelopeItemRow) -> Item:
    return Item(
        key=row.key,
        digest=row.digest,
        kind=row.kind,
        source=row.source,
        at=row.at,
        case_id=row.case_id,
        handoff_id=row.handoff_id,
        agent=row.agent,
        to_agent=row.to_agent,
        epoch=row.epoch,
        media_type=row.media_type,
        context_id=row.context_id,
        task_id=row.task_id,
        action=row.action,
        outcome=row.outcome,
        detail=row.detail,
        envelope=row.envelope,
        errors=tuple(row.errors),
        drift=tuple(row.drift),
        references=tuple(row.references),
        text_bytes=row.text_bytes,
    )


def _case_values(ledger: Ledger, case_id: str, now: int) -> dict[str, object]:
    return {
        "case_id": case_id,
        "owner": ledger.owner,
        "epoch": ledger.epoch,
        "handoffs": ledger.handoffs,
        "last_at": ledger.last_at,
        "deadline": ledger.deadline,
        "derived_at": now,
    }


def sweep_cases(session: Session, *, now: int, rules: CaseRules) -> int:
    """Apply the clock to the cases whose acceptance window ran out by ``now`` (or that
    were derived for a later clock). Returns how many were derived again."""
    due = _due(session, now)
    if not due:
        return 0
    locks = Locks(session, [case_lock(c) for c in due])
    # Again, now that no writer of these cases is at work (cases due meanwhile wait for the
    # next sweep).
    due = [c for c in _due(session, now) if case_lock(c) in locks.held or not locks.active]
    derive_cases(session, due, now=now, rules=rules, locks=locks)
    return len(due)


def case_due_conditions(now: int) -> list[ColumnElement[bool]]:
    """The conditions under which a case is due for ``sweep_cases`` at ``now``, one per
    index (``app.store.derive.anything_due`` probes each)."""
    return [CaseRow.deadline <= now, CaseRow.derived_at > now]


def _due(session: Session, now: int) -> list[str]:
    query = select(CaseRow.case_id).where(or_(*case_due_conditions(now)))
    return list(session.execute(query).scalars())
