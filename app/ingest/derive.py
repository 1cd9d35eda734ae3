"""Hop state and flags derived again (profile §8): the library's pure rules applied to the
facts the store reads (``app.store.derive``), and the sweep that applies the clock.

For each chunk of hops: the store reads their facts and stored flags; here the hop's offer
is chosen among the offers that count (``canonical_order``), its state and lifecycle flags
are derived (``derive_hop``), and its ``equivocation`` and ``rejected-element`` flags are
found (``equivocation_flag``, ``rejection_flags``); the store then writes the rows. What the
rules read is the set of stored facts, never their order of arrival, so any permutation of
the same input yields the same hops and flags.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from handoff_context import (
    Timing,
    canonical_order,
    derive_hop,
    equivocation_flag,
    rejection_flags,
)
from sqlmodel import Session

from app.store.db import Locks, hop_lock
from app.store.derive import HOPS_PER_QUERY, HopFacts, HopKey, due_hops, write_hops
from app.store.flags import HopFlags, hop_flags
from app.store.host import host_of


def derive_hops(
    session: Session, keys: Iterable[HopKey], *, now: int, timing: Timing, locks: Locks
) -> None:
    """Re-derive each hop's state and flags at clock ``now`` and store them. Raises
    NeedLocks when another transaction holds one of the hops.

    The facts of many hops are read together, a few set-based queries for a chunk of hops
    instead of about nine for each (``HopFacts``); each hop is then derived from its own."""
    keys = sorted(set(keys))
    locks.need(hop_lock(hop) for _, hop in keys)
    for start in range(0, len(keys), HOPS_PER_QUERY):
        chunk = keys[start : start + HOPS_PER_QUERY]
        facts = HopFacts.load(session, chunk)
        stored = hop_flags(session, hops=chunk)
        rows: list[dict[str, Any]] = []
        gone: list[HopKey] = []
        flags: list[HopFlags] = []
        for key in chunk:
            row, hop_flags_ = _derive_one(key, facts, stored[key], now=now, timing=timing)
            if row is None:
                gone.append(key)
            else:
                rows.append(row)
            flags.append(hop_flags_)
        write_hops(session, hops=rows, gone=gone, flags=flags, now=now)


def _derive_one(
    key: HopKey, facts: HopFacts, stored_flags: dict[str, Any], *, now: int, timing: Timing
) -> tuple[dict[str, Any] | None, HopFlags]:
    """Derive one hop; returns its hop row to store (None: the hop has no offer any more,
    and its row goes) and its flags to sync."""
    iss, hop = key
    offers = canonical_order(facts.offers.get(key, []))  # the hop's offer first
    flags = rejection_flags(facts.rejections.get(key, []))
    if not offers:
        return None, (iss, hop, flags, None, stored_flags)
    fact = facts.elements[offers[0].digest]
    digests = [o.digest for o in offers]
    statuses = [s for d in digests for s in facts.statuses.get(d, [])]
    observed = [*digests, *(s.digest for s in statuses)]
    view = derive_hop(
        fact,
        statuses,
        now=now,
        timing=timing,
        downstream=[f for d in digests for f in facts.downstream.get(d, [])],
        host=host_of(facts.host, observed),
    )
    values = {
        "iss": iss,
        "hop": hop,
        "offer": fact.digest,
        "aud": fact.aud,
        "dialog": fact.dialog,
        "task": fact.task,
        "iat": fact.iat,
        "exp": fact.exp,
        "state": view.state.value,
        "a2a_state": view.a2a_state,
        "accepted_at": view.accepted_at,
        "terminal_at": view.terminal_at,
        "deadline": view.deadline,
        "derived_at": now,
    }
    flags.extend(view.flags)
    equivocation = equivocation_flag(offers)
    if equivocation is not None:
        flags.append(equivocation)
    return values, (iss, hop, flags, fact.digest, stored_flags)


def derive_every_hop(session: Session, keys: Iterable[HopKey], *, now: int, timing: Timing) -> None:
    """``derive_hops`` in a transaction that holds the tables whole (``rederive``'s
    ``app.store.derived.replace``): no hop lock is taken."""
    locks = Locks(session)
    locks.active = False
    derive_hops(session, keys, now=now, timing=timing, locks=locks)


def sweep_hops(session: Session, *, now: int, timing: Timing) -> int:
    """Apply the clock to the hops: re-derive every hop whose answer changes by ``now``
    (its deadline has passed), or that was derived for a later clock than ``now``. Returns
    how many (``app.ingest.sweep`` sweeps the envelope cases too).

    Run it in its own transaction (``app.store.db.run``); it waits for the hops' locks."""
    due = due_hops(session, now)
    if not due:
        return 0
    locks = Locks(session, [hop_lock(hop) for _, hop in due])
    # Again, now that no writer of these hops is at work (hops due meanwhile wait for the
    # next sweep).
    due = [
        key for key in due_hops(session, now) if hop_lock(key[1]) in locks.held or not locks.active
    ]
    derive_hops(session, due, now=now, timing=timing, locks=locks)
    return len(due)
