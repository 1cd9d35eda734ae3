"""Which capture format a file is in (profile §10): by content type, file extension or content."""

from __future__ import annotations

import re
from typing import BinaryIO

from handoff_context import strict_json_loads
from handoff_context.errors import MalformedError

from app.capture import streams
from app.capture.items import NON_SPACE, CaptureFormat

_CONTENT_TYPES = {
    "application/json": CaptureFormat.JSON,
    "application/x-ndjson": CaptureFormat.JSONL,
    "application/ndjson": CaptureFormat.JSONL,
    "application/jsonl": CaptureFormat.JSONL,
    "application/x-jsonlines": CaptureFormat.JSONL,
    "application/har+json": CaptureFormat.HAR,
    "application/cbor": CaptureFormat.CBOR,
    "application/cbor-seq": CaptureFormat.CBOR,
}
_EXTENSIONS = {
    ".json": CaptureFormat.JSON,
    ".jsonl": CaptureFormat.JSONL,
    ".ndjson": CaptureFormat.JSONL,
    ".har": CaptureFormat.HAR,
    ".cbor": CaptureFormat.CBOR,
}
_BOM = b"\xef\xbb\xbf"
# Every HAR writer puts the "log" member first (HAR 1.2 has no other top-level member).
_HAR_START = re.compile(rb'\{[ \t\r\n]*"log"[ \t\r\n]*:[ \t\r\n]*\{')
_HEAD_OCTETS = 1 << 20  # enough to sniff: the first line, or the start of a document


def detect_format(
    data: bytes, *, name: str | None = None, content_type: str | None = None, live: bool = False
) -> CaptureFormat:
    """Pick the capture format: by content type, else by file extension, else by content.

    Sniffing: a first non-space byte ``{`` or ``[`` is JSON, or JSON Lines when the first
    line is a whole JSON object or array on its own and another line follows, or HAR when the
    document opens with ``{"log": {``; anything else is CBOR. Whitespace only is JSON Lines
    (no items). ``live``: the data is the head of a pipe fed live, where one whole JSON
    object line with nothing after it yet is a JSON Lines feed (``stream_head``). Never
    raises.
    """
    if content_type:
        media_type = content_type.split(";", 1)[0].strip().lower()
        if media_type in _CONTENT_TYPES:
            return _CONTENT_TYPES[media_type]
    if name:
        dot = name.rfind(".")
        if dot > name.rfind("/") and name[dot:].lower() in _EXTENSIONS:
            return _EXTENSIONS[name[dot:].lower()]
    if live and _one_whole_line(data):
        return CaptureFormat.JSONL
    return _sniff(data)


def _one_whole_line(head: bytes) -> bool:
    """The head is one whole JSON object on its line, and nothing after it yet."""
    first = NON_SPACE.search(head)
    end = -1 if first is None else head.find(b"\n", first.start())
    if first is None or end < 0 or NON_SPACE.search(head, end) or head[first.start()] != ord("{"):
        return False
    try:
        return isinstance(strict_json_loads(head[first.start() : end], what="line"), dict)
    except MalformedError:
        return False


def _sniff(data: bytes) -> CaptureFormat:
    # A BOM is skipped here so that the JSON reader, not the CBOR one, reports it.
    first = NON_SPACE.search(data, len(_BOM) if data.startswith(_BOM) else 0)
    if first is None:
        return CaptureFormat.JSONL
    start = first.start()
    if data[start : start + 1] not in (b"{", b"["):
        return CaptureFormat.CBOR
    if _HAR_START.match(data, start):
        return CaptureFormat.HAR
    end = data.find(b"\n", start)
    if end >= 0 and NON_SPACE.search(data, end):
        try:
            first_line = strict_json_loads(data[start:end], what="the first line")
        except MalformedError:
            return CaptureFormat.JSON
        if isinstance(first_line, dict | list):
            return CaptureFormat.JSONL
    return CaptureFormat.JSON


def stream_head(stream: BinaryIO, *, live: bool = False) -> bytes:
    """The first bytes of ``stream``, as many as ``detect_format`` looks at (the first line
    and the start of the next; at most ~1 MiB more than a chunk); ``read_stream`` reads
    them again."""
    head = streams.read_some(stream, streams.STREAM_CHUNK)
    # A live pipe (a feed from running agents) stops at one whole JSON line: waiting for
    # the next would hold the first until more traffic comes (``detect_format(live=)``).
    while len(head) < _HEAD_OCTETS and not _sniffable(head):
        if live and _one_whole_line(head):
            break
        more = streams.read_some(stream, streams.STREAM_CHUNK)
        if not more:
            break
        head += more
    return head


def _sniffable(head: bytes) -> bool:
    first = NON_SPACE.search(head)
    end = -1 if first is None else head.find(b"\n", first.start())
    return end >= 0 and NON_SPACE.search(head, end) is not None
