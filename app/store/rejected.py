"""Octets refused before they could become an element, kept as evidence.

An element that does not parse (malformed, or a key in its header, profile §2) gets no
``ElementRow``; its octets are kept here (``RejectedOctetsRow``, keyed by their SHA-256),
with one ``RejectedObservationRow`` per receipt, and the ``rejected-element`` flag of the
hop their payload names is derived again (``app.store.derive``). What can be read of the
octets is ingest's to find (``app.ingest.refused``); this module stores the rows it is
given and reads them back.

The same octets always give the same rows, so the rows and the flag depend only on the set
of receipts, never on their order.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlmodel import Session

from app.store.db import Locks, hop_lock, insert_ignore
from app.store.derive import HopKey
from app.store.models import HopRow, RejectedObservationRow, RejectedOctetsRow


def keep_refused(
    session: Session,
    *,
    octets: dict[str, Any],
    receipt: dict[str, Any],
    hop: HopKey | None,
    locks: Locks | None = None,
) -> bool:
    """Store refused octets (once: ``octets`` is their row) and this ``receipt`` of them,
    holding the lock of the ``hop`` they claim, whose flags the caller derives again
    (``app.ingest.derive``) when this returns True. False when the receipt's
    observation id is stored already: a shipper's retry, stored once. Without ``locks``,
    run it in its own transaction (``app.store.db.run``); with the ``locks`` of a
    transaction that holds others (a batch), the hop's lock is only tried for (raises
    NeedLocks when taken). Raises SQLAlchemyError."""
    wanted = [] if hop is None else [hop_lock(hop[1])]
    if locks is None:
        locks = Locks(session, wanted)
    else:
        locks.need(wanted)
    insert_ignore(session, RejectedOctetsRow, octets, ["digest"])
    # ON CONFLICT on the observation id: another writer (or an earlier item of this
    # request) may have stored the same receipt since the batch looked (NULL never
    # conflicts, so receipts without an id are all kept).
    return insert_ignore(session, RejectedObservationRow, receipt, ["observation_key"])


# --- reading them back (the dashboard's element and hop pages, the API) ----------------


def get_refused(session: Session, *, digest: bytes) -> RejectedOctetsRow | None:
    return session.get(RejectedOctetsRow, digest)


def receipts_of(session: Session, *, digest: bytes) -> list[RejectedObservationRow]:
    """Every receipt of refused octets, first received first."""
    query = (
        select(RejectedObservationRow)
        .where(RejectedObservationRow.digest == digest)
        .order_by(RejectedObservationRow.received_at, RejectedObservationRow.id)
    )
    return list(session.execute(query).scalars())


def refused_of_hop(session: Session, *, iss: str, hop: str) -> list[RejectedOctetsRow]:
    """The refused octets filed under one hop, in digest order."""
    query = (
        select(RejectedOctetsRow)
        .where(RejectedOctetsRow.hop_iss == iss, RejectedOctetsRow.hop == hop)
        .order_by(RejectedOctetsRow.digest)
    )
    return list(session.execute(query).scalars())


def filed_under(session: Session, row: RejectedOctetsRow) -> bytes | None:
    """The offer digest of the hop the refused octets are filed under, when it is a hop."""
    if row.hop_iss is None or row.hop is None:
        return None
    hop = session.get(HopRow, (row.hop_iss, row.hop))
    return None if hop is None else hop.offer
