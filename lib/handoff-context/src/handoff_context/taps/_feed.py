"""What both taps do with the bytes they see pass: parse a request body, and read a
response (JSON whole, an event stream event by event) into messages for a ``Reporter``.

Nothing here may harm the traffic: every function swallows what it cannot read (the
reporter counts nothing for it), and never holds more than ``MAX_BODY`` of one body.
"""

from __future__ import annotations

import codecs
import json
import re
import urllib.parse
import zlib
from collections.abc import Callable
from typing import Any

from handoff_context.taps.sse import Decoder, is_event_stream

# Far above any carrier message (elements are at most 64 KiB); a larger body is passed on
# untouched and not reported.
MAX_BODY = 8 << 20
# The A2A HTTP+JSON binding's cancel names the task in its path only.
_REST_CANCEL = re.compile(r"/tasks/([^/]+):cancel$")

Report = Callable[[Any], None]


def _json(octets: bytes | str) -> Any:
    try:
        return json.loads(octets)
    except ValueError:  # not JSON (or not UTF-8): nothing to report
        return None


def request_message(path: str, body: bytes, content_encoding: str | None = None) -> Any:
    """A request body as a message to report, or None. A compressed body
    (``content_encoding``) is read decompressed. An A2A HTTP+JSON cancel is reported as
    the equivalent ``CancelTask`` request, because only its path names the task."""
    if content_encoding:
        inflater = Inflater(content_encoding)
        body = inflater.feed(body)
        if inflater.failed:
            return None
    if not body or len(body) > MAX_BODY:
        return None
    payload = _json(body)
    match = _REST_CANCEL.search(path)
    if match and isinstance(payload, dict) and "method" not in payload:
        params = {**payload, "id": urllib.parse.unquote(match.group(1))}
        return {"jsonrpc": "2.0", "id": None, "method": "CancelTask", "params": params}
    return payload


# zlib's window bits: a gzip member, or a zlib stream (HTTP's "deflate", RFC 9110 section 8.4.1.2).
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
_STEP = 1 << 16  # decompressed octets produced per step (a small chunk cannot balloon)


class Inflater:
    """Undoes a body's ``Content-Encoding`` (gzip or deflate, in the order applied),
    chunk by chunk, for reading only: the body itself passes on compressed. An encoding
    it does not know (br, zstd) or a broken stream makes it ``failed``: that body is not
    reported."""

    def __init__(self, content_encoding: str | None) -> None:
        names = [n.strip().lower() for n in (content_encoding or "").split(",")]
        names = [n for n in names if n and n != "identity"]
        self.failed = any(n not in _WBITS for n in names)
        # Applied in the order listed, so undone from the last.
        self._stages = (
            [] if self.failed else [zlib.decompressobj(_WBITS[n]) for n in reversed(names)]
        )

    def feed(self, chunk: bytes) -> bytes:
        if self.failed:
            return b""
        try:
            for stage in self._stages:
                out = bytearray()
                data = chunk
                while data:
                    out += stage.decompress(data, _STEP)
                    data = stage.unconsumed_tail
                    if len(out) > MAX_BODY:  # far beyond a carrier message: a bomb
                        self.failed = True
                        return b""
                chunk = bytes(out)
        except zlib.error:
            self.failed = True
            return b""
        return chunk


class ResponseReader:
    """Reads a response as it passes: ``feed`` each chunk, then ``close``. An event stream
    is reported event by event, as each event completes; anything else once, whole. A
    compressed answer (``content_encoding``) is read decompressed."""

    def __init__(
        self, content_type: str | None, report: Report, content_encoding: str | None = None
    ) -> None:
        self._report = report
        self._inflater = Inflater(content_encoding)
        self._stream = is_event_stream(content_type, "") if content_type else False
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._decoder = Decoder()
        self._body = bytearray()
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        chunk = self._inflater.feed(chunk)
        if self._inflater.failed:
            self._overflow = True  # nothing of it will be reported
            return
        if self._stream:
            for event in self._decoder.feed(self._text.decode(chunk)):
                self._one(event.data)
        elif not self._overflow:
            self._body += chunk
            if len(self._body) > MAX_BODY:
                self._overflow, self._body = True, bytearray()

    def close(self) -> None:
        if self._inflater.failed:
            return
        if self._stream:
            for event in self._decoder.feed(self._text.decode(b"", final=True)):
                self._one(event.data)
            for event in self._decoder.close():
                self._one(event.data)
        elif self._body and not self._overflow:
            self._one(bytes(self._body))
            self._body = bytearray()

    def _one(self, data: bytes | str) -> None:
        payload = _json(data)
        if payload is not None:
            self._report(payload)
