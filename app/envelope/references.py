"""Reference checks for an envelope's url parts (docs/envelopes.md, "References").

A url part names bulky evidence by location with ``sha256`` and ``bytes`` metadata. Like a
signed ref (profile §5) it is checked against the objects the receiver holds
(``handoff_context.ObjectIndex``) and never fetched: ``verified`` when an object with that
SHA-256 (and size, when given) is held; ``mismatch`` when the object the part names (its
filename, else the last segment of the URL path) is held but its digest or size differs;
``unverifiable`` otherwise; ``missing-hash`` without a usable ``sha256``.

A signed URL also says when it stops working. Its expiry is read from the query parameters
of the common signing schemes and compared with the time the handoff was received: a link
that was dead on arrival left the receiver with partial state.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from handoff_context import AvailableObject, ObjectIndex

_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


class RefCheck(StrEnum):
    VERIFIED = "verified"
    MISMATCH = "mismatch"
    UNVERIFIABLE = "unverifiable"
    MISSING_HASH = "missing-hash"
    EXPIRED = "expired"


@dataclass(frozen=True)
class UrlPart:
    """A url part as found, in either A2A shape."""

    url: str
    media_type: str | None
    filename: str | None
    sha256: object  # as found; checked here
    size: object


def check_reference(part: UrlPart, *, objects: ObjectIndex, received_at: int) -> dict[str, Any]:
    """The part and its outcomes, as stored on the envelope item.

    ``hash`` is the content check (verified, mismatch, unverifiable, missing-hash);
    ``expires`` the signed URL's expiry (None: not a signed URL we can read) and
    ``expired`` whether it passed before ``received_at``. ``outcome`` is the one word the
    case page shows: a mismatch first, then an expired link, then the hash check.
    """
    # A2A 1.0 metadata is a protobuf Struct, so a size arrives as a float (55.0).
    if isinstance(part.size, float) and part.size.is_integer():
        part = replace(part, size=int(part.size))
    hash_outcome, detail = _hash_check(part, objects)
    expires = url_expiry(part.url)
    expired = expires is not None and expires < received_at
    outcome = hash_outcome
    if expires is not None and expired and hash_outcome is not RefCheck.MISMATCH:
        outcome = RefCheck.EXPIRED
        late = f"the signed URL expired at {expires}, {received_at - expires} s before receipt"
        detail = late if detail is None else f"{late}; {detail}"
    return {
        "url": part.url,
        "media_type": part.media_type,
        "filename": part.filename,
        "sha256": part.sha256 if isinstance(part.sha256, str) else None,
        "size": part.size if _is_size(part.size) else None,
        "hash": hash_outcome.value,
        "expires": expires,
        "expired": expired,
        "outcome": outcome.value,
        "detail": detail,
    }


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _hash_check(part: UrlPart, objects: ObjectIndex) -> tuple[RefCheck, str | None]:
    if part.sha256 is None:
        return RefCheck.MISSING_HASH, "no sha256 in the part's metadata"
    if not isinstance(part.sha256, str) or not _SHA256_HEX.fullmatch(part.sha256):
        return RefCheck.MISSING_HASH, "sha256 is not 64 hexadecimal digits"
    size = part.size
    held = objects.by_digest.get(bytes.fromhex(part.sha256))
    if held is not None:
        if _is_size(size) and size != len(held.content):
            return RefCheck.MISMATCH, f"{held.name!r} is {len(held.content)} bytes, not {size}"
        return RefCheck.VERIFIED, None
    named = _named(part, objects)
    if named is None:
        return RefCheck.UNVERIFIABLE, "object not available"
    digest = hashlib.sha256(named.content).hexdigest()
    return RefCheck.MISMATCH, f"SHA-256 of {named.name!r} is {digest}, not {part.sha256.lower()}"


def _named(part: UrlPart, objects: ObjectIndex) -> AvailableObject | None:
    path = unquote(urlsplit(part.url).path).rstrip("/")
    for label in (part.filename, path.rsplit("/", 1)[-1] if path else None):
        if label and label in objects.by_name:
            return objects.by_name[label]
    return None


# --- signed URL expiry ------------------------------------------------------------------


def url_expiry(url: str) -> int | None:
    """When a signed URL stops working (NumericDate seconds), from its query: AWS SigV4
    (``X-Amz-Date`` + ``X-Amz-Expires``), Google V4 (``X-Goog-Date`` + ``X-Goog-Expires``),
    ``Expires`` (epoch seconds: AWS SigV2, CloudFront, Google V2), Azure SAS ``se`` (ISO
    8601). None when none of them is present and well-formed. Never raises."""
    try:
        query = parse_qs(urlsplit(url).query, keep_blank_values=True)
    except ValueError:
        return None
    params = {k.lower(): v[0] for k, v in query.items() if v}
    for date_key, ttl_key in (("x-amz-date", "x-amz-expires"), ("x-goog-date", "x-goog-expires")):
        if date_key in params and ttl_key in params:
            start = _basic_time(params[date_key])
            ttl = _int(params[ttl_key])
            if start is not None and ttl is not None:
                return start + ttl
    if "expires" in params:
        return _int(params["expires"])
    if "se" in params:
        return _iso_time(params["se"])
    return None


def _int(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 16 else None


def _basic_time(text: str) -> int | None:
    # SigV4's ISO 8601 basic format: 20240501T120000Z.
    try:
        moment = datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(moment.timestamp())


def _iso_time(text: str) -> int | None:
    # Azure writes 2024-05-01T12:00:00Z or just a date; without an offset it means UTC.
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp())
