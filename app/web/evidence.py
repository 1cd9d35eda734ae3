"""Stored elements made readable for the evidence pages: decoded header and payload, and
what differs between two offers of one equivocation. Parsing only, for display: the
verdicts shown beside them come from the store, never from here (nothing is verified).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from handoff_context import Form, digest_text, parse_element
from handoff_context.errors import HandoffError

from app.store.models import ElementRow


@dataclass(frozen=True)
class Decoded:
    digest: str
    form: str
    header: dict[str, Any]
    payload: dict[str, Any]
    raw: str  # the signed octets as text (JWS) or hex (COSE)
    content: str  # digest of header and payload as signed
    problem: str | None = None
    signature: str = ""  # base64url (JWS) or hex (COSE)


def plain(value: Any) -> Any:
    """JSON-able: bytes (COSE) as hex, maps with text keys."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def decode(row: ElementRow) -> Decoded:
    raw = row.octets.decode("ascii", "replace") if row.form == "jws" else row.octets.hex()
    try:
        element = parse_element(row.octets, Form(row.form))
    except HandoffError as exc:
        return Decoded(
            digest_text(row.digest), row.form, {}, {}, raw, digest_text(row.content), str(exc)
        )
    signature = raw.rsplit(".", 1)[-1] if row.form == "jws" else element.signature.hex()
    return Decoded(
        digest_text(row.digest),
        row.form,
        plain(dict(element.raw_header)),
        plain(dict(element.raw_payload)),
        raw,
        digest_text(row.content),
        signature=signature,
    )


def show(value: Any) -> str:
    """One member's value as compact JSON (strings keep their characters; the template's
    ``v`` filter makes hidden ones visible)."""
    if value is _MISSING:
        return "(absent)"
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


_MISSING = object()


@dataclass(frozen=True)
class Member:
    part: str  # header | payload | signature
    name: str
    left: str
    right: str

    @property
    def differs(self) -> bool:
        return self.left != self.right


def compare(left: Decoded, right: Decoded) -> list[Member]:
    """Every header and payload member of either offer, and the signatures, side by side."""
    rows = []
    for part in ("header", "payload"):
        a, b = getattr(left, part), getattr(right, part)
        for name in sorted(set(a) | set(b)):
            rows.append(
                Member(part, name, show(a.get(name, _MISSING)), show(b.get(name, _MISSING)))
            )
    rows.append(Member("signature", "value", left.signature, right.signature))
    return rows


def variant_sentence(variant: str | None) -> str:
    """Profile §6.4's two kinds of equivocation, in one sentence each."""
    if variant == "signature-only":
        return (
            "Signature-only: both offers sign exactly the same header and payload, but their "
            "octets differ (a re-signed or randomised signature), so the same hop has two "
            "digests that a receiver could be shown one at a time."
        )
    if variant == "content":
        return (
            "Content: the issuer signed two different offers for the same hop id, so two "
            "receivers can hold valid, contradictory instructions; the differing members are "
            "highlighted below."
        )
    return "The issuer signed more than one offer for the same hop id (profile §6.4)."
