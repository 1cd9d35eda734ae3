"""Capture files (SPEC 10): which format a file is in, and the payloads it holds.

This module splits a capture file into items (JSON array elements, JSON Lines lines, HAR
bodies, CBOR sequence items) and decodes each strictly. It knows nothing about A2A or MCP;
``app.capture.carriers`` looks inside each payload. Nothing here raises on bad input: a bad item
becomes a ``CarrierError`` naming its position.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import io
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, BinaryIO

import cbor2
from handoff_context.encoding import MAX_DEPTH, MAX_SAFE_INT, strict_json_loads
from handoff_context.errors import MalformedError

from app.capture import sse


class CaptureFormat(StrEnum):
    """The capture file formats of SPEC 10."""

    JSON = "json"
    JSONL = "jsonl"
    HAR = "har"
    CBOR = "cbor"


@dataclass(frozen=True)
class CarrierError:
    """An item of the capture that is malformed; ``detail`` says what and where."""

    source: str
    detail: str


@dataclass(frozen=True)
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


# An item that holds no payload at all (a HAR body that is not JSON) is None: it is counted
# as an item without a handoff, not as an error.
ItemOrError = CaptureItem | CarrierError | None


# --- format detection -------------------------------------------------------------------

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
_JSON_SPACE = b" \t\r\n"
_NON_SPACE = re.compile(rb"[^ \t\r\n]")
# Every HAR writer puts the "log" member first (HAR 1.2 has no other top-level member).
_HAR_START = re.compile(rb'\{[ \t\r\n]*"log"[ \t\r\n]*:[ \t\r\n]*\{')


def detect_format(
    data: bytes, *, name: str | None = None, content_type: str | None = None, live: bool = False
) -> CaptureFormat:
    """Pick the capture format: by content type, else by file extension, else by content.

    Sniffing: a first non-space byte ``{`` or ``[`` is JSON, or JSON Lines when the first
    line is a whole JSON object or array on its own and another line follows, or HAR when the
    document opens with ``{"log": {``; anything else is CBOR. Whitespace only is JSON Lines
    (no items). Never raises.
    """
    if content_type:
        media_type = content_type.split(";", 1)[0].strip().lower()
        if media_type in _CONTENT_TYPES:
            return _CONTENT_TYPES[media_type]
    if name:
        dot = name.rfind(".")
        if dot > name.rfind("/") and name[dot:].lower() in _EXTENSIONS:
            return _EXTENSIONS[name[dot:].lower()]
    # --- live pipes: one whole JSON line so far is a JSON Lines feed (``stream_head``) ---
    if live and _one_whole_line(data):
        return CaptureFormat.JSONL
    return _sniff(data)


def _one_whole_line(head: bytes) -> bool:
    """The head is one whole JSON object or array on its line, and nothing after it yet."""
    first = _NON_SPACE.search(head)
    end = -1 if first is None else head.find(b"\n", first.start())
    if first is None or end < 0 or _NON_SPACE.search(head, end) or head[first.start()] != ord("{"):
        return False
    try:
        return isinstance(strict_json_loads(head[first.start() : end], what="line"), dict)
    except MalformedError:
        return False


def _sniff(data: bytes) -> CaptureFormat:
    # A BOM is skipped here so that the JSON reader, not the CBOR one, reports it.
    first = _NON_SPACE.search(data, len(_BOM) if data.startswith(_BOM) else 0)
    if first is None:
        return CaptureFormat.JSONL
    start = first.start()
    if data[start : start + 1] not in (b"{", b"["):
        return CaptureFormat.CBOR
    if _HAR_START.match(data, start):
        return CaptureFormat.HAR
    end = data.find(b"\n", start)
    if end >= 0 and _NON_SPACE.search(data, end):
        try:
            first_line = strict_json_loads(data[start:end], what="the first line")
        except MalformedError:
            return CaptureFormat.JSON
        if isinstance(first_line, dict | list):
            return CaptureFormat.JSONL
    return CaptureFormat.JSON


# --- splitting a capture into items -----------------------------------------------------


def read_items(
    data: bytes, *, name: str, fmt: CaptureFormat, watch: tuple[bytes, ...] = ()
) -> Iterator[ItemOrError]:
    """Yield the capture's items in file order: a payload, an error, or None (no payload).

    ``watch``: byte strings (the carrier keys) that make a HAR body that fails to parse an
    error instead of a skipped non-JSON body.
    """
    if fmt is CaptureFormat.JSON:
        return _json_items(data, name, watch)
    if fmt is CaptureFormat.JSONL:
        return _jsonl_items(data, name)
    if fmt is CaptureFormat.HAR:
        return _har_items(data, name, watch)
    return _cbor_items(data, name)


def _what(name: str) -> str:
    return "the capture" if name == "-" else name


def _json_items(data: bytes, name: str, watch: tuple[bytes, ...]) -> Iterator[ItemOrError]:
    # SPEC 10: one payload or an array of payloads. A HAR sent as plain JSON is still a HAR.
    try:
        document = strict_json_loads(data, what=_what(name))
    except MalformedError as exc:
        yield CarrierError(name, exc.detail)
        return
    if _is_har(document):
        yield from _har_entries(document, name, watch)
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield CaptureItem(f"{name}[{index}]", value)
    else:
        yield CaptureItem(name, document)


def _jsonl_items(data: bytes, name: str) -> Iterator[ItemOrError]:
    # Line by line without splitting the whole input: only one line is copied at a time.
    # Each line is parsed strictly on its own, so a bad line costs only itself.
    line_number = 0
    position = 0
    while position < len(data):
        end = data.find(b"\n", position)
        if end < 0:
            end = len(data)
        line_number += 1
        line = data[position:end]
        position = end + 1
        if not line.strip(_JSON_SPACE):
            continue
        source = f"{name}:{line_number}"
        try:
            value = strict_json_loads(line, what=f"line {line_number}")
        except MalformedError as exc:
            yield CarrierError(source, exc.detail)
            continue
        yield CaptureItem(source, value)


# --- HAR 1.2 ----------------------------------------------------------------------------


def _is_har(document: object) -> bool:
    log = document.get("log") if isinstance(document, dict) else None
    return isinstance(log, dict) and isinstance(log.get("entries"), list)


def _har_items(data: bytes, name: str, watch: tuple[bytes, ...]) -> Iterator[ItemOrError]:
    try:
        document = strict_json_loads(data, what=_what(name))
    except MalformedError as exc:
        yield CarrierError(name, exc.detail)
        return
    if not _is_har(document):
        yield CarrierError(
            name, f'{_what(name)} is not a HAR log: no {{"log": {{"entries": [...]}}}}'
        )
        return
    yield from _har_entries(document, name, watch)


def _har_entries(
    document: dict[str, Any], name: str, watch: tuple[bytes, ...]
) -> Iterator[ItemOrError]:
    for index, entry in enumerate(document["log"]["entries"]):
        where = f"entries[{index}]"
        if not isinstance(entry, dict):
            yield CarrierError(f"{name}:{where}", f"{where} is not an object")
            continue
        # SPEC 10: the entry's startedDateTime is when its bodies were received. Without it
        # freshness would be judged at upload time, so an entry without one is an error.
        try:
            received_at = _har_time(entry.get("startedDateTime"))
        except ValueError:
            yield CarrierError(
                f"{name}:{where}", f"{where}.startedDateTime is not an ISO 8601 date-time"
            )
            continue
        for side, body_member in (("request", "postData"), ("response", "content")):
            # The A2A HTTP+JSON binding names a request's method in its path.
            path = _har_path(entry) if side == "request" else None
            message = entry.get(side)
            body = message.get(body_member) if isinstance(message, dict) else None
            if not isinstance(body, dict) or not isinstance(body.get("text"), str):
                continue  # no body: nothing was carried, and it is not an item
            if not body["text"]:
                continue
            source, what = f"{name}:{where}.{side}", f"{where}.{side}"
            # --- seam: an event-stream body is many payloads (app.capture.sse) ---
            stream = sse.is_event_stream(body.get("mimeType"), body["text"])
            if stream and body.get("encoding") is None:
                for event, value in sse.payloads(body["text"], watch=watch):
                    at = f"{source} event {event.index} (line {event.line})"
                    if isinstance(value, MalformedError):
                        yield CarrierError(at, f"{what} {value.detail}")
                    elif value is not None:
                        yield CaptureItem(at, value, received_at, event.index, path)
                    else:
                        yield None
                continue
            # --- end of seam ---
            yield _at(
                _har_body(
                    body["text"],
                    body.get("encoding"),
                    source=source,
                    what=what,
                    received_at=received_at,
                    watch=watch,
                ),
                received_at,
                path,
            )


def _at(item: ItemOrError, received_at: float, path: str | None) -> ItemOrError:
    """A HAR item with its entry's receive time and request path."""
    if isinstance(item, CaptureItem):
        return dataclasses.replace(item, received_at=received_at, path=path)
    return item


def _har_path(entry: dict[str, Any]) -> str | None:
    request = entry.get("request")
    url = request.get("url") if isinstance(request, dict) else None
    return urllib.parse.urlsplit(url).path if isinstance(url, str) else None


def _har_time(value: object) -> float:
    """HAR startedDateTime -> seconds since the epoch, with its fraction (milliseconds in
    HAR). Freshness floors it to NumericDate seconds later. Raises ValueError."""
    if not isinstance(value, str):
        raise ValueError("startedDateTime must be a string")
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # HAR requires an offset; assume UTC without one
    seconds = moment.timestamp()
    if not 0 <= seconds <= MAX_SAFE_INT:
        raise ValueError("startedDateTime is before 1970")
    return seconds


def _har_body(
    text: str,
    encoding: object,
    *,
    source: str,
    what: str,
    received_at: float,
    watch: tuple[bytes, ...],
) -> ItemOrError:
    if encoding == "base64":
        try:
            octets = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return CarrierError(source, f"{what} body is marked base64 but is not valid base64")
    elif encoding is None:
        # surrogatepass: a lone surrogate (from a JSON escape in the HAR) must make the body
        # fail the strict UTF-8 check below rather than fail here.
        octets = text.encode("utf-8", errors="surrogatepass")
    else:
        return CarrierError(source, f"{what} body has an unsupported encoding {encoding!r}")
    try:
        value = strict_json_loads(octets, what=f"{what} body")
    except MalformedError as exc:
        # SPEC 10 reads only bodies that parse as JSON; the rest of a browser's traffic is
        # skipped. A JSON-looking body that names a carrier key is reported all the same:
        # skipping it could hide a handoff (duplicate members, a truncated capture).
        first = _NON_SPACE.search(octets)
        looks_like_json = first is not None and octets[first.start()] in b"{["
        if looks_like_json and any(key in octets for key in watch):
            return CarrierError(source, exc.detail)
        return None
    return CaptureItem(source, value, received_at)


# --- CBOR (RFC 8742 sequences) ----------------------------------------------------------


def _cbor_decoder(stream: Any) -> cbor2.CBORDecoder:
    """A strict decoder for capture items (see ``_cbor_items``)."""
    return cbor2.CBORDecoder(
        stream,
        max_depth=MAX_DEPTH,
        allow_duplicate_keys=False,
        strict_hashable_types=True,
        semantic_decoders={28: _refuse_shared, 29: _refuse_shared},
    )


def _refuse_shared(decoder: object, immutable: bool = False) -> object:
    raise cbor2.CBORDecodeError("shared references (tags 28, 29) are not allowed")


def _cbor_items(data: bytes, name: str) -> Iterator[ItemOrError]:
    # RFC 8742: a CBOR sequence is items back to back; one object is a sequence of one, so
    # every item is named "name#N" (N from 1). Duplicate map keys are refused as in JSON; map
    # keys must be strings (no hash-collision work); nesting is bounded as in JSON; shared
    # references are refused because they build cyclic values.
    stream = io.BytesIO(data)
    decoder = _cbor_decoder(stream)
    number = 0
    while (offset := stream.tell()) < len(data):
        number += 1
        try:
            value = decoder.decode()
        except Exception as exc:  # cbor2 on hostile input raises many types; all mean broken
            yield CarrierError(
                f"{name}#{number}",
                f"CBOR item {number} at byte {offset} is not valid CBOR ({exc}); a CBOR "
                f"sequence cannot be resynchronised, so its last {len(data) - offset} bytes "
                "were not read",
            )
            return
        yield CaptureItem(f"{name}#{number}", value)


# --- streaming: a capture read from a binary file -------------------------------------------
#
# ``read_stream`` yields the same items as ``read_items`` without holding the file: JSON
# Lines line by line, CBOR sequences item by item, a JSON array element by element. A JSON
# document that is not an array (one payload, or a HAR log) is read whole: HAR is one
# document, and ``detect_format`` needs no more than the file's first line.
#
# Where streaming must differ from the whole-document reader: a JSON array that is broken
# part-way (truncated, a missing comma) yields the elements before the break and then one
# error naming the byte offset, where the whole-document reader yields only the error.

STREAM_CHUNK = 1 << 16
# One JSON Lines line or one JSON array element at most: far above any carrier message
# (elements are at most 64 KiB by default), so only a broken file meets it; it bounds the
# memory one item can take.
MAX_ITEM_OCTETS = 16 << 20
_HEAD_OCTETS = 1 << 20  # enough to sniff: the first line, or the start of a document


def stream_head(stream: BinaryIO, *, live: bool = False) -> bytes:
    """The first bytes of ``stream``, as many as ``detect_format`` looks at (the first line
    and the start of the next; at most ~1 MiB more than a chunk); ``read_stream`` reads
    them again."""
    head = _read_some(stream, STREAM_CHUNK)
    # A live pipe (a feed from running agents) stops at one whole JSON line: waiting for
    # the next would hold the first until more traffic comes (``detect_format(live=)``).
    while len(head) < _HEAD_OCTETS and not _sniffable(head):
        if live and _one_whole_line(head):
            break
        more = _read_some(stream, STREAM_CHUNK)
        if not more:
            break
        head += more
    return head


def _read_some(stream: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes, returning as soon as some are there: on a pipe fed live (a tap),
    ``read(n)`` would wait for all ``n``."""
    read1 = getattr(stream, "read1", None)
    return bytes(read1(n)) if read1 is not None else stream.read(n)


def _sniffable(head: bytes) -> bool:
    first = _NON_SPACE.search(head)
    end = -1 if first is None else head.find(b"\n", first.start())
    return end >= 0 and _NON_SPACE.search(head, end) is not None


def read_stream(
    stream: BinaryIO,
    head: bytes,
    *,
    name: str,
    fmt: CaptureFormat,
    watch: tuple[bytes, ...] = (),
) -> Iterator[ItemOrError]:
    """Like ``read_items``, from a binary stream whose first bytes ``head`` were already
    read from it (``stream_head``)."""
    reader = io.BufferedReader(_Prefixed(head, stream), STREAM_CHUNK)  # type: ignore[arg-type]
    if fmt is CaptureFormat.JSONL:
        return _jsonl_stream(reader, name)
    if fmt is CaptureFormat.CBOR:
        return _cbor_stream(reader, name)
    first = _NON_SPACE.search(head)
    if fmt is CaptureFormat.JSON and first is not None and head[first.start()] == ord("["):
        return _json_array_stream(reader, name)
    data = reader.read()
    return read_items(data, name=name, fmt=fmt, watch=watch)


class _Prefixed(io.RawIOBase):
    """``head`` and then the rest of ``stream``, as one raw stream."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head = memoryview(head)
        self._stream = stream
        self._read = 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._read

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            self._read += n
            return n
        data = _read_some(self._stream, len(buffer))
        buffer[: len(data)] = data
        self._read += len(data)
        return len(data)


def _jsonl_stream(reader: io.BufferedReader, name: str) -> Iterator[ItemOrError]:
    line_number = 0
    while line := reader.readline(MAX_ITEM_OCTETS + 1):
        line_number += 1
        source = f"{name}:{line_number}"
        if len(line) > MAX_ITEM_OCTETS and not line.endswith(b"\n"):
            while (rest := reader.readline(MAX_ITEM_OCTETS)) and not rest.endswith(b"\n"):
                pass  # skip to the end of the over-long line
            yield CarrierError(source, f"line {line_number} is longer than {MAX_ITEM_OCTETS} bytes")
            continue
        if not line.strip(_JSON_SPACE):
            continue
        try:
            value = strict_json_loads(line.rstrip(b"\n"), what=f"line {line_number}")
        except MalformedError as exc:
            yield CarrierError(source, exc.detail)
            continue
        yield CaptureItem(source, value)


def _cbor_stream(reader: io.BufferedReader, name: str) -> Iterator[ItemOrError]:
    decoder = _cbor_decoder(reader)
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


# Outside a string, the bytes that change the nesting or end an element; inside one, the
# bytes that may end it.
_STRUCTURE = re.compile(rb'["\[\]{},]')
_IN_STRING = re.compile(rb'["\\]')


def _json_array_stream(reader: io.BufferedReader, name: str) -> Iterator[ItemOrError]:
    """The elements of a top-level JSON array, each parsed strictly on its own."""
    what = _what(name)
    buffer = bytearray()
    base = 0  # file offset of buffer[0]
    pos = 0  # scan position in buffer
    start = -1  # where the current element starts (after "[" or ","); -1 before the "["
    depth = 0  # nesting inside the current element
    in_string = closed = False
    index = 0

    def broken(detail: str) -> CarrierError:
        return CarrierError(name, f"{what} is not valid JSON: {detail}")

    while True:
        if pos >= len(buffer):
            chunk = reader.read(STREAM_CHUNK)
            if not chunk:
                break
            keep = max(start, 0) if not closed else pos
            del buffer[:keep]
            base, pos, start = base + keep, pos - keep, (start - keep if start >= 0 else -1)
            buffer += chunk
            if start >= 0 and len(buffer) - start > MAX_ITEM_OCTETS:
                yield broken(f"element {index} is longer than {MAX_ITEM_OCTETS} bytes")
                return
        if closed:
            if buffer[pos:].strip(_JSON_SPACE):
                yield broken(f"data after the array at byte {base + pos}")
                return
            pos = len(buffer)
        elif start < 0:
            first = _NON_SPACE.search(buffer, pos)
            pos = len(buffer) if first is None else first.end()  # past the "["
            start = -1 if first is None else pos
        elif in_string:
            found = _IN_STRING.search(buffer, pos)
            if found is None:
                pos = len(buffer)
            elif found.group() == b'"':
                in_string, pos = False, found.end()
            elif found.end() < len(buffer):
                pos = found.end() + 1  # past the escaped byte
            else:  # the escaped byte is in the next chunk
                chunk = reader.read(STREAM_CHUNK)
                if not chunk:
                    break
                buffer += chunk
        else:
            found = _STRUCTURE.search(buffer, pos)
            if found is None:
                pos = len(buffer)
                continue
            byte, pos = found.group(), found.end()
            if byte == b'"':
                in_string = True
            elif byte in b"[{":
                depth += 1
            elif depth > 0:
                depth -= byte != b","  # a "," inside the element separates nothing here
            elif byte == b"}":
                yield broken(f"unbalanced }} at byte {base + found.start()}")
                return
            else:  # "," or "]" ending an element
                element = bytes(buffer[start : found.start()]).strip(_JSON_SPACE)
                closed = byte == b"]"
                start = pos
                if not element and closed and index == 0:
                    continue  # an empty array
                source = f"{name}[{index}]"
                index += 1
                if not element:
                    yield broken(f"an element is missing at byte {base + found.start()}")
                    return
                try:
                    yield CaptureItem(source, strict_json_loads(element, what=source))
                except MalformedError as exc:
                    yield CarrierError(source, exc.detail)
    if start >= 0 and not closed:
        yield broken(f"the array ends early at byte {base + len(buffer)}")
