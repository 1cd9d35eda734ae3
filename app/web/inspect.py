"""What a pasted element says, whether or not it verifies (as jwt.io shows a token it has
no key for): its form, decoded header and payload, and its handoff digest; and the keys an
operator brings along to verify with instead of the service's trust store.

Parsing only, for display: the verdict beside it comes from the verifier
(``app.ingest.verifying``). An element the library cannot parse is still decoded as far as
its encoding goes (a JWS's base64url segments, a COSE_Sign1's CBOR), with the parse error
saying why it is not a valid element.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

import cbor2
from handoff_context import Form, TrustStore, digest_text, handoff_digest, parse_element
from handoff_context.errors import HandoffError, TrustConfigError

from app.capture.cbor_seq import SHARED_REFUSED
from app.errors import HandoffTraceError
from app.web.evidence import plain

_JWS = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*$")
_HEX = re.compile(r"^(?:[0-9a-fA-F]{2}){16,}$")
MAX_KEYS_TEXT = 1024 * 1024


@dataclass(frozen=True)
class Pasted:
    """One pasted element as read for display."""

    member: str  # offer | status
    form: str  # jws | cose
    octets: bytes
    digest: str
    header: Any
    payload: Any
    problem: str | None  # why it is not a valid element, when it is not


def _segment(text: str) -> Any:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


# How deep pasted CBOR may nest: deeper than any element (a handoff payload is a few
# levels), shallow enough that showing it cannot exhaust the stack.
_MAX_DEPTH = 32


def _cbor(octets: bytes) -> Any:
    return cbor2.loads(
        octets,
        max_depth=_MAX_DEPTH,
        semantic_decoders=SHARED_REFUSED,
    )


def _loose(octets: bytes, form: Form) -> tuple[Any, Any]:
    """Header and payload decoded as far as the encoding goes, for an element that does not
    parse as one (an untagged COSE_Sign1 as well as a tagged one)."""
    try:
        if form is Form.JWS:
            head, body, _ = octets.decode("ascii").split(".")
            return _segment(head), _segment(body)
        value = _cbor(octets)
        value = getattr(value, "value", value)  # a tagged COSE_Sign1
        if isinstance(value, list) and len(value) == 4:
            protected = _cbor(value[0]) if value[0] else {}
            payload = _cbor(value[2]) if isinstance(value[2], bytes) else value[2]
            return plain(protected), plain(payload)
    except (ValueError, cbor2.CBORError, UnicodeError, TypeError, RecursionError, LookupError):
        pass
    return None, None


def decode_pasted(octets: bytes, form: Form) -> Pasted:
    digest = digest_text(handoff_digest(octets))
    try:
        element = parse_element(octets, form)
    except HandoffError as exc:
        header, payload = _loose(octets, form)
        member = (
            "status" if isinstance(payload, dict) and payload.get("type") == "status" else "offer"
        )
        return Pasted(member, form.value, octets, digest, header, payload, str(exc))
    member = "offer" if element.is_offer else "status"
    header, payload = plain(dict(element.raw_header)), plain(dict(element.raw_payload))
    return Pasted(member, form.value, octets, digest, header, payload, None)


def read_paste(text: str) -> tuple[str, bytes, list[Pasted]]:
    """A pasted object (JSON, as is), compact JWS or hex COSE_Sign1 as a capture to verify
    (its name and octets) and the elements it holds, decoded for display."""
    text = text.strip()
    if text.startswith(("{", "[")):
        found: list[Pasted] = []
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        for member in ("offer", "status"):
            value = doc.get(member) if isinstance(doc, dict) else None
            if isinstance(value, str) and _JWS.match(value):
                found.append(decode_pasted(value.encode("ascii"), Form.JWS))
        return "pasted.json", text.encode(), found
    compact = "".join(text.split())
    if _HEX.match(compact) and not _JWS.match(compact):
        shown = decode_pasted(bytes.fromhex(compact), Form.COSE)
        return "pasted.cbor", cbor2.dumps({shown.member: shown.octets}), [shown]
    if _JWS.match(compact):
        shown = decode_pasted(compact.encode("ascii"), Form.JWS)
        return "pasted.json", json.dumps({shown.member: compact}).encode(), [shown]
    return "pasted.json", json.dumps({"offer": compact}).encode(), []


class KeysError(HandoffTraceError, ValueError):
    """Keys that cannot be used; the message says what to fix."""

    reason = "bad-keys"


def own_trust(text: str, issuer: str) -> TrustStore | None:
    """The operator's own keys: a trust document (``{"issuers": [...]}``, profile §4), or a JWK
    Set or one JWK that speaks for ``issuer``. None when none were given. Raises KeysError.
    """
    text = text.strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise KeysError(f"Your keys are not JSON ({exc}).") from exc
    if isinstance(doc, dict) and "issuers" not in doc:
        keys = doc.get("keys") if "keys" in doc else [doc]
        if not issuer.strip():
            raise KeysError(
                "A JWK or JWK Set says nothing about whose keys they are: fill in the issuer "
                "they speak for, or paste a trust document with an issuers list."
            )
        doc = {"issuers": [{"id": issuer.strip(), "keys": keys}]}
    try:
        return TrustStore.from_mapping(doc, source="your keys")
    except (TrustConfigError, HandoffError, ValueError) as exc:
        raise KeysError(f"Your keys cannot be used: {exc}") from exc


# One sentence per check (profile §6, in its order; a status's offer and parties checks are the
# paragraph after it), shown beside each check's result.
CHECK_SENTENCES = {
    "signature": "The issuer's keys are found in the trust configuration and the signature "
    "verifies with one of them (profile §6.1: untrusted-key, bad-signature).",
    "audience": "aud equals the receiver's own identifier (profile §6.2: wrong-audience).",
    "freshness": "iat is no later than now + skew, now is no later than exp + skew, and "
    "exp - iat is within the maximum lifetime (profile §6.3: stale, policy).",
    "replay": "No other offer with a different digest was seen for this (iss, hop) "
    "(profile §6.4: a different digest is equivocation).",
    "dialog": "dialog equals the dialog of the host message that carried it (profile §6.5).",
    "chain": "The chain links up: prev digests, iss/aud continuity, timing, no cycle, not "
    "too deep (profile §7).",
    "refs": "The referenced objects match their digests, as far as the ref policy asks "
    "(profile §5, §6.7).",
    "offer": "The status names a known offer by digest and carries its hop (profile §6).",
    "parties": "The status obeys the iss/aud swap of profile §1.2: it is signed by the party "
    "allowed to report that state.",
}
