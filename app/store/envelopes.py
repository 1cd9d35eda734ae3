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

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import fields
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, bindparam, or_, select
from sqlmodel import Session

from app.envelope.ledger import CaseRules, Item, Ledger, derive_ledger, first_receivers
from app.store.db import Locks, execute, insert_ignore_many_keys, upsert_many
from app.store.flags import sync_cases_flags
from app.store.models import CaseRow, EnvelopeItemRow

UNKNOWN_CASE = ""  # the flag table's case_id for items whose case could not be read
# Values per IN list: far below SQLite's limit on bound parameters (32,766).
_CHUNK = 500


class ItemRecord(NamedTuple):
    """One envelope item's row as ingest stores it (``EnvelopeItemRow``'s columns). A
    plain tuple: building a mapped row object per item cost more than storing it."""

    key: str
    digest: bytes
    octets: bytes
    format: str
    source: str
    kind: str
    case_id: str | None
    handoff_id: str | None
    agent: str | None
    to_agent: str | None
    epoch: int | None
    at: int
    received_by: str | None
    media_type: str | None
    message_id: str | None
    context_id: str | None
    task_id: str | None
    action: str | None
    outcome: str | None
    detail: str | None
    envelope: dict[str, Any] | None
    errors: list[str]
    drift: list[str]
    references: list[dict[str, Any]]
    text_bytes: int
    ingested_at: int


class KnownItems:
    """Stored items already read, by key, kept across the transactions of one ingest: a
    stored item never changes and is never deleted, so it is read and decoded once, and
    each later ledger of its case reads only which keys the case holds now (another writer
    may have added some). Only items read in a transaction that committed are kept
    (``remember``), and at most ``limit`` (then it starts again), so memory stays bounded."""

    def __init__(self, limit: int = 8192) -> None:
        self.limit = limit
        self.items: dict[str, Item] = {}

    def remember(self, items: Mapping[str, Item]) -> None:
        if len(self.items) + len(items) > self.limit:
            self.items.clear()
        self.items.update(items)


def case_lock(case_id: str | None) -> str:
    return "case:" + (case_id or UNKNOWN_CASE)


def context_lock(context_id: str) -> str:
    return "context:" + context_id


def store_items(session: Session, rows: Sequence[ItemRecord]) -> set[str]:
    """Insert the items not stored yet, in one statement (a repeated receipt is a no-op).
    Returns the keys of those that were new."""
    values = [r._asdict() for r in rows]
    return insert_ignore_many_keys(session, EnvelopeItemRow, values, ["key"])


def stored_as(rows: Sequence[ItemRecord], new: set[str]) -> dict[str, Item]:
    """The ledger's items of the rows just stored (``new``: their keys), as reading them
    back would give them, by key: only rows of a JSON payload, whose JSON columns read
    back equal (a CBOR payload's may not: its map keys need not be strings), and only
    rows this transaction inserted (another receipt of the same key may have been stored
    first, from another source). Of two rows with one key, the first is the one stored."""
    kept: dict[str, Item] = {}
    for r in rows:
        if r.key in new and r.format == "json" and r.key not in kept:
            kept[r.key] = item_of(r)
    return kept


# Built once (app.store.db, "dialect-specific statements"). The ledger's columns in the
# order of ``Item``'s fields; the octets stay in the table.
_T = EnvelopeItemRow.__table__.c  # type: ignore[attr-defined]
_ITEM_COLUMNS = tuple(_T[f.name] for f in fields(Item))
_CASES_ITEMS = select(*_ITEM_COLUMNS).where(_T.case_id.in_(bindparam("b_cases", expanding=True)))
_UNKNOWN_ITEMS = select(*_ITEM_COLUMNS).where(_T.case_id.is_(None))
_CASES_KEYS = select(_T.key, _T.case_id).where(_T.case_id.in_(bindparam("b_cases", expanding=True)))
_UNKNOWN_KEYS = select(_T.key, _T.case_id).where(_T.case_id.is_(None))
_ITEMS_BY_KEY = select(*_ITEM_COLUMNS).where(_T.key.in_(bindparam("b_keys", expanding=True)))
_CONTEXT_COLUMNS = (_T.key, _T.digest, _T.kind, _T.at, _T.context_id, _T.to_agent)
# Only a message with a known receiver presents its context id to someone; an
# acceptance's context id is its sender's own.
_IN_CONTEXTS = (
    _T.context_id.in_(bindparam("b_contexts", expanding=True)),
    _T.to_agent.is_not(None),
)
_CONTEXT_CASES = select(_T.case_id).where(*_IN_CONTEXTS).distinct()
_CONTEXT_ITEMS = select(*_CONTEXT_COLUMNS).where(*_IN_CONTEXTS)


def _chunks(values: Iterable[str]) -> Iterator[list[str]]:
    ordered = sorted(values)
    for start in range(0, len(ordered), _CHUNK):
        yield ordered[start : start + _CHUNK]


def affected_cases(session: Session, rows: Sequence[ItemRecord], *, locks: Locks) -> set[str]:
    """The cases whose ledger these items may change: their own, and every case with a
    message presenting the same context id to a receiver (the context's first receiver may
    have changed; see ``app.envelope.ledger.first_receivers``). Raises NeedLocks."""
    cases = {r.case_id or UNKNOWN_CASE for r in rows}
    contexts = {r.context_id for r in rows if r.context_id and r.to_agent}
    if contexts:
        locks.need(context_lock(c) for c in contexts)
        for chunk in _chunks(contexts):
            found = execute(session, _CONTEXT_CASES, {"b_contexts": chunk}).scalars()
            cases |= {c or UNKNOWN_CASE for c in found}
    return cases


def derive_cases(
    session: Session,
    case_ids: Iterable[str],
    *,
    now: int,
    rules: CaseRules,
    locks: Locks,
    known: KnownItems | None = None,
    fresh: Mapping[str, Item] | None = None,
) -> dict[str, Item]:
    """Derive each case's ledger at clock ``now`` and store it with its flags, for all the
    cases at once: their items in one query (two with ``known``: the keys, then the items
    not known yet), the first receivers of their context ids in another, their flags and
    case rows written with one statement per kind of change. ``fresh``: items this
    transaction stored, which need no reading (``stored_as``). Returns the items used that
    ``known`` lacked, for ``KnownItems.remember`` once the transaction has committed.
    Raises NeedLocks when another transaction holds one of the cases."""
    case_ids = sorted(set(case_ids))
    locks.need(case_lock(c) for c in case_ids)
    read: dict[str, Item] = dict(fresh or {})
    ledgers = case_ledgers(session, case_ids, now=now, rules=rules, known=known, read=read)
    sync_cases_flags(session, {c: ledgers[c].flags for c in case_ids}, now=now)
    cases = [_case_values(ledgers[c], c, now) for c in case_ids if c != UNKNOWN_CASE]
    upsert_many(session, CaseRow, cases, ["case_id"])
    return read


def case_ledgers(
    session: Session,
    case_ids: Sequence[str],
    *,
    now: int,
    rules: CaseRules,
    known: KnownItems | None = None,
    read: dict[str, Item] | None = None,
) -> dict[str, Ledger]:
    """The pure ledgers of these cases over their stored items (each one exactly what
    ``derive_ledger`` gives for the case alone: the first receivers of the context ids
    it does not present are never looked up). ``known``, ``read``: see
    ``derive_cases``."""
    if known is None:
        items = cases_items(session, case_ids)
    else:
        items = _cases_items_known(session, case_ids, known, {} if read is None else read)
    contexts = {
        i.context_id for found in items.values() for i in found if i.context_id and i.to_agent
    }
    receivers = first_receivers(_items_with_contexts(session, contexts))
    return {
        c: derive_ledger(c or None, items[c], now=now, rules=rules, contexts=receivers)
        for c in case_ids
    }


def case_ledger(session: Session, case_id: str, *, now: int, rules: CaseRules) -> Ledger:
    """The pure ledger of one case over its stored items."""
    return case_ledgers(session, [case_id], now=now, rules=rules)[case_id]


def case_items(session: Session, case_id: str) -> list[Item]:
    return cases_items(session, [case_id])[case_id]


def cases_items(session: Session, case_ids: Sequence[str]) -> dict[str, list[Item]]:
    """The stored items of each case (``UNKNOWN_CASE``: those without one)."""
    found: dict[str, list[Item]] = {c: [] for c in case_ids}
    named = [c for c in found if c != UNKNOWN_CASE]
    for chunk in _chunks(named):
        for row in execute(session, _CASES_ITEMS, {"b_cases": chunk}):
            found[row.case_id].append(item_of(row))
    if UNKNOWN_CASE in found:
        found[UNKNOWN_CASE] = [item_of(r) for r in execute(session, _UNKNOWN_ITEMS)]
    return found


def _cases_items_known(
    session: Session, case_ids: Sequence[str], known: KnownItems, read: dict[str, Item]
) -> dict[str, list[Item]]:
    keys: list[tuple[str, str | None]] = []
    named = [c for c in case_ids if c != UNKNOWN_CASE]
    for chunk in _chunks(named):
        keys += [(k, c) for k, c in execute(session, _CASES_KEYS, {"b_cases": chunk})]
    if UNKNOWN_CASE in case_ids:
        keys += [(k, c) for k, c in execute(session, _UNKNOWN_KEYS)]
    missing = [key for key, _ in keys if key not in known.items and key not in read]
    for chunk in _chunks(missing):
        read.update((r.key, item_of(r)) for r in execute(session, _ITEMS_BY_KEY, {"b_keys": chunk}))
    found: dict[str, list[Item]] = {c: [] for c in case_ids}
    for key, case_id in keys:
        found[case_id or UNKNOWN_CASE].append(known.items.get(key) or read[key])
    return found


def _items_with_contexts(session: Session, contexts: set[str]) -> list[Item]:
    # What ``first_receivers`` reads of an item, nothing more.
    found = []
    for chunk in _chunks(contexts):
        for key, digest, kind, at, context, to in execute(
            session, _CONTEXT_ITEMS, {"b_contexts": chunk}
        ):
            found.append(Item(key, digest, kind, "", at, context_id=context, to_agent=to))
    return found


def item_of(row: Any) -> Item:
    """The ledger's item of a stored row (an ``ItemRecord``, or a row of the item columns)."""
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
