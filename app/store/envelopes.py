"""Envelope items and case ledgers as stored (docs/envelopes.md): the one place for their SQL.

Items are append-only evidence (``EnvelopeItemRow``). A case's ledger and flags are derived
again from all its items whenever one arrives, and when a handoff's acceptance window runs
out (``app.ingest.cases``: the ledger's rules are app.envelope's); this module reads the
items' rows and writes the case rows it is given.

Concurrency follows ``app.store.db.Locks``: a transaction that writes or derives a case
holds ``case_lock`` of it, and one that reads or writes items by context id holds
``context_lock``, because ``context-id-reuse`` compares cases.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, bindparam, or_, select
from sqlmodel import Session

from app.store.db import (
    Locks,
    insert_tuples,
    select_named,
    select_rows,
    upsert_many,
)
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


def case_lock(case_id: str | None) -> str:
    return "case:" + (case_id or UNKNOWN_CASE)


def context_lock(context_id: str) -> str:
    return "context:" + context_id


def store_items(session: Session, rows: Sequence[ItemRecord], *, held: set[str]) -> set[str]:
    """Insert the items not stored yet, in one statement (a repeated receipt is a no-op).
    Returns the keys of those that were new.

    ``held``: the stored keys of every case the rows name (``case_keys``, read by the
    caller, who holds those cases' locks): an item's key fixes its case, so a row's key is
    stored already exactly when it is among them, and no other writer can store one in
    between. The rest is written with the driver's ``executemany``
    (``insert_ignore_many``): through SQLAlchemy's INSERT .. RETURNING each row cost as
    much Python as SQLite takes to store it."""
    if not rows:
        return set()
    wanted = {r.key for r in rows}
    stored = wanted & held
    new = [r for r in rows if r.key not in stored]
    insert_tuples(session, EnvelopeItemRow, ItemRecord._fields, new, ignore=["key"])
    return wanted - stored


# Built once (app.store.db, "dialect-specific statements"). The columns the ledger reads of
# an item (``app.ingest.cases.item_of``); the octets stay in the table.
_T = EnvelopeItemRow.__table__.c  # type: ignore[attr-defined]
ITEM_COLUMNS = (
    "key", "digest", "kind", "source", "at", "case_id", "handoff_id", "agent", "to_agent",
    "epoch", "media_type", "context_id", "task_id", "action", "outcome", "detail",
    "envelope", "errors", "drift", "references", "text_bytes",
)  # fmt: skip
_ITEM_COLUMNS = tuple(_T[name] for name in ITEM_COLUMNS)
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
            found = select_rows(session, _CONTEXT_CASES, {"b_contexts": chunk})
            cases |= {c or UNKNOWN_CASE for (c,) in found}
    return cases


def case_due_conditions(now: int) -> list[ColumnElement[bool]]:
    """The conditions under which a case is due for ``sweep_cases`` at ``now``, one per
    index (``app.store.derive.anything_due`` probes each)."""
    return [CaseRow.deadline <= now, CaseRow.derived_at > now]


def _due(session: Session, now: int) -> list[str]:
    query = select(CaseRow.case_id).where(or_(*case_due_conditions(now)))
    return list(session.execute(query).scalars())


def case_item_rows(session: Session, case_ids: Sequence[str]) -> dict[str, list[Any]]:
    """The stored items' rows (``ITEM_COLUMNS``) of each case (``UNKNOWN_CASE``: those
    without one)."""
    found: dict[str, list[Any]] = {c: [] for c in case_ids}
    named = [c for c in found if c != UNKNOWN_CASE]
    for chunk in _chunks(named):
        for row in select_named(session, _CASES_ITEMS, {"b_cases": chunk}):
            found[row.case_id].append(row)
    if UNKNOWN_CASE in found:
        found[UNKNOWN_CASE] = select_named(session, _UNKNOWN_ITEMS)
    return found


def case_keys(session: Session, case_ids: Sequence[str]) -> list[tuple[str, str | None]]:
    """(key, case id) of every stored item of these cases."""
    keys: list[tuple[str, str | None]] = []
    named = [c for c in case_ids if c != UNKNOWN_CASE]
    for chunk in _chunks(named):
        keys += [(k, c) for k, c in select_rows(session, _CASES_KEYS, {"b_cases": chunk})]
    if UNKNOWN_CASE in case_ids:
        keys += [(k, c) for k, c in select_rows(session, _UNKNOWN_KEYS)]
    return keys


def item_rows(session: Session, keys: Iterable[str]) -> list[Any]:
    """The stored items' rows (``ITEM_COLUMNS``) of these keys."""
    found: list[Any] = []
    for chunk in _chunks(keys):
        found += select_named(session, _ITEMS_BY_KEY, {"b_keys": chunk})
    return found


def context_rows(session: Session, contexts: set[str]) -> list[Any]:
    """(key, digest, kind, at, context_id, to_agent) of the messages presenting one of
    ``contexts`` to a receiver."""
    found: list[Any] = []
    for chunk in _chunks(contexts):
        found += select_rows(session, _CONTEXT_ITEMS, {"b_contexts": chunk})
    return found


def write_cases(session: Session, cases: Sequence[dict[str, object]]) -> None:
    """Store the derived case rows (``CaseRow``), replacing what was there."""
    upsert_many(session, CaseRow, cases, ["case_id"])


def due_cases(session: Session, now: int) -> list[str]:
    """The cases due for the sweep at ``now`` (``case_due_conditions``)."""
    return _due(session, now)
