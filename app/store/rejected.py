"""Octets refused before they could become an element, kept as evidence.

An element that does not parse (malformed, or a key in its header, profile §2) has no payload
the store can trust, so it gets no ``ElementRow``; a carried object that is neither a
handoff nor a status object has no element at all. Their verdict alone would lose what was
sent, so the octets are kept here (``RejectedOctetsRow``, keyed by their SHA-256), with one
``RejectedObservationRow`` per receipt. When the payload can still be read, its iss and hop
say under which hop the ``rejected-element`` flag files it (``app.store.derive``).

Nothing here depends on a memory: the same octets always get the same verdict, so the rows
and the flag depend only on the set of receipts, never on their order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cbor2
from handoff_context import (
    Context,
    Form,
    Offer,
    Status,
    StatusObject,
    Timing,
    Verdict,
    b64url_decode,
    parse_element,
    parse_object,
    strict_json_loads,
)
from handoff_context._cose import decode_sign1
from handoff_context._encoding import MAX_DEPTH
from handoff_context._model import try_read_payload
from handoff_context.errors import EmbeddedKeyError, HandoffError, Reason
from sqlalchemy import select
from sqlmodel import Session

from app.capture.carriers import Carried
from app.store.db import Locks, hop_lock, insert_ignore
from app.store.derive import derive_hops
from app.store.models import HopRow, RejectedObservationRow, RejectedOctetsRow

# What decoding evidence may raise besides HandoffError. cbor2 6 raises CBORDecodeError,
# which is no ValueError, for malformed items and for semantic tags (0, 1, 4, 5, 30, 35, 37,
# 260 ...) whose content its own decoders refuse; those octets were refused already, so any
# of these only means that no payload can be read from them.
_DECODE_ERRORS = (
    HandoffError,
    cbor2.CBORError,
    ValueError,
    TypeError,
    OverflowError,
    RecursionError,
    LookupError,
)


@dataclass(frozen=True, slots=True)
class Refused:
    """What the store keeps of one refused item: its octets and what could be read."""

    octets: bytes
    form: str  # jws | cose | json | cbor
    type: str | None  # offer | status, when the carrying object said which
    payload: Offer | Status | None

    @property
    def digest(self) -> bytes:
        return hashlib.sha256(self.octets).digest()

    @property
    def hop_key(self) -> tuple[str, str] | None:
        """(iss, hop) of the hop the element claims (``hop_owner``: profile §1.2's swap)."""
        p = self.payload
        return None if p is None else (p.hop_owner, p.hop)


def refused(value: Mapping[str, Any]) -> Refused:
    """The evidence of a carried object that did not parse into an element."""
    try:
        obj = parse_object(value)
    except HandoffError:
        return _object(value)
    octets = obj.status if isinstance(obj, StatusObject) else obj.offer
    kind = "status" if isinstance(obj, StatusObject) else "offer"
    return Refused(octets, obj.form.value, kind, readable_payload(octets, obj.form))


def _object(value: Mapping[str, Any]) -> Refused:
    """An object that is no handoff or status object: its canonical encoding, JSON when it
    came as JSON (text members only), else CBOR."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return Refused(text.encode(), "json", None, None)
    except (TypeError, ValueError):
        return Refused(cbor2.dumps(value, canonical=True), "cbor", None, None)


def readable_payload(octets: bytes, form: Form) -> Offer | Status | None:
    """The payload of an element that does not parse, when it can still be read; for
    evidence only (nothing about it is verified)."""
    try:
        return parse_element(octets, form).payload
    except EmbeddedKeyError as exc:
        return exc.payload if isinstance(exc.payload, Offer | Status) else None
    except HandoffError:
        pass
    try:
        return try_read_payload(_payload_doc(octets, form), form=form)
    except _DECODE_ERRORS:
        return None


def _payload_doc(octets: bytes, form: Form) -> object:
    if form is Form.JWS:
        parts = octets.decode("ascii").split(".")
        if len(parts) != 3:
            return None
        return strict_json_loads(b64url_decode(parts[1], what="payload"), what="payload")
    # Bounded like the capture reader (app.capture.formats): refused octets are hostile
    # until shown otherwise, and a payload nests no deeper than an element may.
    return cbor2.loads(
        decode_sign1(octets).payload,
        max_depth=MAX_DEPTH,
        allow_duplicate_keys=False,
        strict_hashable_types=True,
        semantic_decoders={28: _refuse_shared, 29: _refuse_shared},
    )


def _refuse_shared(decoder: object, immutable: bool = False) -> object:
    """Shared references (tags 28, 29) can build cyclic values; no payload holds one."""
    raise cbor2.CBORDecodeError("shared references are not allowed")


def keep_refused(
    session: Session,
    *,
    item: Carried,
    ctx: Context,
    verdict: Verdict,
    now: int,
    timing: Timing,
    locks: Locks | None = None,
) -> bytes | None:
    """Store a refused item's octets (once) and this receipt of them, and re-derive the
    flags of the hop they claim. Returns the digest, or None when the item's observation
    id (``item.key``) is stored already: a shipper's retry, stored once. Without
    ``locks``, run it in its own transaction (``app.store.db.run``); with the ``locks`` of
    a transaction that holds others (a batch), the hop's lock is only tried for (raises
    NeedLocks when taken). Raises SQLAlchemyError."""
    evidence = refused(item.value)
    hop = evidence.hop_key
    wanted = [] if hop is None else [hop_lock(hop[1])]
    if locks is None:
        locks = Locks(session, wanted)
    else:
        locks.need(wanted)
    p = evidence.payload
    row: dict[str, Any] = {
        "digest": evidence.digest,
        "form": evidence.form,
        "type": evidence.type,
        "octets": evidence.octets,
        "iss": None if p is None else p.iss,
        "aud": None if p is None else p.aud,
        "hop": None if hop is None else hop[1],
        "hop_iss": None if hop is None else hop[0],
        "first_seen": now,
    }
    insert_ignore(session, RejectedOctetsRow, row, ["digest"])
    receipt = {
        "digest": evidence.digest,
        "received_at": ctx.now,
        "received_by": ctx.receiver,
        "source": item.source,
        "carrier": item.carrier.value,
        "role": item.role.value,
        "dialog": ctx.dialog,
        "task_id": item.task_id,
        "task_state": item.task_state,
        "reason": (verdict.reason or Reason.MALFORMED).value,
        "detail": verdict.detail,
        "verdict": verdict.to_json(),
        "ingested_at": now,
        "observation_key": item.key,
    }
    # ON CONFLICT on the observation id: another writer (or an earlier item of this
    # request) may have stored the same receipt since the batch looked (NULL never
    # conflicts, so receipts without an id are all kept).
    if not insert_ignore(session, RejectedObservationRow, receipt, ["observation_key"]):
        return None
    if hop is not None:
        derive_hops(session, [hop], now=now, timing=timing, locks=locks)
    return evidence.digest


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
