"""Every SQL statement of the evidence log (app/log): what is not yet logged, the tree's
nodes, the one state row the sequencers compare and swap, leaves, checkpoints, and the
self-check's reads. No rules here: leaves and hashes are built in app/log."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, func, insert, select, tuple_, update
from sqlmodel import Session

from app.store.db import execute, insert_ignore
from app.store.models import (
    ElementRow,
    FlagRow,
    LogCheckpointRow,
    LogLeafRow,
    LogNodeRow,
    LogStateRow,
    RejectedOctetsRow,
)

STATE = "log"
EMPTY_ROOT = hashlib.sha256(b"").digest()  # RFC 9162 s2.1.1: the hash of an empty tree
ELEMENT, REJECTED = 1, 2  # app.log.leaf.Source
_NODE_CHUNK = 400


@dataclass(frozen=True, slots=True)
class Unlogged:
    """A stored row not yet in the log: what its leaf is made of."""

    source: int
    digest: bytes
    form: str
    type: str | None
    first_seen: int


@dataclass(frozen=True, slots=True)
class LoggedRow:
    """One leaf and what is stored for it now (``octets`` None: the row is gone)."""

    idx: int
    source: int
    digest: bytes
    leaf: bytes
    form: str | None
    type: str | None
    first_seen: int | None
    octets: bytes | None


def state(session: Session) -> tuple[int, bytes]:
    """The log's size and root (0 and the empty root before the first append)."""
    row = execute(
        session, select(LogStateRow.size, LogStateRow.root).where(LogStateRow.name == STATE)
    ).first()
    return (0, EMPTY_ROOT) if row is None else (int(row.size), bytes(row.root))


def unlogged(session: Session, *, limit: int) -> list[Unlogged]:
    """Up to ``limit`` stored rows without a leaf, oldest first (first_seen, then digest)."""
    found: list[Unlogged] = []
    for source, table in ((ELEMENT, ElementRow), (REJECTED, RejectedOctetsRow)):
        logged = exists().where(LogLeafRow.source == source, LogLeafRow.digest == table.digest)
        stmt = (
            select(table.digest, table.form, table.type, table.first_seen)
            .where(~logged)
            .order_by(table.first_seen, table.digest)
            .limit(limit)
        )
        found += [
            Unlogged(source, bytes(r.digest), r.form, r.type, int(r.first_seen))
            for r in execute(session, stmt)
        ]
    found.sort(key=lambda u: (u.first_seen, u.source, u.digest))
    return found[:limit]


def nodes(session: Session, *, wanted: Collection[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """The stored hashes of these (level, idx) nodes (missing ones are left out)."""
    out: dict[tuple[int, int], bytes] = {}
    keys = sorted(wanted)
    for start in range(0, len(keys), _NODE_CHUNK):
        chunk = keys[start : start + _NODE_CHUNK]
        stmt = select(LogNodeRow.level, LogNodeRow.idx, LogNodeRow.hash).where(
            tuple_(LogNodeRow.level, LogNodeRow.idx).in_(chunk)
        )
        for r in execute(session, stmt):
            out[(int(r.level), int(r.idx))] = bytes(r.hash)
    return out


def node_range(session: Session, *, level: int, lo: int, hi: int) -> list[bytes]:
    """The hashes of nodes ``lo`` to ``hi`` at ``level``, in order (fewer if not all exist)."""
    stmt = (
        select(LogNodeRow.hash)
        .where(LogNodeRow.level == level, LogNodeRow.idx >= lo, LogNodeRow.idx < hi)
        .order_by(LogNodeRow.idx)
    )
    return [bytes(h) for h in execute(session, stmt).scalars()]


def leaf_range(session: Session, *, lo: int, hi: int) -> list[bytes]:
    stmt = (
        select(LogLeafRow.leaf)
        .where(LogLeafRow.idx >= lo, LogLeafRow.idx < hi)
        .order_by(LogLeafRow.idx)
    )
    return [bytes(x) for x in execute(session, stmt).scalars()]


def claim(session: Session, *, old_size: int, new_size: int, root: bytes, now: int) -> bool:
    """Compare and swap the log's size: True when it was still ``old_size`` and is now
    ``new_size`` (this sequencer won); False when another one appended first. On
    PostgreSQL a concurrent claim waits for this transaction, then finds the size changed."""
    insert_ignore(
        session,
        LogStateRow,
        {"name": STATE, "size": 0, "root": EMPTY_ROOT, "updated_at": now},
        ["name"],
    )
    stmt = (
        update(LogStateRow)
        .where(LogStateRow.name == STATE, LogStateRow.size == old_size)
        .values(size=new_size, root=root, updated_at=now)
        .returning(LogStateRow.name)
    )
    return execute(session, stmt).first() is not None


def append(
    session: Session,
    *,
    leaves: Sequence[Mapping[str, Any]],
    nodes: Sequence[tuple[int, int, bytes]],
    checkpoint: Mapping[str, Any],
) -> None:
    """Write the leaves (idx, source, digest, leaf, sequenced_at), the tree nodes they
    complete and the checkpoint (size, root, note, published_at) of one claimed append."""
    connection = session.connection()
    connection.execute(insert(LogLeafRow), [dict(x) for x in leaves])  # executemany
    rows = [{"level": lv, "idx": i, "hash": h} for lv, i, h in nodes]
    for start in range(0, len(rows), 5000):
        connection.execute(insert(LogNodeRow), rows[start : start + 5000])
    execute(session, insert(LogCheckpointRow), dict(checkpoint))


def latest_checkpoint(session: Session) -> LogCheckpointRow | None:
    stmt = select(LogCheckpointRow).order_by(LogCheckpointRow.size.desc()).limit(1)
    return session.scalars(stmt).first()


def checkpoints(session: Session) -> list[LogCheckpointRow]:
    """Every published checkpoint, smallest first."""
    return list(session.scalars(select(LogCheckpointRow).order_by(LogCheckpointRow.size)))


def leaf_sources(session: Session, *, size: int) -> bytes:
    """The source of each of the first ``size`` leaves, one octet a leaf, in log order."""
    stmt = select(LogLeafRow.source).where(LogLeafRow.idx < size).order_by(LogLeafRow.idx)
    return bytes(int(s) for s in execute(session, stmt).scalars())


def leaf_of(session: Session, *, digest: bytes) -> tuple[int, bytes] | None:
    """The index and leaf of a stored element (or, failing that, of refused octets)."""
    stmt = (
        select(LogLeafRow.idx, LogLeafRow.leaf)
        .where(LogLeafRow.digest == digest)
        .order_by(LogLeafRow.source)
        .limit(1)
    )
    row = execute(session, stmt).first()
    return None if row is None else (int(row.idx), bytes(row.leaf))


def logged_rows(session: Session, *, lo: int, hi: int) -> list[LoggedRow]:
    """Leaves ``lo`` to ``hi`` beside what is stored for them now (the self-check)."""
    out: list[LoggedRow] = []
    for source, table in ((ELEMENT, ElementRow), (REJECTED, RejectedOctetsRow)):
        stmt = (
            select(
                LogLeafRow.idx,
                LogLeafRow.digest,
                LogLeafRow.leaf,
                table.form,
                table.type,
                table.first_seen,
                table.octets,
            )
            .select_from(LogLeafRow)
            .outerjoin(table, table.digest == LogLeafRow.digest)
            .where(LogLeafRow.source == source, LogLeafRow.idx >= lo, LogLeafRow.idx < hi)
        )
        for r in execute(session, stmt):
            out.append(
                LoggedRow(
                    int(r.idx),
                    source,
                    bytes(r.digest),
                    bytes(r.leaf),
                    r.form,
                    r.type,
                    None if r.first_seen is None else int(r.first_seen),
                    None if r.octets is None else bytes(r.octets),
                )
            )
    out.sort(key=lambda r: r.idx)
    return out


def iter_logged(session: Session, *, size: int, step: int = 2000) -> Iterator[list[LoggedRow]]:
    for lo in range(0, size, step):
        yield logged_rows(session, lo=lo, hi=min(size, lo + step))


def stored_count(session: Session) -> int:
    """How many rows the log should hold: stored elements and refused octets."""
    total = 0
    for table in (ElementRow, RejectedOctetsRow):
        total += int(execute(session, select(func.count()).select_from(table)).scalar_one())
    return total


def unlogged_count(session: Session) -> int:
    total = 0
    for source, table in ((ELEMENT, ElementRow), (REJECTED, RejectedOctetsRow)):
        logged = exists().where(LogLeafRow.source == source, LogLeafRow.digest == table.digest)
        stmt = select(func.count()).select_from(table).where(~logged)
        total += int(execute(session, stmt).scalar_one())
    return total


def hop_of(session: Session, *, source: int, digest: bytes) -> tuple[str, str]:
    """The (iss, hop) a flag about this row is filed under, when the row still says."""
    table = ElementRow if source == ELEMENT else RejectedOctetsRow
    row = execute(session, select(table.hop_iss, table.hop).where(table.digest == digest)).first()
    if row is None or row.hop_iss is None or row.hop is None:
        return ("(evidence log)", "-")
    return (str(row.hop_iss), str(row.hop))


# The self-check's flags: filed under a case id of their own, so a hop's re-derivation
# (``app.store.flags.sync_flags``, which only syncs flags without a case) never clears them.
LOG_CASE = "evidence-log"


def raise_flag(
    session: Session,
    *,
    key: str,
    kind: str,
    iss: str,
    hop: str,
    evidence: list[str],
    detail: str,
    now: int,
) -> None:
    """Open a critical flag of the self-check, once per condition (``key``): an operator
    who resolved it is not overruled by the next run."""
    insert_ignore(
        session,
        FlagRow,
        {
            "key": key,
            "kind": kind,
            "variant": None,
            "severity": "critical",
            "status": "open",
            "evidence": evidence,
            "iss": iss,
            "hop": hop[:64],
            "offer": None,
            "opened_at": now,
            "detail": detail,
            "updated_at": now,
            "case_id": LOG_CASE,
        },
        ["key"],
    )


def log_flags(session: Session) -> list[FlagRow]:
    stmt = select(FlagRow).where(FlagRow.case_id == LOG_CASE).order_by(FlagRow.id)
    return list(session.scalars(stmt))
