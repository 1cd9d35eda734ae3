"""HAR 1.2 captures (SPEC 10): the request and response bodies of every entry.

A HAR log is one JSON document, so it is read whole. Each entry's ``startedDateTime`` is
when its bodies were received. Bodies become payloads in one place, ``_body_items``: that
is where a body's transfer encoding is undone and its octets decoded by media type.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from handoff_context import MAX_SAFE_INT, strict_json_loads
from handoff_context.errors import MalformedError

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
    received_at: int


def entries(document: dict[str, Any], name: str, watch: tuple[bytes, ...]) -> Iterator[ItemOrError]:
    """The items of a decoded HAR log (``is_har(document)`` holds)."""
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
            message = entry.get(side)
            body = message.get(body_member) if isinstance(message, dict) else None
            if not isinstance(body, dict) or not isinstance(body.get("text"), str):
                continue  # no body: nothing was carried, and it is not an item
            if body["text"]:
                place = _Place(f"{name}:{where}.{side}", f"{where}.{side}", received_at)
                yield from _body_items(body, place, watch)


def _har_time(value: object) -> int:
    """HAR startedDateTime -> NumericDate seconds (floored). Raises ValueError."""
    if not isinstance(value, str):
        raise ValueError("startedDateTime must be a string")
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # HAR requires an offset; assume UTC without one
    seconds = math.floor(moment.timestamp())
    if not 0 <= seconds <= MAX_SAFE_INT:
        raise ValueError("startedDateTime is before 1970")
    return seconds


def _body_items(
    body: Mapping[str, Any], place: _Place, watch: tuple[bytes, ...]
) -> Iterator[ItemOrError]:
    """The payloads of one HAR body (``postData`` or ``content``: text, encoding, mimeType).

    This is the seam for body decoding: the transfer encoding is undone here, then the
    octets are decoded. Today every body is read as one JSON payload (SPEC 10); a decoder
    for another media type (a stream of events, say) belongs here, and may yield several
    items, each named from ``place``.
    """
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
        # SPEC 10 reads only bodies that parse as JSON; the rest of a browser's traffic is
        # skipped. A JSON-looking body that names a carrier key is reported all the same:
        # skipping it could hide a handoff (duplicate members, a truncated capture).
        first = NON_SPACE.search(octets)
        looks_like_json = first is not None and octets[first.start()] in b"{["
        if looks_like_json and any(key in octets for key in watch):
            return CarrierError(place.source, exc.detail)
        return None
    return CaptureItem(place.source, value, place.received_at)
