"""Server-sent events (``text/event-stream``): one body, many events.

The a2a-sdk streams by default (``SendStreamingMessage``, ``message/stream``, the HTTP+JSON
binding's ``:stream``) and MCP's Streamable HTTP may answer in an event stream: each event's
``data`` is one JSON-RPC message (or, in A2A's HTTP+JSON binding, one StreamResponse). A HAR
capture holds the whole stream as one body with one ``startedDateTime``, so an event's only
time within it is its position.

The parsing follows the WHATWG HTML "event stream interpretation" rules: lines end in CRLF,
LF or CR; a line starting with ``:`` is a comment; ``field: value`` loses one space after the
colon; several ``data`` lines join with LF; a blank line ends an event; an event without
``data`` is not dispatched; ``retry`` and unknown fields are ignored. One choice where a
capture differs from a live stream: an event cut off by the end of the body (no blank line
after it) is still dispatched, because a capture tool that trims the final blank line must
not hide the last event of a stream (often the terminal one).

``Decoder`` reads a stream incrementally (the taps feed it chunks as they pass);
``events`` reads a whole captured body. The service's capture reader uses this same parser
(app/capture/sse.py), so a stream reported live and one uploaded as HAR read alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

EVENT_STREAM = "text/event-stream"
# A body whose first line is an SSE field is an event stream whatever its declared type:
# JSON cannot start like this, so a HAR writer that lost the media type costs nothing.
_SSE_START = re.compile(r"(?:data|event|id|retry)(?::|\r|\n|$)|:")
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Event:
    """One dispatched event: its position in the stream (from 0), the line it started on
    (from 1), its ``data`` and its optional ``event`` type and ``id``."""

    index: int
    line: int
    data: str
    event: str | None = None
    id: str | None = None


def is_event_stream(media_type: object, text: str) -> bool:
    """Whether a captured body is an event stream: by its media type, else by its start."""
    if isinstance(media_type, str) and media_type.split(";", 1)[0].strip().lower() == EVENT_STREAM:
        return True
    return _SSE_START.match(text) is not None


class Decoder:
    """Incremental event-stream parser: ``feed`` text as it arrives, get finished events.

    A line is only read once its end is seen; a CR at the end of a chunk waits for the next
    chunk, which may begin with the LF of the same CRLF.
    """

    def __init__(self) -> None:
        self._buffer = ""
        self._line = 0
        self._index = 0
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._start = 0

    def feed(self, text: str) -> list[Event]:
        self._buffer += text
        done: list[Event] = []
        position = 0
        while (end := _LINE_END.search(self._buffer, position)) is not None:
            if end.group() == "\r" and end.end() == len(self._buffer):
                break  # maybe the first half of a CRLF split across chunks
            event = self._line_in(self._buffer[position : end.start()])
            if event is not None:
                done.append(event)
            position = end.end()
        self._buffer = self._buffer[position:]
        return done

    def close(self) -> list[Event]:
        """The end of the stream: a last line without an end, and a last event without a
        blank line after it, are dispatched (see the module docstring)."""
        done = self.feed("")
        if self._buffer:
            rest, self._buffer = self._buffer.rstrip("\r"), ""
            event = self._line_in(rest)
            if event is not None:
                done.append(event)
        event = self._dispatch()
        if event is not None:
            done.append(event)
        return done

    def _line_in(self, line: str) -> Event | None:
        self._line += 1
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment (sse-starlette's keep-alive pings are these)
        if not self._start:
            self._start = self._line  # the event's first field line
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\x00" not in value:
            self._id = value
        return None

    def _dispatch(self) -> Event | None:
        data, event = self._data, self._event
        self._data, self._event, start, self._start = [], None, self._start, 0
        if not data:
            return None
        found = Event(self._index, start, "\n".join(data), event, self._id)
        self._index += 1
        return found


def events(text: str) -> Iterator[Event]:
    """Every event of a whole captured stream, in order."""
    decoder = Decoder()
    yield from decoder.feed(text)
    yield from decoder.close()
