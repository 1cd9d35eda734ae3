"""Event streams in capture files: each event of a ``text/event-stream`` body is a payload.

The parser itself is the library's (``handoff_context.taps.sse``, shared with the live
taps); this module reads each event's ``data`` the way capture reads a HAR body (profile §10,
docs/profile.md §10.5).
"""

from __future__ import annotations

from collections.abc import Iterator

from handoff_context import strict_json_loads
from handoff_context.errors import MalformedError
from handoff_context.taps.sse import Decoder, Event, events, is_event_stream

__all__ = ["Decoder", "Event", "events", "is_event_stream", "payloads"]


def looks_like_json(data: bytes) -> bool:
    stripped = data.lstrip(b" \t\r\n")
    return stripped[:1] in (b"{", b"[")


def payloads(text: str, *, watch: tuple[bytes, ...] = ()) -> Iterator[tuple[Event, object]]:
    """Each event of a captured stream and its ``data`` parsed strictly as JSON: the value,
    a ``MalformedError`` (data that looks like JSON and names a carrier key in ``watch``,
    but does not parse), or None (data that is not JSON at all, such as ``[DONE]``: skipped
    like a non-JSON HAR body, profile §10)."""
    for event in events(text):
        octets = event.data.encode("utf-8", errors="surrogatepass")
        try:
            yield event, strict_json_loads(octets, what=f"event {event.index} data")
        except MalformedError as exc:
            named = any(key in octets for key in watch)
            yield event, exc if looks_like_json(octets) and named else None
