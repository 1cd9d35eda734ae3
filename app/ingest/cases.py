"""Envelope case ledgers over the store (docs/envelopes.md): the ledger's rules
(``app.envelope.ledger``) applied to the items ``app.store.envelopes`` reads.

A case's ledger and flags are derived again from all its items whenever one arrives
(``derive_cases``), and when a handoff's acceptance window runs out (``sweep_cases``, run by
the sweep like the hops'), so they depend on the set of stored items and the clock, never
on ingest order. ``case_detail`` derives the ownership timeline again for the dashboard and
the API (cheap for one case, and never stale), and reads the case's flags as stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from app.envelope.extract import ItemKind
from app.envelope.ledger import (
    CaseEvent,
    CaseRules,
    Epoch,
    Item,
    Ledger,
    derive_ledger,
    first_receivers,
)
from app.store.cases import case_flags, case_stored
from app.store.db import Locks
from app.store.envelopes import (
    UNKNOWN_CASE,
    ItemRecord,
    case_item_rows,
    case_keys,
    case_lock,
    context_rows,
    due_cases,
    item_rows,
    write_cases,
)
from app.store.flags import sync_cases_flags
from app.store.models import FlagRow

# Epoch, CaseEvent: the timeline's bands and markers, as the pure ledger derives them.
__all__ = [
    "CaseDetail",
    "CaseEvent",
    "Envelope",
    "Epoch",
    "Fact",
    "KnownItems",
    "Reference",
    "case_detail",
    "case_items",
    "case_ledger",
    "case_ledgers",
    "cases_items",
    "derive_cases",
    "item_of",
    "stored_as",
    "sweep_cases",
]


class KnownItems:
    """Stored items already read, by key, kept across the transactions of one ingest, and
    of every ingest of one service (``app.web.service``): a stored item never changes and
    is never deleted, so it is read and decoded once, and each later ledger of its case
    reads only which keys the case holds now (another writer may have added some). Only
    items read in a transaction that committed are kept (``remember``), and at most
    ``limit`` (then it starts again), so memory stays bounded.

    Shared by the threads of a worker: ``remember`` only adds to ``items`` or replaces the
    whole dict, never empties it in place, so a reader that took ``items`` once finds in
    it every key it saw there."""

    def __init__(self, limit: int = 8192) -> None:
        self.limit = limit
        self.items: dict[str, Item] = {}

    def remember(self, items: Mapping[str, Item]) -> None:
        if len(self.items) + len(items) > self.limit:
            self.items = dict(items)  # a new dict: readers keep the one they took
        else:
            self.items.update(items)


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


def derive_cases(
    session: Session,
    case_ids: Iterable[str],
    *,
    now: int,
    rules: CaseRules,
    locks: Locks,
    known: KnownItems | None = None,
    fresh: Mapping[str, Item] | None = None,
    keys: Sequence[tuple[str, str | None]] | None = None,
) -> dict[str, Item]:
    """Derive each case's ledger at clock ``now`` and store it with its flags, for all the
    cases at once: their items in one query (two with ``known``: the keys, then the items
    not known yet), the first receivers of their context ids in another, their flags and
    case rows written with one statement per kind of change. ``fresh``: items this
    transaction stored, which need no reading (``stored_as``). ``keys``: (key, case id) of
    every stored item of these cases, when this transaction read them already
    (``case_keys``, with the items it stored since); with ``known`` only. Returns the
    items used that ``known`` lacked, for ``KnownItems.remember`` once the transaction
    has committed. Raises NeedLocks when another transaction holds one of the cases."""
    case_ids = sorted(set(case_ids))
    locks.need(case_lock(c) for c in case_ids)
    read: dict[str, Item] = dict(fresh or {})
    ledgers = case_ledgers(
        session, case_ids, now=now, rules=rules, known=known, read=read, events=False, keys=keys
    )
    sync_cases_flags(session, {c: ledgers[c].flags for c in case_ids}, now=now)
    write_cases(session, [_case_values(ledgers[c], c, now) for c in case_ids if c != UNKNOWN_CASE])
    return read


def case_ledgers(
    session: Session,
    case_ids: Sequence[str],
    *,
    now: int,
    rules: CaseRules,
    known: KnownItems | None = None,
    read: dict[str, Item] | None = None,
    events: bool = True,
    keys: Sequence[tuple[str, str | None]] | None = None,
) -> dict[str, Ledger]:
    """The pure ledgers of these cases over their stored items (each one exactly what
    ``derive_ledger`` gives for the case alone: the first receivers of the context ids
    it does not present are never looked up). ``known``, ``read``, ``keys``: see
    ``derive_cases``; ``events``: see ``derive_ledger``."""
    if known is None:
        items = cases_items(session, case_ids)
    else:
        if keys is None:
            keys = case_keys(session, case_ids)
        items = _cases_items_known(session, case_ids, keys, known, {} if read is None else read)
    contexts = {
        i.context_id for found in items.values() for i in found if i.context_id and i.to_agent
    }
    # What ``first_receivers`` reads of an item, nothing more.
    receivers = first_receivers(
        Item(key, digest, kind, "", at, context_id=context, to_agent=to)
        for key, digest, kind, at, context, to in context_rows(session, contexts)
    )
    return {
        c: derive_ledger(
            c or None, items[c], now=now, rules=rules, contexts=receivers, events=events
        )
        for c in case_ids
    }


def case_ledger(session: Session, case_id: str, *, now: int, rules: CaseRules) -> Ledger:
    """The pure ledger of one case over its stored items."""
    return case_ledgers(session, [case_id], now=now, rules=rules)[case_id]


def case_items(session: Session, case_id: str) -> list[Item]:
    return cases_items(session, [case_id])[case_id]


def cases_items(session: Session, case_ids: Sequence[str]) -> dict[str, list[Item]]:
    """The stored items of each case (``UNKNOWN_CASE``: those without one)."""
    rows = case_item_rows(session, case_ids)
    return {c: [item_of(r) for r in found] for c, found in rows.items()}


def _cases_items_known(
    session: Session,
    case_ids: Sequence[str],
    keys: Sequence[tuple[str, str | None]],
    known: KnownItems,
    read: dict[str, Item],
) -> dict[str, list[Item]]:
    held = known.items  # taken once: another thread's ``remember`` may replace it
    missing = [key for key, _ in keys if key not in held and key not in read]
    read.update((r.key, item_of(r)) for r in item_rows(session, missing))
    found: dict[str, list[Item]] = {c: [] for c in case_ids}
    for key, case_id in keys:
        found[case_id or UNKNOWN_CASE].append(held.get(key) or read[key])
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
    due = due_cases(session, now)
    if not due:
        return 0
    locks = Locks(session, [case_lock(c) for c in due])
    # Again, now that no writer of these cases is at work (cases due meanwhile wait for the
    # next sweep).
    due = [c for c in due_cases(session, now) if case_lock(c) in locks.held or not locks.active]
    derive_cases(session, due, now=now, rules=rules, locks=locks)
    return len(due)


# --- a case's detail, as the dashboard and the API show it -----------------------------


@dataclass(frozen=True)
class Fact:
    key: str
    value: object
    source: str | None
    verified: bool


@dataclass(frozen=True)
class Reference:
    url: str
    media_type: str | None
    filename: str | None
    sha256: str | None
    size: int | None
    outcome: str  # verified | mismatch | unverifiable | missing-hash | expired
    detail: str | None


@dataclass(frozen=True)
class Envelope:
    handoff_id: str
    case_id: str
    from_agent: str
    to_agent: str | None
    epoch: int
    received_at: int
    media_type: str
    errors: tuple[str, ...]  # schema errors; empty when valid
    goal: str | None
    done: tuple[str, ...]
    remaining: tuple[str, ...]
    facts: tuple[Fact, ...]
    open_questions: tuple[str, ...]
    constraints: dict[str, object]
    summary: str | None
    references: tuple[Reference, ...]
    response: str | None  # accepted | rejected | None
    response_detail: str | None


@dataclass(frozen=True)
class CaseDetail:
    case_id: str
    owner: str | None
    epoch: int | None
    epochs: tuple[Epoch, ...]
    events: tuple[CaseEvent, ...]
    envelopes: tuple[Envelope, ...]
    flags: tuple[FlagRow, ...]


def case_detail(session: Session, case_id: str) -> CaseDetail | None:
    """The case's ledger, timeline, envelopes and flags; None for a case with no item.

    The timeline is derived again from the items (it depends on them alone); the flags are
    read as stored, where ingest and the sweep keep them in step with the clock."""
    if not case_stored(session, case_id):
        return None
    items = case_items(session, case_id)
    # Neither the clock nor the rules change epochs, events or responses; only flags.
    ledger = case_ledger(session, case_id, now=0, rules=CaseRules())
    return CaseDetail(
        case_id=case_id,
        owner=ledger.owner,
        epoch=ledger.epoch,
        epochs=ledger.epochs,
        events=ledger.events,
        envelopes=_envelopes(items, ledger, case_id),
        flags=case_flags(session, case_id),
    )


def _envelopes(items: list[Item], ledger: Ledger, case_id: str) -> tuple[Envelope, ...]:
    """One envelope per handoff (its first receipt), and every message that failed."""
    shown: list[Envelope] = []
    seen: set[str] = set()
    for item in sorted(items, key=lambda i: i.order):
        if item.kind == ItemKind.HANDOFF:
            if item.handoff_id in seen:
                continue
            seen.add(item.handoff_id or "")
        elif item.kind != ItemKind.INVALID or not (item.errors or item.drift):
            continue
        elif item.envelope is not None and "accepted" in item.envelope:
            continue  # an invalid acceptance is a timeline marker, not an envelope
        elif item.action is not None or item.envelope is None:
            continue  # an invalid case event
        shown.append(_envelope(item, ledger, case_id))
    return tuple(shown)


def _envelope(item: Item, ledger: Ledger, case_id: str) -> Envelope:
    body: Mapping[str, Any] = item.envelope or {}
    response, why = ledger.responses.get(item.handoff_id or "", (None, None))
    drift = tuple(f"version drift: {m} is not an accepted type" for m in item.drift)
    constraints = body.get("constraints")
    return Envelope(
        handoff_id=item.handoff_id or "",
        case_id=case_id,
        from_agent=item.agent or "(unknown)",
        to_agent=item.to_agent,
        epoch=item.epoch if item.epoch is not None else -1,
        received_at=item.at,
        media_type=item.media_type or "",
        errors=item.errors + drift,
        goal=_str(body.get("goal")),
        done=_strings(body.get("done")),
        remaining=_strings(body.get("remaining")),
        facts=tuple(_fact(f) for f in _list(body.get("facts")) if isinstance(f, Mapping)),
        open_questions=_strings(body.get("open_questions")),
        constraints=dict(constraints) if isinstance(constraints, Mapping) else {},
        summary=_str(body.get("summary")),
        references=tuple(_reference(r) for r in item.references),
        response=response,
        response_detail=why,
    )


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _strings(value: object) -> tuple[str, ...]:
    return tuple(v for v in _list(value) if isinstance(v, str))


def _fact(fact: Mapping[str, Any]) -> Fact:
    source = fact.get("source")
    return Fact(
        key=str(fact.get("key")),
        value=fact.get("value"),
        source=source if isinstance(source, str) and source else None,
        verified=fact.get("verified") is True,
    )


def _reference(ref: Mapping[str, Any]) -> Reference:
    return Reference(
        url=str(ref.get("url")),
        media_type=ref.get("media_type"),
        filename=ref.get("filename"),
        sha256=ref.get("sha256"),
        size=ref.get("size"),
        outcome=str(ref.get("outcome")),
        detail=ref.get("detail"),
    )
