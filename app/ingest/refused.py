"""What can still be read of octets refused before they became an element (malformed, or
a key in the header, profile §2): the evidence ``app.store.rejected`` keeps of them.

An element that does not parse has no payload the store can trust, so it gets no element
row; a carried object that is neither a handoff nor a status object has no element at all.
When the payload can still be read, its iss and hop say under which hop the
``rejected-element`` flag files it. Nothing here is verified, and nothing depends on a
memory: the same octets always give the same evidence.
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
    HandoffObject,
    Offer,
    Status,
    StatusObject,
    Verdict,
    b64url_decode,
    parse_element,
    parse_object,
    strict_json_loads,
)
from handoff_context._cose import decode_sign1
from handoff_context._model import try_read_payload
from handoff_context.errors import EmbeddedKeyError, HandoffError, Reason

from app.capture.carriers import Carried
from app.capture.cbor_seq import strict_loads

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
    """The evidence of a carried object that did not parse into an element (read at the
    profile's own size limit: a deployment's lower one refuses, yet the octets are kept)."""
    try:
        obj = parse_object(value)
    except HandoffError:
        return _object(value)
    return refused_object(obj)


def refused_object(obj: HandoffObject | StatusObject, error: HandoffError | None = None) -> Refused:
    """The evidence of an object whose element did not parse; ``error``: what parsing it
    raised, when the caller tried already (then it is not parsed again)."""
    octets = obj.status if isinstance(obj, StatusObject) else obj.offer
    kind = "status" if isinstance(obj, StatusObject) else "offer"
    return Refused(octets, obj.form.value, kind, readable_payload(octets, obj.form, error))


def refused_value(value: Mapping[str, Any]) -> Refused:
    """The evidence of a carried value that is no handoff or status object (``parse_object``
    refused it at the profile's own size limit), without parsing it again."""
    return _object(value)


def _object(value: Mapping[str, Any]) -> Refused:
    """An object that is no handoff or status object: its canonical encoding, JSON when it
    came as JSON (text members only), else CBOR."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return Refused(text.encode(), "json", None, None)
    except (TypeError, ValueError):
        return Refused(cbor2.dumps(value, canonical=True), "cbor", None, None)


def readable_payload(
    octets: bytes, form: Form, error: HandoffError | None = None
) -> Offer | Status | None:
    """The payload of an element that does not parse, when it can still be read; for
    evidence only (nothing about it is verified). ``error``: what parsing the element
    raised already, if the caller tried."""
    if error is None:
        try:
            return parse_element(octets, form).payload
        except HandoffError as exc:
            error = exc
    if isinstance(error, EmbeddedKeyError):
        return error.payload if isinstance(error.payload, Offer | Status) else None
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
    # Read like a CBOR capture (app.capture.cbor_seq): refused octets are hostile
    # until shown otherwise, and a payload nests no deeper than an element may.
    return strict_loads(decode_sign1(octets).payload)


def octets_row(evidence: Refused, *, now: int) -> dict[str, Any]:
    """The refused octets' row (``RejectedOctetsRow``), first seen at ``now``."""
    p, hop = evidence.payload, evidence.hop_key
    return {
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


def receipt_row(
    evidence: Refused, *, item: Carried, ctx: Context, verdict: Verdict, now: int
) -> dict[str, Any]:
    """This receipt of the refused octets (``RejectedObservationRow``)."""
    return {
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
