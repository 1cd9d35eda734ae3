"""What a capture reader yields (profile §10): a payload with its place, a problem with its
place, or nothing (an item that holds no payload).

Shared by every format reader (``app.capture.json_doc``, ``jsonl``, ``har``, ``cbor_seq``)
and by ``app.capture.carriers``, which looks inside each payload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

from handoff_context._frozen import quick_init

from app.errors import ItemProblem


class CaptureFormat(StrEnum):
    """The capture file formats of profile §10."""

    JSON = "json"
    JSONL = "jsonl"
    HAR = "har"
    CBOR = "cbor"


# An item of the capture that is malformed; ``detail`` says what and where. The service's
# one record of a per-item problem, under the name the capture readers have always used.
CarrierError = ItemProblem


@quick_init
@dataclass(frozen=True, slots=True)
class CaptureItem:
    """One decoded payload of a capture file and where it came from."""

    source: str
    value: object
    received_at: float | None = None  # HAR: the entry's startedDateTime, sub-second
    # The item's position within what shares its receive time (an event of a HAR stream),
    # so that host task states from one stream are judged in stream order.
    seq: int = 0
    # HAR, a request body: the URL path (the A2A HTTP+JSON binding names the method in it).
    path: str | None = None
    # The JSON text the value was parsed from, as read (a JSON Lines line, an array element,
    # a HAR body), or None (CBOR, a stream event): byte searches that can rule an item out
    # before its value is walked (``app.envelope.extract.may_hold_items``), and the check
    # that its value holds no float (``app.ingest.envelope.payload_octets``).
    raw: bytes | None = field(default=None, compare=False, repr=False)


# An item that holds no payload at all (a HAR body that is not JSON) is None: it is counted
# as an item without a handoff, not as an error.
ItemOrError = CaptureItem | CarrierError | None

JSON_SPACE = b" \t\r\n"
NON_SPACE = re.compile(rb"[^ \t\r\n]")


def label(name: str) -> str:
    """How a detail names the whole file: standard input ("-") is "the capture"."""
    return "the capture" if name == "-" else name
