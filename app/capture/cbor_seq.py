"""CBOR captures (profile §10): RFC 8742 sequences, items back to back, read one at a time.

One CBOR object is a sequence of one, so every item is named ``name#N`` (N from 1).
Duplicate map keys are refused as in JSON; map keys must be strings (no hash-collision
work); nesting is bounded as in JSON; shared references are refused because they build
cyclic values.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import cbor2
from handoff_context._encoding import MAX_DEPTH

from app.capture.items import CaptureItem, CarrierError, ItemOrError


def read(reader: io.BufferedReader, name: str) -> Iterator[ItemOrError]:
    """Yield each item of the sequence; the first broken item ends it with a ``CarrierError``
    naming its byte offset (a CBOR sequence cannot be resynchronised)."""
    decoder = _decoder(reader)
    number = 0
    while reader.peek(1):
        offset = reader.tell()
        number += 1
        try:
            value = decoder.decode()
        except Exception as exc:  # cbor2 on hostile input raises many types; all mean broken
            yield CarrierError(
                f"{name}#{number}",
                f"CBOR item {number} at byte {offset} is not valid CBOR ({exc}); a CBOR "
                "sequence cannot be resynchronised, so the rest of it was not read",
            )
            return
        yield CaptureItem(f"{name}#{number}", value)


def refuse_shared(decoder: object, immutable: bool = False) -> object:
    """Shared references (tags 28, 29) can build cyclic values; no capture item, element
    or payload holds one."""
    raise cbor2.CBORDecodeError("shared references (tags 28, 29) are not allowed")


# The semantic decoders of every CBOR read of untrusted octets (captures, refused
# elements' payloads, the upload page's pasted COSE).
SHARED_REFUSED = {28: refuse_shared, 29: refuse_shared}
# cbor2's options for a strict read: nesting bounded as in JSON, no duplicate map keys,
# only strings and other hashable keys, no shared references.
_STRICT: dict[str, Any] = {
    "max_depth": MAX_DEPTH,
    "allow_duplicate_keys": False,
    "strict_hashable_types": True,
    "semantic_decoders": SHARED_REFUSED,
}


def strict_loads(octets: bytes) -> Any:
    """One CBOR value read as strictly as a capture's items are. Raises cbor2's errors."""
    return cbor2.loads(octets, **_STRICT)


def _decoder(stream: Any) -> cbor2.CBORDecoder:
    return cbor2.CBORDecoder(stream, **_STRICT)
