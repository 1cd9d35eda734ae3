"""Flags as stored: one row per condition (``flag_key``), kept in step with the derived
flags of hops by ``sync_flags`` / ``sync_many_flags`` (of envelope cases by
``sync_cases_flags``), all through one collector of changes (``_Writes``), with
operators' workflow columns left to them.

A condition that no longer holds is deleted when nobody acted on it, so that the flags of a
store never depend on the order its elements arrived in; one that someone acted on stays,
resolved automatically, with the reason in the audit log.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

from handoff_context import Flag, FlagKind, digest_text
from sqlalchemy import bindparam, delete, insert, select, union_all, update
from sqlmodel import Session

from app.store.db import (
    execute,
    insert_ignore_many,
    pair_params,
    pairs_in,
    select_named,
    select_rows,
)
from app.store.models import ActionRow, CommentRow, FlagRow

SYSTEM = "system"  # the actor of automatic flag actions in the audit log

# Built once: see app.store.db, "dialect-specific statements".
_FLAG_COLUMNS = (
    FlagRow.id,
    FlagRow.key,
    FlagRow.status,
    FlagRow.assignee,
    FlagRow.note,
    FlagRow.kind,
    FlagRow.variant,
    FlagRow.severity,
    FlagRow.evidence,
    FlagRow.offer,
    FlagRow.opened_at,
    FlagRow.detail,
)
# Case flags name an agent and a handoff id in iss and hop; they are never a hop's.
_HOP_FLAGS = select(*_FLAG_COLUMNS).where(
    FlagRow.iss == bindparam("b_iss"), FlagRow.hop == bindparam("b_hop"), FlagRow.case_id.is_(None)
)
_HOPS_FLAGS = select(FlagRow.iss, FlagRow.hop, *_FLAG_COLUMNS).where(
    pairs_in(FlagRow.iss, FlagRow.hop),
    FlagRow.case_id.is_(None),
)
_UPDATE_FLAG = update(FlagRow).where(FlagRow.id == bindparam("b_id"))
_DELETE_FLAG = delete(FlagRow).where(FlagRow.id == bindparam("b_id"))
_AUDIT = insert(ActionRow)


def flag_key(iss: str, hop: str, flag: Flag) -> str:
    """One condition, one key. An equivocation is one condition per hop whatever its
    variant (it can change as more offers arrive); other kinds are one per variant."""
    variant = None if flag.kind is FlagKind.EQUIVOCATION else flag.variant
    canon = json.dumps([flag.kind.value, iss, hop, variant], separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def hop_flags(session: Session, *, hops: Sequence[tuple[str, str]]) -> dict[Any, dict[str, Any]]:
    """The stored flags of many hops, by hop and key: one query (``sync_flags``'s
    ``existing``)."""
    found: dict[Any, dict[str, Any]] = {hop: {} for hop in hops}
    if hops:
        # ``select_named``: once per chunk of hops derived, with an IN list of every hop.
        for row in select_named(session, _HOPS_FLAGS, pair_params(hops)):
            found.setdefault((row.iss, row.hop), {})[row.key] = row
    return found


def sync_flags(
    session: Session,
    iss: str,
    hop: str,
    flags: Sequence[Flag],
    *,
    offer: bytes | None,
    now: int,
    existing: dict[str, Any] | None = None,
) -> None:
    """Make the stored flags of one hop match the derived ones (``existing``: its stored
    flags by key, when read already with ``hop_flags``).

    A new condition is inserted open. A continuing one gets its derived columns refreshed;
    one an operator resolved is reopened when its evidence grew. A condition that no longer
    holds is deleted if nobody acted on it (so ingest order leaves no trace), and otherwise
    resolved automatically with an audit entry.
    """
    if existing is None:
        params = {"b_iss": iss, "b_hop": hop}
        existing = {row.key: row for row in execute(session, _HOP_FLAGS, params)}
    sync_many_flags(session, [(iss, hop, flags, offer, existing)], now=now)


HopFlags = tuple[str, str, Sequence[Flag], bytes | None, dict[str, Any]]


def sync_many_flags(session: Session, hops: Sequence[HopFlags], *, now: int) -> None:
    """``sync_flags`` for many hops at once, each ``(iss, hop, flags, offer, existing)``
    (``existing`` as read by ``hop_flags``): the same rows as syncing one hop after the
    other, with one query for whether anyone acted on those that no longer hold and one
    statement per kind of change (derived once per batch of ingest, ``app.store.derive``)."""
    syncs = [
        (existing, {flag_key(iss, hop, f): (iss, hop, f) for f in flags}, offer)
        for iss, hop, flags, offer, existing in hops
    ]
    gone = [r.id for existing, wanted, _ in syncs for k, r in existing.items() if k not in wanted]
    writes = _Writes(now, _acted(session, gone))
    for existing, wanted, offer in syncs:
        writes.sync(existing, wanted, case_id=None, offer=offer)
    writes.apply(session)


class CaseFlag(Protocol):
    """A flag of an envelope case as the ledger derives it (``app.envelope.ledger.CaseFlag``):
    the agent at fault and the handoff, beside the flag."""

    @property
    def flag(self) -> Flag: ...

    @property
    def agent(self) -> str: ...

    @property
    def handoff_id(self) -> str: ...


def case_flag_key(case_id: str, flag: CaseFlag) -> str:
    """One condition of a case, one key: its kind, the agent at fault, the handoff and the
    variant."""
    f = flag.flag
    canon = ["case", case_id, f.kind.value, flag.agent, flag.handoff_id, f.variant]
    return hashlib.sha256(json.dumps(canon, separators=(",", ":")).encode()).hexdigest()


def _derived(flag: Flag, offer: bytes | None) -> dict[str, Any]:
    """The columns of a flag row that derivation owns."""
    return {
        "kind": flag.kind.value,
        "variant": flag.variant,
        "severity": flag.severity.value,
        "evidence": [digest_text(d) for d in flag.evidence],
        "offer": offer,
        "opened_at": flag.opened_at,
        "detail": flag.detail,
    }


# --- envelope cases, and the one collector of changes ------------------------------------

_CASES_FLAGS = select(FlagRow.case_id, *_FLAG_COLUMNS).where(
    FlagRow.case_id.in_(bindparam("b_cases", expanding=True))
)
_IN_IDS = bindparam("b_ids", expanding=True)
# Someone worked on the flag: an audit entry or a comment (either keeps the flag, and the
# comment's foreign key could not let it go anyway).
_ACTED_ANY = union_all(
    select(ActionRow.flag_id).where(ActionRow.flag_id.in_(_IN_IDS)),
    select(CommentRow.flag_id).where(CommentRow.flag_id.in_(_IN_IDS)),
)


def sync_cases_flags(
    session: Session, flags: Mapping[str, Sequence[CaseFlag]], *, now: int
) -> None:
    """Make the stored flags of envelope cases match their ledgers' (derived flags by
    case id; "" holds the flags of items whose case could not be read), with the same
    rows as syncing one case after the other in the order given: one query for their
    stored flags, one for which of those that no longer hold someone acted on, and one
    statement per kind of change."""
    existing: dict[str, dict[str, Any]] = {case_id: {} for case_id in flags}
    for chunk in _chunks(list(flags)):
        for row in select_named(session, _CASES_FLAGS, {"b_cases": chunk}):
            existing[row.case_id][row.key] = row
    wanted = {
        case_id: {case_flag_key(case_id, f): (f.agent, f.handoff_id, f.flag) for f in found}
        for case_id, found in flags.items()
    }
    gone = [r.id for c in flags for k, r in existing[c].items() if k not in wanted[c]]
    writes = _Writes(now, _acted(session, gone))
    for case_id in flags:
        writes.sync(existing[case_id], wanted[case_id], case_id=case_id)
    writes.apply(session)


def _chunks(values: Sequence[Any]) -> Iterator[list[Any]]:
    # IN lists far below SQLite's limit on bound parameters (32,766).
    for start in range(0, len(values), 500):
        yield list(values[start : start + 500])


def _acted(session: Session, flag_ids: Sequence[int]) -> set[int]:
    """The flags among these that someone worked on (an audit entry or a comment)."""
    acted: set[int] = set()
    for chunk in _chunks(flag_ids):
        acted |= {r[0] for r in select_rows(session, _ACTED_ANY, {"b_ids": chunk})}
    return acted


class _Writes:
    """The changes that make stored flags match derived ones, for many hops or cases:
    collected, then written with one statement per kind (``acted``: the ids of the stored
    flags someone worked on, among those that no longer hold)."""

    def __init__(self, now: int, acted: set[int]) -> None:
        self.now = now
        self.acted = acted
        self.inserts: list[dict[str, Any]] = []
        self.updates: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        self.deletes: list[dict[str, Any]] = []
        self.audits: list[dict[str, Any]] = []

    def sync(
        self,
        existing: dict[str, Any],
        wanted: dict[str, tuple[str, str, Flag]],
        *,
        case_id: str | None,
        offer: bytes | None = None,
    ) -> None:
        """A new condition is inserted open. A continuing one gets its derived columns
        refreshed; one an operator resolved is reopened when its evidence grew. A
        condition that no longer holds is deleted if nobody acted on it (so ingest order
        leaves no trace), and otherwise resolved automatically with an audit entry."""
        existing = dict(existing)
        for key, (iss, hop, flag) in wanted.items():
            derived = _derived(flag, offer)
            row = existing.pop(key, None)
            if row is None:
                new = {"key": key, "iss": iss, "hop": hop, "status": "open", "updated_at": self.now}
                self.inserts.append({**new, **derived, "case_id": case_id})
                continue
            if all(getattr(row, k) == v for k, v in derived.items()):
                continue
            changes: dict[str, Any] = {**derived, "updated_at": self.now}
            if row.status == "resolved" and not set(row.evidence) >= set(derived["evidence"]):
                changes["status"] = "open"
                self._audit(row.id, "reopen", "new evidence for a resolved condition")
            self._update(row.id, changes)
        for row in existing.values():
            self._clear(row)

    def _clear(self, row: Any) -> None:
        unworked = row.status == "open" and row.assignee is None and row.note is None
        if row.id not in self.acted and unworked:
            self.deletes.append({"b_id": row.id})
            return
        if row.status != "resolved":
            self._update(row.id, {"status": "resolved", "updated_at": self.now})
            self._audit(row.id, "resolve", "the condition no longer holds")

    def _update(self, flag_id: int, changes: dict[str, Any]) -> None:
        self.updates.setdefault(tuple(changes), []).append({**changes, "b_id": flag_id})

    def _audit(self, flag_id: int | None, action: str, note: str) -> None:
        assert flag_id is not None
        values = {"flag_id": flag_id, "actor": SYSTEM, "at": self.now, "action": action}
        self.audits.append({**values, "note": note})

    def apply(self, session: Session) -> None:
        insert_ignore_many(session, FlagRow, self.inserts, ["key"])
        for params in self.updates.values():
            session.connection().execute(_UPDATE_FLAG, params)
        if self.deletes:
            session.connection().execute(_DELETE_FLAG, self.deletes)
        if self.audits:
            session.connection().execute(_AUDIT, self.audits)
