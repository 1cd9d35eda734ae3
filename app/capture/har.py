"""HAR 1.2 captures (profile §10): the request and response bodies of every entry.

A HAR log is one JSON document, so it is read whole. Each entry's ``startedDateTime`` is
when its bodies were received. Bodies become payloads in one place, ``_body_items``: that
is where a body's transfer encoding is undone and its octets decoded by media type (a
``text/event-stream`` body is one payload per event, ``app.capture.sse``).
"""

from __future__ import annotations

import base64
import binascii
import io
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from handoff_context import MAX_SAFE_INT, strict_json_loads
from handoff_context.errors import MalformedError

from app.capture import sse
from app.capture.items import NON_SPACE, CaptureItem, CarrierError, ItemOrError, label


def read(reader: io.BufferedReader, name: str, watch: tuple[bytes, ...]) -> Iterator[ItemOrError]:
    """Yield the payload of every body of the log, in entry order (request before response).

    ``watch``: byte strings (the carrier keys) that make a body that fails to parse an error
    instead of a skipped non-JSON body. A file that is not a HAR log is one ``CarrierError``.
    """
    try:
        document = strict_json_loads(reader.read(), what=label(name))
    except MalformedError as exc:
        yield CarrierError(name, exc.detail)
        return
    if not is_har(document):
        yield CarrierError(
            name, f'{label(name)} is not a HAR log: no {{"log": {{"entries": [...]}}}}'
        )
        return
    yield from entries(document, name, watch)


def is_har(document: object) -> bool:
    """Whether a decoded JSON document is a HAR log (a HAR sent as plain JSON is one too)."""
    log = document.get("log") if isinstance(document, dict) else None
    return isinstance(log, dict) and isinstance(log.get("entries"), list)


@dataclass(frozen=True)
class _Place:
    """Where a body sits: ``source`` names it to the user, ``what`` inside details."""

    source: str
    what: str
    received_at: float  # the entry's startedDateTime, with its fraction
    path: str | None = None  # a request's URL path (the A2A HTTP+JSON binding names it)


def entries(document: dict[str, Any], name: str, watch: tuple[bytes, ...]) -> Iterator[ItemOrError]:
    """The items of a decoded HAR log (``is_har(document)`` holds)."""
    for index, entry in enumerate(document["log"]["entries"]):
        where = f"entries[{index}]"
        if not isinstance(entry, dict):
            yield CarrierError(f"{name}:{where}", f"{where} is not an object")
            continue
        # Profile §10: the entry's startedDateTime is when its bodies were received. Without it
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
            if body["text"]:
                place = _Place(f"{name}:{where}.{side}", f"{where}.{side}", received_at, path)
                yield from _body_items(body, place, watch)


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


def _body_items(
    body: Mapping[str, Any], place: _Place, watch: tuple[bytes, ...]
) -> Iterator[ItemOrError]:
    """The payloads of one HAR body (``postData`` or ``content``: text, encoding, mimeType).

    This is the seam for body decoding: the transfer encoding is undone here, then the
    octets are decoded. A body is one JSON payload (profile §10), except an event stream (by
    its ``mimeType`` or its first line), which is one payload per event, named
    ``source event N (line L)`` and numbered in stream order (``CaptureItem.seq``), since
    the whole stream shares one ``startedDateTime`` (docs/profile.md §10.5).
    """
    if body.get("encoding") is None and sse.is_event_stream(body.get("mimeType"), body["text"]):
        yield from _event_items(body["text"], place, watch)
        return
    octets = _body_octets(body["text"], body.get("encoding"), place)
    if isinstance(octets, CarrierError):
        yield octets
        return
    yield _json_body(octets, place, watch)


def _body_octets(text: str, encoding: object, place: _Place) -> bytes | CarrierError:
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return CarrierError(
                place.source, f"{place.what} body is marked base64 but is not valid base64"
            )
    if encoding is None:
        # surrogatepass: a lone surrogate (from a JSON escape in the HAR) must make the body
        # fail the strict UTF-8 check of the decoder rather than fail here.
        return text.encode("utf-8", errors="surrogatepass")
    return CarrierError(place.source, f"{place.what} body has an unsupported encoding {encoding!r}")


def _json_body(octets: bytes, place: _Place, watch: tuple[bytes, ...]) -> ItemOrError:
    try:
        value = strict_json_loads(octets, what=f"{place.what} body")
    except MalformedError as exc:
        # Profile §10 reads only bodies that parse as JSON; the rest of a browser's traffic is
        # skipped. A JSON-looking body that names a carrier key is reported all the same:
        # skipping it could hide a handoff (duplicate members, a truncated capture).
        first = NON_SPACE.search(octets)
        looks_like_json = first is not None and octets[first.start()] in b"{["
        if looks_like_json and any(key in octets for key in watch):
            return CarrierError(place.source, exc.detail)
        return None
    return CaptureItem(place.source, value, place.received_at, path=place.path, raw=octets)


def _event_items(text: str, place: _Place, watch: tuple[bytes, ...]) -> Iterator[ItemOrError]:
    for event, value in sse.payloads(text, watch=watch):
        source = f"{place.source} event {event.index} (line {event.line})"
        if isinstance(value, MalformedError):
            yield CarrierError(source, f"{place.what} {value.detail}")
        elif value is not None:
            yield CaptureItem(source, value, place.received_at, event.index, place.path)
        else:
            yield None
