"""Carriers: find every handoff and status object in a capture file (profile §9, §10).

Bytes in, carried objects out. ``app.capture.formats`` splits a capture file into payloads; this
module knows where A2A and MCP put a handoff object inside each. It never decodes or verifies
an element: each object found is handed over as found (a map), with where it came from and
what its carrier said about it, so that ``parse_object`` and the checks can judge it.

The shape of the answer is the same everywhere: ``read_capture`` yields, and ``extract``
returns, a sequence of ``Carried | CarrierError`` in input order. Nothing here raises on bad
input: a bad line, entry or item becomes a ``CarrierError`` naming its position, and the
rest of the file is still read (profile §10).

Where A2A and MCP put a handoff inside one message is the library's business
(``handoff_context.carry``, whose docstring lists the choices it makes where the
profile is silent); this module adds what only capture files have. Its own choices:
- Host text (an A2A contextId or task id) with NUL or a lone surrogate makes the item a
  ``CarrierError``: it is kept with each receipt, and cannot be stored or encoded.
- A capture record's ``received_at`` may be a float: it is kept with its fraction (the order
  of events within a second), and the checks floor it to NumericDate seconds; a null member
  counts as absent; a record inside a record is an error. A record's ``id`` (an observation
  id, 1 to 128 printable ASCII characters) names the observation, so that a shipper's retry
  of it is stored once (``Carried.key``); ids are unique per sender, not checked here.
- Host task states (``HostState``, from ``carry.find_all``'s ``TaskState``) are read from
  every A2A Task and status update with a task id and a state that carries no handoff
  element; ``read_capture`` hands them to ``on_host`` (those with an element travel in
  their ``Carried``).
- A HAR request body's URL path is handed to ``carry.find_all`` (the A2A HTTP+JSON binding
  names its cancel by path).
- An array payload is a JSON-RPC batch (one level), its items named ``source[i]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, BinaryIO

from handoff_context import MAX_SAFE_INT, carry, check_identifier
from handoff_context._frozen import quick_init
from handoff_context.carry import A2A_EXTENSION_URI, MCP_META_KEY, Carrier, Role
from handoff_context.errors import MalformedError

from app.capture.formats import (
    CaptureFormat,
    CaptureItem,
    CarrierError,
    detect_format,
    read_items,
    read_stream,
    stream_head,
)

__all__ = [
    "A2A_EXTENSION_URI",
    "MCP_META_KEY",
    "CaptureFormat",
    "Carried",
    "Carrier",
    "CarrierError",
    "ExtractStats",
    "Found",
    "HostState",
    "Role",
    "detect_format",
    "extract",
    "read_capture",
]


@quick_init
@dataclass(frozen=True, slots=True)
class Carried:
    """One handoff or status object as found, with its carrier's context."""

    source: str
    value: Mapping[str, Any]
    carrier: Carrier
    dialog: str | None
    received_at: float | None  # seconds with their fraction; the checks floor it
    received_by: str | None
    record_dialog: str | None
    task_id: str | None
    task_state: str | None
    role: Role
    key: str | None = None  # the observation id of its capture record, made unique per object
    seq: int = 0  # position among what shares its receive time (a stream's events)


@dataclass(frozen=True, slots=True)
class HostState:
    """An A2A task state as captured (profile §8: the host keeps its own task state), from a
    Task or a status update that carries no handoff element."""

    source: str
    carrier: Carrier
    task_id: str
    task_state: str  # the A2A 1.0 name
    dialog: str | None
    received_at: float | None
    received_by: str | None
    key: str | None = None
    seq: int = 0


@dataclass
class ExtractStats:
    """Counts for one ``read_capture`` run: items read, objects found, items without any."""

    items: int = 0
    carried: int = 0
    without_handoff: int = 0  # items with no signed handoff that ``on_item`` did not claim
    errors: int = 0


Found = Carried | CarrierError


# --- reading a capture ------------------------------------------------------------------


def read_capture(
    data: bytes | BinaryIO,
    *,
    name: str = "-",
    content_type: str | None = None,
    stats: ExtractStats | None = None,
    on_item: Callable[[CaptureItem], bool] | None = None,
    on_host: Callable[[HostState], None] | None = None,
) -> Iterator[Found]:
    """Yield every carried object and every item error of a capture file, in file order.

    ``name`` labels sources ("capture.jsonl:3"); with ``content_type`` it picks the format
    (``detect_format``). ``stats``, when given, is updated as the items are read.
    ``on_item`` sees every decoded payload too (envelope handoffs are read from it) and says
    whether it found something there, so an item it claims is not counted as without a
    handoff. ``on_host`` receives the host task states that carry no element
    (``HostState``), in file order, before the item's carried objects. Never
    raises on bad input: a bad item yields a ``CarrierError`` and reading goes on (profile §10),
    except inside a CBOR sequence, which cannot be resynchronised after a broken item.

    ``data`` is the capture's octets, or a binary file. Both are read the same way, as a
    stream (``read_stream``: only one item at a time is held, except for HAR and non-array
    JSON documents).
    """
    counts = stats if stats is not None else ExtractStats()
    watch = (A2A_EXTENSION_URI.encode(), MCP_META_KEY.encode())
    if isinstance(data, bytes):
        # Octets in memory are sniffed whole, then read like any stream.
        fmt = detect_format(data, name=name, content_type=content_type)
        items = read_items(data, name=name, fmt=fmt, watch=watch)
    else:
        live = _is_pipe(data)
        head = stream_head(data, live=live)
        fmt = detect_format(head, name=name, content_type=content_type, live=live)
        items = read_stream(data, head, name=name, fmt=fmt, watch=watch)
    for item in items:
        counts.items += 1
        found: list[Found] = []
        claimed = False
        if isinstance(item, CarrierError):
            found = [item]
        elif isinstance(item, CaptureItem):
            found = []
            for one in _found(item.value, _item_context(item)):
                if not isinstance(one, HostState):
                    found.append(one)
                elif on_host is not None:
                    on_host(one)
            claimed = on_item is not None and on_item(item)
        if not found and not claimed:
            counts.without_handoff += 1
        for one in found:
            if isinstance(one, Carried):
                counts.carried += 1
            else:
                counts.errors += 1
            yield one


def _is_pipe(stream: BinaryIO) -> bool:
    """A stream that cannot seek (stdin on a pipe) may be a live feed."""
    try:
        return not stream.seekable()
    except (OSError, ValueError):
        return True


# --- extraction from one payload --------------------------------------------------------


# Not frozen (it is private, and never changed once made): a frozen dataclass sets each of
# its nine fields through ``object.__setattr__``, and two are made for every item read.
@dataclass(slots=True)
class _Context:
    source: str
    received_at: float | None = None
    received_by: str | None = None
    record_dialog: str | None = None
    in_record: bool = False
    in_batch: bool = False
    key: str | None = None  # the capture record's observation id
    seq: int = 0
    path: str | None = None  # HAR: the request's URL path


def _item_context(item: CaptureItem) -> _Context:
    return _Context(source=item.source, received_at=item.received_at, seq=item.seq, path=item.path)


def _found(payload: object, context: _Context) -> Iterator[Found | HostState]:
    """``_payload``, with each object of a keyed record given its own key (``id:n``)."""
    for n, one in enumerate(_payload(payload, context)):
        if isinstance(one, Carried | HostState) and one.key is not None:
            one = replace(one, key=f"{one.key}:{n}")
        yield one


def extract(
    payload: object,
    *,
    source: str,
    received_at: float | None = None,
    received_by: str | None = None,
    record_dialog: str | None = None,
) -> list[Found]:
    """Every handoff or status object in one decoded payload, with its carrier's context.

    ``payload`` is any profile §10 payload: a handoff or status object, an A2A JSON-RPC request
    or response (1.0 or 0.3), a bare A2A Message, Task or status update, an MCP JSON-RPC
    request, response or notification, a JSON-RPC batch (an array), or a capture record
    around one of these. A capture record's members override the arguments. Returns an empty
    list for a payload that carries no handoff, and ``CarrierError`` entries for malformed
    parts. Never raises on bad input.
    """
    context = _Context(
        source=source,
        received_at=received_at,
        received_by=received_by,
        record_dialog=record_dialog,
    )
    return [one for one in _found(payload, context) if not isinstance(one, HostState)]


def _payload(value: object, context: _Context) -> Iterator[Found | HostState]:
    if isinstance(value, list):
        # A JSON-RPC batch. One level only: an array inside a batch is no payload.
        if context.in_batch:
            yield CarrierError(context.source, "an array inside a batch is not a payload")
            return
        for index, item in enumerate(value):
            yield from _payload(
                item, replace(context, source=f"{context.source}[{index}]", in_batch=True)
            )
        return
    # ``type(...) is dict`` first: a decoded payload is a dict, and the ABC check costs
    # more than the rest of this test.
    if (
        (type(value) is dict or isinstance(value, Mapping))
        and "payload" in value
        and not carry.is_bare_object(value)
    ):
        yield from _capture_record(value, context)
        return
    for found in carry.find_all(value, path=context.path):
        if isinstance(found, carry.TaskState):
            if (state := _host_state(found, context)) is not None:
                yield state
        else:
            yield _carried(found, context)


def _host_state(found: carry.TaskState, context: _Context) -> HostState | None:
    # A task id that cannot be stored makes no host state (there is no element to report
    # an error about); a dialog that cannot be stored is dropped.
    if not _storable(found.task_id):
        return None
    dialog = found.dialog if found.dialog and _storable(found.dialog) else None
    return HostState(
        source=context.source,
        carrier=found.carrier,
        task_id=found.task_id,
        task_state=found.task_state,
        dialog=dialog,
        received_at=context.received_at,
        received_by=context.received_by,
        key=context.key,
        seq=context.seq,
    )


def _carried(found: carry.Found | carry.Unreadable, context: _Context) -> Found:
    if isinstance(found, carry.Unreadable):
        return CarrierError(context.source, found.detail)
    for name, text in (("contextId", found.dialog), ("task id", found.task_id)):
        if text is not None and not _storable(text):
            return CarrierError(
                context.source,
                f"the {name} of the message carrying {found.where} holds NUL or a lone surrogate",
            )
    # Positional, in Carried's order: a class called with keywords gets them as a dict,
    # built and unpacked again (~5,000 instructions for these twelve, one per element).
    return Carried(
        context.source,
        found.value,
        found.carrier,
        found.dialog,
        context.received_at,
        context.received_by,
        context.record_dialog,
        found.task_id,
        found.task_state,
        found.role,
        context.key,
        context.seq,
    )


def _storable(text: str) -> bool:
    """Host text (an A2A contextId or task id) is kept with each receipt; text with NUL
    (which PostgreSQL cannot store) or a lone surrogate (which UTF-8 cannot encode, from a
    JSON ``\\ud800`` escape) is a malformed host message, not something to store."""
    # In C, not a Python step per character: ASCII text holds no surrogate, and other text
    # has one exactly when UTF-8 cannot encode it (tests/test_carriers.py pins the two).
    if "\x00" in text:
        return False
    return text.isascii() or _encodes(text)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Profile §10 capture record: {"received_at", "received_by", "dialog", "payload"}.
def _capture_record(record: Mapping[str, Any], context: _Context) -> Iterator[Found | HostState]:
    if context.in_record:
        yield CarrierError(context.source, "a capture record must not wrap another record")
        return
    try:
        received_at = context.received_at
        if record.get("received_at") is not None:
            received_at = _seconds(record["received_at"])
        received_by = context.received_by
        if record.get("received_by") is not None:
            received_by = check_identifier(record["received_by"], what="received_by")
        record_dialog = context.record_dialog
        if record.get("dialog") is not None:
            record_dialog = check_identifier(record["dialog"], what="dialog")
        key = context.key
        if record.get("id") is not None:
            key = check_identifier(record["id"], what="id", limit=_MAX_KEY)
    except MalformedError as exc:
        yield CarrierError(context.source, f"capture record: {exc.detail}")
        return
    # Built field by field rather than with ``dataclasses.replace``, which looks the
    # fields up again for every record (a tenth of reading a capture line).
    inner = _Context(
        source=context.source,
        received_at=received_at,
        received_by=received_by,
        record_dialog=record_dialog,
        in_record=True,
        in_batch=context.in_batch,
        key=key,
        seq=context.seq,
        path=context.path,
    )
    yield from _payload(record["payload"], inner)


# An observation id: long enough for a UUID or a sender-prefixed counter, short enough to
# index.
_MAX_KEY = 128


def _seconds(value: object) -> float:
    """A capture record's received_at: seconds, its fraction kept (the checks floor it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedError("received_at must be a number of seconds")
    if isinstance(value, float) and not math.isfinite(value):
        raise MalformedError("received_at must be a finite number")
    if not 0 <= value <= MAX_SAFE_INT:
        raise MalformedError(f"received_at must be between 0 and {MAX_SAFE_INT}")
    return value
