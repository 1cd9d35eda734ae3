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


def request_message(path: str, body: bytes) -> Any:
    """A request body as a message to report, or None. An A2A HTTP+JSON cancel is reported
    as the equivalent ``CancelTask`` request, because only its path names the task."""
    if not body or len(body) > MAX_BODY:
        return None
    payload = _json(body)
    match = _REST_CANCEL.search(path)
    if match and isinstance(payload, dict) and "method" not in payload:
        params = {**payload, "id": urllib.parse.unquote(match.group(1))}
        return {"jsonrpc": "2.0", "id": None, "method": "CancelTask", "params": params}
    return payload


class ResponseReader:
    """Reads a response as it passes: ``feed`` each chunk, then ``close``. An event stream
    is reported event by event, as each event completes; anything else once, whole."""

    def __init__(self, content_type: str | None, report: Report) -> None:
        self._report = report
        self._stream = is_event_stream(content_type, "") if content_type else False
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._decoder = Decoder()
        self._body = bytearray()
        self._overflow = False

    def feed(self, chunk: bytes) -> None:
        if self._stream:
            for event in self._decoder.feed(self._text.decode(chunk)):
                self._one(event.data)
        elif not self._overflow:
            self._body += chunk
            if len(self._body) > MAX_BODY:
                self._overflow, self._body = True, bytearray()

    def close(self) -> None:
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
