"""The sequencer: gives every stored row a leaf, beside ingest and never inside its
transactions, and publishes a signed checkpoint for every append.

One round reads the log's state and the rows without a leaf, builds their leaves and the
tree nodes they complete, and claims the append with a compare-and-swap of the state row
(``app.store.tlog.claim``). Several instances may run it against one database: one claim
wins, the others find the size changed, write nothing, and try again on their next round.
Ingest pays nothing: the sequencer reads the digest columns ingest wrote anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine
from sqlmodel import Session

from app.log import merkle
from app.log.checkpoint import Checkpoint
from app.log.leaf import Leaf, Source
from app.log.note import Signer
from app.store import db, tlog

BATCH = 5000


@dataclass(frozen=True, slots=True)
class Appended:
    """One round's result: how many leaves it appended, and the size after it."""

    count: int
    size: int


def leaf_of(row: tlog.Unlogged) -> Leaf:
    return Leaf(Source(row.source), row.form, row.type, row.first_seen, row.digest)


def sequence_once(engine: Engine, signer: Signer, *, now: int, batch: int = BATCH) -> Appended:
    """Append up to ``batch`` rows in one transaction (retried on a transient error).
    Returns what was appended (0 when nothing was pending or another instance won).

    An idle round stops at a read-only count, without the write lock (SQLite) and without
    looking for the rows that have no leaf (an anti-join over the store): rows are never
    deleted (a deleted one is the self-check's finding), so equal counts mean nothing is
    pending."""
    with db.transaction(db.read_only(engine)) as session:
        size, _ = tlog.state(session)
        if tlog.stored_count(session) == size:
            return Appended(0, size)
    return db.run(engine, lambda session: _round(session, signer, now=now, batch=batch))


def sequence_all(engine: Engine, signer: Signer, *, now: int, batch: int = BATCH) -> int:
    """Rounds until nothing is pending (a command's, or a test's, catch-up). Returns the
    leaves appended by this caller."""
    total = 0
    while True:
        done = sequence_once(engine, signer, now=now, batch=batch)
        total += done.count
        if done.count == 0:
            with db.transaction(db.read_only(engine)) as session:
                if not tlog.unlogged(session, limit=1):
                    return total


def _round(session: Session, signer: Signer, *, now: int, batch: int) -> Appended:
    size, _ = tlog.state(session)
    pending = tlog.unlogged(session, limit=batch)
    if not pending:
        return Appended(0, size)
    leaves = [leaf_of(p).encode() for p in pending]
    frontier = tlog.nodes(session, wanted=merkle.frontier_nodes(size))
    made = merkle.append(size, [merkle.leaf_hash(x) for x in leaves], frontier)
    new_size = size + len(leaves)
    known = {**frontier, **{(lv, i): h for lv, i, h in made}}
    root = merkle.range_hash(0, new_size, known)
    if not tlog.claim(session, old_size=size, new_size=new_size, root=root, now=now):
        return Appended(0, size)
    note = Checkpoint(signer.name, new_size, root).sign(signer)
    tlog.append(
        session,
        leaves=[
            {
                "idx": size + i,
                "source": p.source,
                "digest": p.digest,
                "leaf": leaf,
                "sequenced_at": now,
            }
            for i, (p, leaf) in enumerate(zip(pending, leaves, strict=True))
        ],
        nodes=made,
        checkpoint={"size": new_size, "root": root, "note": note, "published_at": now},
    )
    return Appended(len(leaves), new_size)
