"""Find envelope items in one decoded capture payload (docs/envelopes.md, "What is
captured"). Pure: payload in, items out; nothing here raises on bad input.

The payload shapes are the carriers' (``app.capture.carriers``): bare A2A 1.0 / 0.3 Messages, Tasks,
status and artifact update events, JSON-RPC requests and responses, batches, and capture
records with ``received_at`` / ``received_by``. Where the signed-handoff carriers look in
message metadata, envelopes live in the message's parts:

- a **handoff** is a data part whose media type is accepted; a message with a handoff-like
  media type that is not accepted is **version drift**; two accepted parts are an error;
- an **acceptance** or **rejection** is a data part ``{"accepted": ..., "case_id": ...}``
  in a Task's (or update event's) artifacts or status message;
- a **case event** is a payload ``{"case_event": {...}}``.

Choices where the contract is silent: a handoff message found in a response (a Task's
``history``) has no known receiver, since the capture's ``received_by`` is then the
sender; an acceptance inside a task in a state other than completed is an error, not an
acceptance; a rejection is read from any task state.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

from handoff_context import MAX_SAFE_INT
from handoff_context._frozen import quick_init
from handoff_context._typed import is_map
from handoff_context.carry import TASK_STATES_0_3 as _TASK_STATES_0_3
from handoff_context.carry import a2a_member as _field

from app.envelope.references import UrlPart
from app.envelope.schema import schema_errors

DEFAULT_TYPES = frozenset({"application/vnd.acme.handoff.v2+json"})
# What a handoff envelope's media type looks like, whatever its vendor and version.
HANDOFF_LIKE = re.compile(r"application/vnd\.[^/;\s]+\.handoff(\.[^/;\s]+)?\+json", re.IGNORECASE)
COUNT_ERROR = "expected exactly one supported handoff envelope"
_A2A_SEND = ("SendMessage", "SendStreamingMessage", "message/send", "message/stream")
_ACTIONS = ("write", "handed-off", "act")
_OUTCOMES = ("applied", "rejected")
_COMPLETED = "TASK_STATE_COMPLETED"


class ItemKind(StrEnum):
    HANDOFF = "handoff"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    EVENT = "event"
    INVALID = "invalid"  # schema failure, not exactly one envelope, drift only, bad event


@quick_init
@dataclass(frozen=True)
class EnvelopeItem:
    """One envelope item as read. ``at`` is None when the capture gave no receive time
    (the ingest clock is used then); a case event's ``at`` is its own."""

    kind: ItemKind
    source: str
    at: int | None
    received_by: str | None = None
    case_id: str | None = None
    handoff_id: str | None = None
    agent: str | None = None
    to_agent: str | None = None
    epoch: int | None = None
    media_type: str | None = None
    message_id: str | None = None
    context_id: str | None = None
    task_id: str | None = None
    action: str | None = None
    outcome: str | None = None
    detail: str | None = None
    envelope: Mapping[str, Any] | None = None
    errors: tuple[str, ...] = ()
    drift: tuple[str, ...] = ()  # handoff-like media types not accepted
    urls: tuple[UrlPart, ...] = ()
    text_bytes: int = 0


class _Where(NamedTuple):
    """Where in the payload the walk is. A named tuple: it is replaced a few times for every
    capture item, and ``dataclasses.replace`` was about a sixth of reading one."""

    source: str
    at: int | None = None
    received_by: str | None = None
    in_response: bool = False
    in_record: bool = False
    in_batch: bool = False
    task_id: str | None = None
    task_context: str | None = None
    accepted: frozenset[str] = DEFAULT_TYPES


def find_items(
    payload: object,
    *,
    source: str,
    received_at: int | None = None,
    accepted: frozenset[str] = DEFAULT_TYPES,
) -> list[EnvelopeItem]:
    """Every envelope item in one payload, in document order. ``accepted``: the media
    types read as envelopes (lower case). Never raises."""
    where = _Where(source=source, at=received_at, accepted=accepted)
    return list(_payload(payload, where))


def may_hold_items(raw: bytes, accepted: frozenset[str] = DEFAULT_TYPES) -> bool:
    """Whether the JSON text ``raw`` can hold an envelope item: False only when none of
    what every item needs is among its octets, so that ``find_items`` of its value is empty
    without walking it. Every item needs one of: the member name ``case_event`` (a case
    event) or ``case_id`` (an acceptance or rejection), or a part's media type, which is
    read in lower case and is accepted or handoff-like (``.handoff``: the signed-handoff
    carriers' own keys, ``.../agent-handoff/v1``, do not hold it). A JSON escape
    (``\\u``, ``\\/``) may spell any of these, and the Kelvin sign lowers to ``k``: either
    makes the answer True. A few substring searches, each a C scan of the octets (a
    regular expression of the same needles took as long as the walk it saves)."""
    # ``find``, not ``in``: CPython 3.11's ``bytes.__contains__`` first reads its operand as
    # an integer, raising and clearing a TypeError with a formatted message (~900
    # instructions more a search).
    if raw.find(b"\\") >= 0 or raw.find(b"case_") >= 0:
        return True  # an escape of any kind, or a member name
    if not raw.isascii() and raw.find(_KELVIN) >= 0:
        return True  # the Kelvin sign
    lowered = raw.lower()  # ASCII only, as a media type read in lower case needs
    return any(lowered.find(t) >= 0 for t in _media_needles(accepted))


_KELVIN = "\u212a".encode()


@functools.lru_cache(maxsize=16)
def _media_needles(accepted: frozenset[str]) -> tuple[bytes, ...]:
    """``.handoff`` and the accepted types that do not hold it, in lower case."""
    types = (t.lower().encode("utf-8", errors="surrogatepass") for t in sorted(accepted))
    return (b".handoff", *(t for t in types if b".handoff" not in t))


def _payload(value: object, where: _Where) -> Iterator[EnvelopeItem]:
    if isinstance(value, list):
        if not where.in_batch:
            for index, one in enumerate(value):
                inner = where._replace(source=f"{where.source}[{index}]", in_batch=True)
                yield from _payload(one, inner)
        return
    if not is_map(value):
        return
    if "payload" in value and not where.in_record:
        yield from _record(value, where)
    elif "case_event" in value:
        yield _case_event(value["case_event"], where)
    elif isinstance(value.get("method"), str):
        params = value.get("params")
        if value["method"] in _A2A_SEND and is_map(params):
            yield from _message(params.get("message"), where)
    elif "result" in value:
        yield from _a2a(value["result"], where._replace(in_response=True))
    elif "error" not in value:
        yield from _a2a(value, where)


def _record(record: Mapping[str, Any], where: _Where) -> Iterator[EnvelopeItem]:
    # The carriers report a malformed record; here it only loses its context.
    at, by = _seconds(record.get("received_at")), record.get("received_by")
    # One new tuple, not one ``_replace`` per field: this runs for every capture record.
    inner = _Where(
        where.source,
        where.at if at is None else at,
        by if isinstance(by, str) and by else where.received_by,
        where.in_response,
        True,  # in_record
        where.in_batch,
        where.task_id,
        where.task_context,
        where.accepted,
    )
    yield from _payload(record["payload"], inner)


def _a2a(obj: object, where: _Where) -> Iterator[EnvelopeItem]:
    """A bare or returned A2A object: Message, Task, update event, or a 1.0 wrapper."""
    if not is_map(obj):
        return
    kind = obj.get("kind")
    if kind == "message":
        yield from _message(obj, where)
    elif kind in ("task", "status-update", "artifact-update"):
        yield from _task(obj, where)
    elif kind is not None:
        return
    elif is_map(obj.get("message")):
        yield from _message(obj["message"], where)
    elif is_map(obj.get("task")):
        yield from _task(obj["task"], where)
    elif is_map(update := _update(obj)):
        yield from _task(update, where)
    elif _field(obj, "messageId", "message_id") is not None:
        yield from _message(obj, where)
    elif is_map(obj.get("status")) or is_map(obj.get("artifact")):
        yield from _task(obj, where)


def _update(obj: Mapping[str, Any]) -> object:
    # A2A 1.0 StreamResponse members of the two task update events.
    status = _field(obj, "statusUpdate", "status_update")
    return status if status is not None else _field(obj, "artifactUpdate", "artifact_update")


def _seconds(value: object) -> int | None:
    """NumericDate seconds (a fraction floored), or None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    # Range first, with no arithmetic: a JSON integer may have any number of digits, and
    # ``math.isfinite`` of one too large for a float raises OverflowError (a 309-digit
    # ``received_at`` made a 500). Comparing an int with an int never overflows; the
    # comparisons are False for NaN, so a float that passes them is finite.
    if not 0 <= value <= MAX_SAFE_INT:
        return None
    return math.floor(value)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


# --- tasks: acceptances, rejections, and handoffs in history ---------------------------


def _task(task: Mapping[str, Any], where: _Where) -> Iterator[EnvelopeItem]:
    status = task.get("status")
    status = status if is_map(status) else {}
    state = _state(status.get("state"))
    where = where._replace(
        task_id=_text(task.get("id")) or _text(_field(task, "taskId", "task_id")),
        task_context=_text(_field(task, "contextId", "context_id")),
    )
    history = task.get("history")
    for message in history if isinstance(history, list) else ():
        # A handoff repeated in the task's history: its receiver produced this task.
        yield from _message(message, where._replace(in_response=True))
    artifacts = task.get("artifacts")
    artifacts = list(artifacts) if isinstance(artifacts, list) else []
    if is_map(task.get("artifact")):
        artifacts.append(task["artifact"])
    carriers = [a for a in artifacts if is_map(a)]
    if is_map(status.get("message")):
        carriers.append(status["message"])
    for carrier in carriers:
        for part in _parts(carrier):
            data = _data_of(part)
            if is_map(data) and "accepted" in data and "case_id" in data:
                yield _response(data, state, where)


def _state(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    return value if value.startswith("TASK_STATE_") else _TASK_STATES_0_3.get(value)


def _response(data: Mapping[str, Any], state: str | None, where: _Where) -> EnvelopeItem:
    accepted = data.get("accepted")
    errors: list[str] = []
    if not isinstance(accepted, bool):
        errors.append("accepted: must be true or false")
    case_id = _text(data.get("case_id"))
    if case_id is None:
        errors.append("case_id: must be a non-empty string")
    epoch = _epoch(data.get("epoch"))
    if accepted is True and epoch is None:
        errors.append("epoch: an acceptance names the new epoch (an integer >= 0)")
    if accepted is True and state not in (None, _COMPLETED):
        errors.append(f"an acceptance in a task in state {state}, not completed")
    handoff_id = data.get("handoff_id")
    if handoff_id is not None and _text(handoff_id) is None:
        errors.append("handoff_id: must be a non-empty string")
    reason = data.get("reason")
    kind = ItemKind.ACCEPTED if accepted is True else ItemKind.REJECTED
    return EnvelopeItem(
        kind=ItemKind.INVALID if errors else kind,
        source=where.source,
        at=where.at,
        received_by=where.received_by,
        case_id=case_id,
        handoff_id=_text(handoff_id),
        epoch=epoch,
        context_id=where.task_context,
        task_id=where.task_id,
        detail=reason if isinstance(reason, str) else None,
        envelope=data,
        errors=tuple(errors),
    )


def _epoch(value: object) -> int | None:
    # Protobuf Struct (A2A 1.0 data parts) turns every number into a float.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SAFE_INT:
        return value
    return None


# --- messages: handoffs ------------------------------------------------------------------


def _parts(carrier: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    parts = carrier.get("parts")
    return [p for p in parts if is_map(p)] if isinstance(parts, list) else []


def _data_of(part: Mapping[str, Any]) -> object:
    # 1.0: {"data": ...}; 0.3: {"kind": "data", "data": ...}. A 1.0 DataPart may also wrap
    # its value as {"data": {"data": ...}} in older protobuf JSON; the contract's shape wins.
    return part.get("data") if part.get("kind") in (None, "data") else None


def _media_type(part: Mapping[str, Any]) -> str | None:
    media = _field(part, "mediaType", "media_type")
    if media is None and is_map(part.get("metadata")):
        meta = part["metadata"]
        media = _field(meta, "mediaType", "media_type") or meta.get("mimeType")
    # Parameters (``; charset=utf-8``) do not change which envelope version a part holds.
    return media.split(";", 1)[0].strip().lower() if isinstance(media, str) else None


def _url_part(part: Mapping[str, Any]) -> UrlPart | None:
    meta = part.get("metadata")
    meta = meta if is_map(meta) else {}
    if part.get("kind") == "file" and is_map(part.get("file")):
        file = part["file"]
        if not isinstance(file.get("uri"), str):
            return None  # inline bytes: nothing referenced
        media, name = _text(file.get("mimeType")), _text(file.get("name"))
        return UrlPart(file["uri"], media, name, meta.get("sha256"), meta.get("bytes"))
    if part.get("kind") is None and isinstance(part.get("url"), str):
        media = _text(_field(part, "mediaType", "media_type"))
        return UrlPart(
            part["url"], media, _text(part.get("filename")), meta.get("sha256"), meta.get("bytes")
        )
    return None


def _message(message: object, where: _Where) -> Iterator[EnvelopeItem]:
    if not is_map(message):
        return
    parts = _parts(message)
    envelopes: list[tuple[str, object]] = []
    drift: list[str] = []
    for part in parts:
        media = _media_type(part)
        if media is None or _data_of(part) is None:
            continue
        if media in where.accepted:
            envelopes.append((media, _data_of(part)))
        elif HANDOFF_LIKE.fullmatch(media):
            drift.append(media)
    if not envelopes and not drift:
        return  # not an envelope message
    texts = [p["text"] for p in parts if isinstance(p.get("text"), str)]
    urls = tuple(u for u in map(_url_part, parts) if u is not None)
    media, data = envelopes[0] if envelopes else (drift[0], _data_of_drift(parts, drift[0]))
    errors: tuple[str, ...] = ()
    if len(envelopes) > 1:
        errors = (f"{COUNT_ERROR}, found {len(envelopes)}",)
    elif envelopes:
        errors = schema_errors(data)
    body = data if is_map(data) else {}
    valid = len(envelopes) == 1 and not errors
    yield EnvelopeItem(
        kind=ItemKind.HANDOFF if valid else ItemKind.INVALID,
        source=where.source,
        at=where.at,
        received_by=where.received_by,
        case_id=_text(body.get("case_id")),
        handoff_id=_text(body.get("handoff_id"))
        or _text(_field(message, "messageId", "message_id")),
        agent=_text(body.get("from_agent")),
        to_agent=None if where.in_response else where.received_by,
        epoch=_epoch(body.get("epoch")),
        media_type=media,
        message_id=_text(_field(message, "messageId", "message_id")),
        context_id=_text(_field(message, "contextId", "context_id")) or where.task_context,
        task_id=_text(_field(message, "taskId", "task_id")) or where.task_id,
        envelope=body,
        errors=errors,
        drift=tuple(drift),
        urls=urls,
        text_bytes=sum(len(t.encode("utf-8", errors="surrogatepass")) for t in texts),
    )


def _data_of_drift(parts: list[Mapping[str, Any]], media: str) -> object:
    # A drifted envelope is not read, but its identity (case, sender) says whose it is.
    for part in parts:
        if _media_type(part) == media:
            return _data_of(part)
    return None


# --- case events -------------------------------------------------------------------------


def _case_event(event: object, where: _Where) -> EnvelopeItem:
    if not is_map(event):
        return EnvelopeItem(
            ItemKind.INVALID, where.source, where.at, errors=("case_event: must be an object",)
        )
    errors: list[str] = []
    case_id, agent = _text(event.get("case_id")), _text(event.get("agent"))
    if case_id is None:
        errors.append("case_event.case_id: must be a non-empty string")
    if agent is None:
        errors.append("case_event.agent: must be a non-empty string")
    action = event.get("action")
    if action not in _ACTIONS:
        errors.append(f"case_event.action: must be one of {', '.join(_ACTIONS)}")
    epoch = _epoch(event.get("epoch"))
    if event.get("epoch") is not None and epoch is None:
        errors.append("case_event.epoch: must be an integer >= 0 or null")
    seconds = _seconds(event.get("at"))
    if seconds is None:
        errors.append("case_event.at: must be a time in seconds")
    outcome = event.get("outcome")
    if outcome is not None and outcome not in _OUTCOMES:
        errors.append(f"case_event.outcome: must be one of {', '.join(_OUTCOMES)} or null")
    detail = event.get("detail")
    return EnvelopeItem(
        kind=ItemKind.INVALID if errors else ItemKind.EVENT,
        source=where.source,
        at=seconds if seconds is not None else where.at,
        received_by=where.received_by,
        case_id=case_id,
        agent=agent,
        epoch=epoch,
        action=action if action in _ACTIONS else None,
        outcome=outcome if outcome in _OUTCOMES else None,
        detail=detail[:2000] if isinstance(detail, str) else None,
        errors=tuple(errors[:3]),
    )
