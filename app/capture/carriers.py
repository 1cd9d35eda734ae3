"""Carriers: find every handoff and status object in a capture file (SPEC 9, 10).

Bytes in, carried objects out. ``app.capture.formats`` splits a capture file into payloads; this
module knows where A2A and MCP put a handoff object inside each. It never decodes or verifies
an element: each object found is handed over as found (a map), with where it came from and
what its carrier said about it, so that ``handoff.parse_object`` and the checks can judge it.

The shape of the answer is the same everywhere: ``read_capture`` yields, and ``extract``
returns, a sequence of ``Carried | CarrierError`` in input order. Nothing here raises on bad
input: a bad line, entry or item becomes a ``CarrierError`` naming its position, and the
rest of the file is still read (SPEC 10).

Choices this module makes where SPEC is silent:
- A2A statuses are read from the reply Message, the returned Task's status message and the
  status message of a streamed status update. ``Task.history`` is not read: it repeats
  earlier messages (the offer that started the task among them), so reading it would report
  the same object twice under the wrong role. ``Task.metadata`` and artifacts are not
  carrying places either.
- A message whose metadata holds the extension key but whose ``extensions`` list lacks the
  URI is still read: the key alone says what the value is, and the URI is only a label.
- A metadata or ``_meta`` entry under our key that is not a map is a ``CarrierError`` (the
  item was malformed); a host message without the key is skipped and counted.
- The key is only looked for where SPEC 9 puts it: ``params._meta`` of ``tools/call`` and
  ``notifications/cancelled``, ``result._meta`` of any MCP result (a response does not name
  its method), the message of A2A send requests and replies, ``params.metadata`` of A2A
  cancel requests.
- ``role`` is positional: where the object sat, not what it claims to be. A bare handoff or
  status object is ``offer-carrier`` when it has ``offer``, else ``status-carrier`` (a
  ``canceled`` is only known once the element is decoded); a bare A2A message takes its
  sender's role (user: offer, agent: status).
- A capture record's ``received_at`` may be a float: it is kept with its fraction (the order
  of events within a second), and the checks floor it to NumericDate seconds; a null member
  counts as absent; a record inside a record is an error. A record's ``id`` (an observation
  id, 1 to 128 printable ASCII characters) names the observation, so that a shipper's retry
  of it is stored once (``Carried.key``); ids are unique per sender, not checked here.
- Host task states (``HostState``) are read from every A2A Task and status update with a
  task id and a state, whether or not it carries a handoff element; ``read_capture`` hands
  those without an element to ``on_host`` (those with one travel in their ``Carried``).
- The A2A HTTP+JSON binding: bodies are the JSON-RPC ``params`` and ``result`` without their
  envelope, which the A2A objects' own shapes identify; only a cancel
  (``POST .../tasks/{id}:cancel``) is known by its path, which also names the task.
- An array payload is a JSON-RPC batch (one level), its items named ``source[i]``.
"""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, BinaryIO

from handoff_context.encoding import MAX_SAFE_INT
from handoff_context.errors import MalformedError
from handoff_context.handoff import is_handoff_like
from handoff_context.model import check_identifier

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

# SPEC 9: the carrying keys. Both are labels; nothing is ever fetched from them.
A2A_EXTENSION_URI = "https://quantumlearningmachines.com/a2a/ext/agent-handoff/v1"
MCP_META_KEY = "quantumlearningmachines.com/agent-handoff"


class Carrier(StrEnum):
    """The host protocol an object travelled in (``raw``: not wrapped in a host message)."""

    RAW = "raw"
    A2A_1_0 = "a2a-1.0"
    A2A_0_3 = "a2a-0.3"
    MCP = "mcp"


class Role(StrEnum):
    """Where in the host exchange the object was found."""

    OFFER = "offer-carrier"  # a send request (A2A SendMessage, MCP tools/call)
    STATUS = "status-carrier"  # a reply: A2A Message/Task/status update, MCP CallToolResult
    CANCEL = "cancel-carrier"  # A2A CancelTask / tasks/cancel, MCP notifications/cancelled


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class HostState:
    """An A2A task state as captured (SPEC 8: the host keeps its own task state), from a
    Task or a status update, with or without a handoff element in it."""

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
    raises on bad input: a bad item yields a ``CarrierError`` and reading goes on (SPEC 10),
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


@dataclass(frozen=True)
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

    ``payload`` is any SPEC 10 payload: a handoff or status object, an A2A JSON-RPC request
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


def _type_name(value: object) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    if value is None:
        return "null"
    if isinstance(value, bytes):
        return "a byte string"
    if isinstance(value, list):
        return "an array"
    return names.get(type(value), f"a {type(value).__name__}")


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
    if not isinstance(value, Mapping):
        yield CarrierError(context.source, f"the payload is {_type_name(value)}, not an object")
        return
    if _is_raw_object(value):
        role = Role.OFFER if "offer" in value else Role.STATUS
        yield _carried(value, context, "the object", carrier=Carrier.RAW, role=role)
    elif "payload" in value:
        yield from _capture_record(value, context)
    elif context.path is not None and (task := _rest_cancel(context.path)) is not None:
        yield from _cancel(value, context, carrier=Carrier.A2A_1_0, task_id=task)
    elif isinstance(value.get("method"), str):
        yield from _request(value, context)
    elif "result" in value:
        yield from _response(value.get("result"), context)
    elif "error" not in value:
        yield from _a2a_object(value, context, role=None)


def _is_raw_object(value: Mapping[str, Any]) -> bool:
    # A handoff or status object at the top (SPEC 1.4). An A2A Task or status update also has
    # a "status" member, but it is a map; a status object's is a JWS string or COSE bytes.
    return is_handoff_like(value) and not isinstance(value.get("status"), Mapping)


def _carried(
    value: object,
    context: _Context,
    where: str,
    *,
    carrier: Carrier,
    role: Role,
    dialog: str | None = None,
    task_id: str | None = None,
    task_state: str | None = None,
) -> Found:
    if not isinstance(value, Mapping):
        return CarrierError(
            context.source,
            f"the handoff entry in {where} is {_type_name(value)}, not an object",
        )
    for name, text in (("contextId", dialog), ("task id", task_id)):
        if text is not None and not _storable(text):
            return CarrierError(
                context.source,
                f"the {name} of the message carrying {where} holds NUL or a lone surrogate",
            )
    return Carried(
        source=context.source,
        value=value,
        carrier=carrier,
        dialog=dialog,
        received_at=context.received_at,
        received_by=context.received_by,
        record_dialog=context.record_dialog,
        task_id=task_id,
        task_state=task_state,
        role=role,
        key=context.key,
        seq=context.seq,
    )


def _storable(text: str) -> bool:
    """Host text (an A2A contextId or task id) is kept with each receipt; text with NUL
    (which PostgreSQL cannot store) or a lone surrogate (which UTF-8 cannot encode, from a
    JSON ``\\ud800`` escape) is a malformed host message, not something to store."""
    return not any(c == "\x00" or "\ud800" <= c <= "\udfff" for c in text)


# SPEC 10 capture record: {"received_at", "received_by", "dialog", "payload"}.
def _capture_record(record: Mapping[str, Any], context: _Context) -> Iterator[Found]:
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
    inner = replace(
        context,
        received_at=received_at,
        received_by=received_by,
        record_dialog=record_dialog,
        in_record=True,
        key=key,
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


# --- A2A and MCP ------------------------------------------------------------------------

_A2A_SEND = {
    "SendMessage": Carrier.A2A_1_0,
    "SendStreamingMessage": Carrier.A2A_1_0,
    "message/send": Carrier.A2A_0_3,
    "message/stream": Carrier.A2A_0_3,
}
_A2A_CANCEL = {"CancelTask": Carrier.A2A_1_0, "tasks/cancel": Carrier.A2A_0_3}
_MCP_METHODS = {"tools/call": Role.OFFER, "notifications/cancelled": Role.CANCEL}

# A2A 0.3 task state names and their A2A 1.0 equivalents.
_TASK_STATES_0_3 = {
    "submitted": "TASK_STATE_SUBMITTED",
    "working": "TASK_STATE_WORKING",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "canceled": "TASK_STATE_CANCELED",
    "failed": "TASK_STATE_FAILED",
    "rejected": "TASK_STATE_REJECTED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
    "unknown": "TASK_STATE_UNSPECIFIED",
}
# The 0.3 names cover every 1.0 state.
_TASK_STATES_1_0 = frozenset(_TASK_STATES_0_3.values())


def _request(value: Mapping[str, Any], context: _Context) -> Iterator[Found]:
    method = value["method"]
    params = value.get("params")
    if not isinstance(params, Mapping):
        return
    if method in _A2A_SEND:
        carrier = _A2A_SEND[method]
        yield from _a2a_message(params.get("message"), context, carrier=carrier, role=Role.OFFER)
    elif method in _A2A_CANCEL:
        carrier = _A2A_CANCEL[method]
        yield from _cancel(params, context, carrier=carrier, task_id=_text(params.get("id")))
    elif method in _MCP_METHODS:
        yield from _mcp_meta(params, context, "params._meta", role=_MCP_METHODS[method])


def _cancel(
    params: Mapping[str, Any], context: _Context, *, carrier: Carrier, task_id: str | None
) -> Iterator[Found]:
    # SPEC 9: a delegator's canceled rides in the cancel request's own metadata. The
    # request names the task but no context, so the carrier dialog is unknown.
    metadata = params.get("metadata")
    if isinstance(metadata, Mapping) and A2A_EXTENSION_URI in metadata:
        yield _carried(
            metadata[A2A_EXTENSION_URI],
            context,
            "params.metadata",
            carrier=carrier,
            role=Role.CANCEL,
            task_id=task_id,
        )


# The A2A HTTP+JSON binding's cancel: POST [/{tenant}]/v1/tasks/{id}:cancel (a2a-sdk serves
# it under any prefix, so only the end of the path is matched).
_REST_CANCEL = re.compile(r"/tasks/([^/]+):cancel$")


def _rest_cancel(path: str) -> str | None:
    match = _REST_CANCEL.search(path)
    return urllib.parse.unquote(match.group(1)) if match else None


def _response(result: object, context: _Context) -> Iterator[Found | HostState]:
    if not isinstance(result, Mapping):
        return
    if isinstance(result.get("_meta"), Mapping):  # only MCP results have "_meta"
        yield from _mcp_meta(result, context, "result._meta", role=Role.STATUS)
    else:
        yield from _a2a_object(result, context, role=Role.STATUS)


def _mcp_meta(
    container: Mapping[str, Any], context: _Context, where: str, *, role: Role
) -> Iterator[Found]:
    # Only our key counts; io.modelcontextprotocol/* and every other _meta key are ignored.
    meta = container.get("_meta")
    if isinstance(meta, Mapping) and MCP_META_KEY in meta:
        yield _carried(meta[MCP_META_KEY], context, where, carrier=Carrier.MCP, role=role)


def _field(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    # Protobuf JSON parsers accept the original snake_case names too, so A2A 1.0 senders
    # may use either.
    return obj[camel] if camel in obj else obj.get(snake)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _a2a_object(
    obj: Mapping[str, Any], context: _Context, *, role: Role | None
) -> Iterator[Found | HostState]:
    """A result or bare A2A object: Message, Task, status update, or a 1.0 wrapper of one."""
    kind = obj.get("kind")
    if kind is not None:  # A2A 0.3 names every object's kind
        if kind == "message":
            yield from _a2a_message(obj, context, carrier=Carrier.A2A_0_3, role=role)
        elif kind in ("task", "status-update"):
            yield from _a2a_task(obj, context, carrier=Carrier.A2A_0_3)
        return
    # A2A 1.0 SendMessageResponse / StreamResponse: exactly one of these members. (A bare
    # send request's params look the same; the message's own clues then give the version.)
    message = obj.get("message")
    task = obj.get("task")
    update = _field(obj, "statusUpdate", "status_update")
    if isinstance(message, Mapping):
        yield from _a2a_message(message, context, carrier=None, role=role)
    elif isinstance(task, Mapping):
        yield from _a2a_task(task, context, carrier=None)
    elif isinstance(update, Mapping):
        yield from _a2a_task(update, context, carrier=Carrier.A2A_1_0)
    elif _field(obj, "messageId", "message_id") is not None:
        yield from _a2a_message(obj, context, carrier=None, role=role)
    elif isinstance(obj.get("status"), Mapping):
        yield from _a2a_task(obj, context, carrier=None)


def _version_of(obj: Mapping[str, Any]) -> Carrier:
    """A2A version of an object without a version-bearing envelope (0.3 clues, else 1.0)."""
    status = obj.get("status")
    state = status.get("state") if isinstance(status, Mapping) else None
    if (
        "kind" in obj
        or obj.get("role") in ("user", "agent")
        or (isinstance(state, str) and state in _TASK_STATES_0_3)
    ):
        return Carrier.A2A_0_3
    return Carrier.A2A_1_0


_SENDER_ROLES = {
    "ROLE_USER": Role.OFFER,
    "user": Role.OFFER,
    "ROLE_AGENT": Role.STATUS,
    "agent": Role.STATUS,
}


def _sender_role(sender: object, value: object) -> Role:
    """A bare message's role: the user side sends offers, the agent side answers with
    statuses. Without a known sender role the object itself tells."""
    if isinstance(sender, str) and sender in _SENDER_ROLES:
        return _SENDER_ROLES[sender]
    return Role.OFFER if isinstance(value, Mapping) and "offer" in value else Role.STATUS


def _a2a_message(
    message: object,
    context: _Context,
    *,
    carrier: Carrier | None,
    role: Role | None,
    task_id: str | None = None,
    task_context: str | None = None,
    task_state: str | None = None,
) -> Iterator[Found]:
    if not isinstance(message, Mapping):
        return
    metadata = message.get("metadata")
    if not isinstance(metadata, Mapping) or A2A_EXTENSION_URI not in metadata:
        return
    value = metadata[A2A_EXTENSION_URI]
    yield _carried(
        value,
        context,
        "message.metadata",
        carrier=carrier or _version_of(message),
        role=role or _sender_role(message.get("role"), value),
        # The carrying message's contextId; a task status message may omit it, then the
        # task's own contextId is the dialog.
        dialog=_text(_field(message, "contextId", "context_id")) or task_context,
        task_id=task_id or _text(_field(message, "taskId", "task_id")),
        task_state=task_state,
    )


def _a2a_task(
    task: Mapping[str, Any], context: _Context, *, carrier: Carrier | None
) -> Iterator[Found | HostState]:
    """A Task or a status update event: the status rides in ``status.message``; the host
    task state is read whether or not it carries one."""
    status = task.get("status")
    if not isinstance(status, Mapping):
        return
    state = status.get("state")
    normal_state = None
    if isinstance(state, str):
        normal_state = state if state in _TASK_STATES_1_0 else _TASK_STATES_0_3.get(state)
    carrier = carrier or _version_of(task)
    task_id = _text(task.get("id")) or _text(_field(task, "taskId", "task_id"))
    task_context = _text(_field(task, "contextId", "context_id"))
    carried = list(
        _a2a_message(
            status.get("message"),
            context,
            carrier=carrier,
            role=Role.STATUS,
            task_id=task_id,
            task_context=task_context,
            task_state=normal_state,
        )
    )
    yield from carried
    if not carried and task_id is not None and normal_state is not None and _storable(task_id):
        yield HostState(
            source=context.source,
            carrier=carrier,
            task_id=task_id,
            task_state=normal_state,
            dialog=task_context if task_context and _storable(task_context) else None,
            received_at=context.received_at,
            received_by=context.received_by,
            key=context.key,
            seq=context.seq,
        )
