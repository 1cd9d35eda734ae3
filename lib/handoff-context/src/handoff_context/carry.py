"""Carrying handoffs in A2A 1.0, A2A 0.3 and MCP messages (profile §9): put them in, find them.

Everything here works on messages as decoded JSON (maps and lists), the shape every SDK
reads and writes on the wire; the SDKs' typed messages (a2a-sdk's protobuf messages, the mcp
package's pydantic models) are accepted too and read as that JSON (``_typed.py``), and
``put_*`` return a copy of the type they were given. Nothing is fetched, decoded or
verified. The values put and
found are profile §1.4 handoff and status objects (``handoff_object``, ``status_object``);
JSON carriers take the JWS form. Judge what ``find`` returns with a ``Verifier``.

Choices this module makes where the profile is silent:
- A2A statuses are read from the reply Message, the returned Task's status message and the
  status message of a streamed status update. ``Task.history`` is not read: it repeats
  earlier messages (the offer that started the task among them), so reading it would report
  the same object twice under the wrong role. ``Task.metadata`` and artifacts are not
  carrying places either.
- A message whose metadata holds the extension key but whose ``extensions`` list lacks the
  URI is still read: the key alone says what the value is, and the URI is only a label.
- A metadata or ``_meta`` entry under our key that is not a map is ``Unreadable``; a
  message without the key yields nothing.
- The key is only looked for where profile §9 puts it: ``params._meta`` of ``tools/call`` and
  ``notifications/cancelled``, ``result._meta`` of any MCP result (a response does not name
  its method), the message of A2A send requests and replies, ``params.metadata`` of A2A
  cancel requests.
- ``role`` is positional: where the object sat, not what it claims to be. A bare handoff or
  status object is ``offer-carrier`` when it has ``offer``, else ``status-carrier`` (a
  ``canceled`` is only known once the element is decoded); a bare A2A message takes its
  sender's role (user: offer, agent: status).
- Host task states (``TaskState``, from ``find_all``) are read from every A2A Task and
  status update with a task id and a state that carries no handoff element (one that does
  says its state in its ``Found``).
- The A2A HTTP+JSON binding: bodies are the JSON-RPC ``params`` and ``result`` without their
  envelope, which the A2A objects' own shapes identify; only a cancel
  (``POST .../tasks/{id}:cancel``) is known by its path (``find_all(path=)``), which also
  names the task.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar, overload

from handoff_context._frozen import quick_init
from handoff_context._handoff import is_handoff_like
from handoff_context._typed import as_json, is_map, is_protobuf, is_pydantic

# A typed SDK message (an a2a-sdk protobuf message, an mcp pydantic model).
_Typed = TypeVar("_Typed")

__all__ = [
    "A2A_EXTENSION_URI",
    "MCP_META_KEY",
    "TASK_STATES_0_3",
    "Carrier",
    "Found",
    "Role",
    "TaskState",
    "Unreadable",
    "a2a_member",
    "find",
    "find_all",
    "is_bare_object",
    "put_a2a",
    "put_mcp",
]

# Profile §9: the carrying keys. Both are labels; nothing is ever fetched from them.
A2A_EXTENSION_URI = "https://quantumlearningmachines.com/a2a/ext/agent-handoff/v1"
MCP_META_KEY = "quantumlearningmachines.com/agent-handoff"


class Carrier(StrEnum):
    """The host protocol an object travelled in (``raw``: not wrapped in a host message)."""

    RAW = "raw"
    A2A_1_0 = "a2a-1.0"
    A2A_0_3 = "a2a-0.3"
    MCP = "mcp"
    # OTLP spans (handoff_context.otel puts elements on them; a service receives them at
    # POST /v1/traces): not a host protocol, but a carrier all the same.
    OTLP = "otlp"


class Role(StrEnum):
    """Where in the host exchange the object was found."""

    OFFER = "offer-carrier"  # a send request (A2A SendMessage, MCP tools/call)
    STATUS = "status-carrier"  # a reply: A2A Message/Task/status update, MCP CallToolResult
    CANCEL = "cancel-carrier"  # A2A CancelTask / tasks/cancel, MCP notifications/cancelled


@quick_init
@dataclass(frozen=True)
class Found:
    """One handoff or status object as found in a message, with what its carrier says.

    ``where`` names the carrying place ("message.metadata", "params._meta", ...);
    ``dialog`` is the carrying message's (or its task's) A2A ``contextId``; ``task_state`` is
    the host task state, in A2A 1.0 names, when a Task or status update carried it.
    """

    value: Mapping[str, Any]
    carrier: Carrier
    role: Role
    where: str
    dialog: str | None = None
    task_id: str | None = None
    task_state: str | None = None


@dataclass(frozen=True)
class TaskState:
    """A host task state (profile §8: the host keeps its own task state) from an A2A Task or
    status update that carries no handoff element; ``task_state`` in A2A 1.0 names."""

    carrier: Carrier
    task_id: str
    task_state: str
    dialog: str | None = None


@dataclass(frozen=True)
class Unreadable:
    """A carrying place that holds something other than a handoff or status object."""

    detail: str


# --- putting ------------------------------------------------------------------------------


@overload
def put_a2a(host: Mapping[str, Any], obj: Mapping[str, Any]) -> dict[str, Any]: ...


@overload
def put_a2a(host: _Typed, obj: Mapping[str, Any]) -> _Typed: ...


def put_a2a(host: object, obj: Mapping[str, Any]) -> object:
    """A copy of the A2A ``host`` carrying ``obj`` under ``metadata[A2A_EXTENSION_URI]``.

    ``host`` is a Message (a send request's, a reply, a Task's status message) or the params
    of a cancel-task request, in 1.0 or 0.3 JSON, or the a2a-sdk protobuf message itself
    (a copy of the same type is returned). A handoff object (an offer) also lists the
    URI in the message's ``extensions`` (profile §9); a status object does not need to.
    Raises ValueError when a typed ``host`` has no ``metadata`` or ``obj`` is not JSON
    (the COSE form does not fit an A2A ``Struct``)."""
    value = _json_object(obj)
    if is_protobuf(host):
        return _put_a2a_protobuf(host, value)
    if is_pydantic(host):
        return type(host).model_validate(put_a2a(as_json(host), value))  # type: ignore[attr-defined]
    if not isinstance(host, Mapping):
        kind = type(host).__name__
        raise ValueError(f"an A2A host message must be a map or an a2a-sdk message, not {kind}")
    out = dict(host)
    out["metadata"] = {**dict(out.get("metadata") or {}), A2A_EXTENSION_URI: value}
    if "offer" in value:
        extensions = list(out.get("extensions") or [])
        if A2A_EXTENSION_URI not in extensions:
            extensions.append(A2A_EXTENSION_URI)
        out["extensions"] = extensions
    return out


def _put_a2a_protobuf(host: Any, value: dict[str, Any]) -> Any:
    out = type(host)()
    out.CopyFrom(host)
    fields = out.DESCRIPTOR.fields_by_name
    if "metadata" not in fields:
        raise ValueError(f"an a2a-sdk {type(host).__name__} has no metadata to carry a handoff")
    out.metadata.update({A2A_EXTENSION_URI: value})
    if "offer" in value and "extensions" in fields and A2A_EXTENSION_URI not in out.extensions:
        out.extensions.append(A2A_EXTENSION_URI)
    return out


@overload
def put_mcp(host: Mapping[str, Any], obj: Mapping[str, Any]) -> dict[str, Any]: ...


@overload
def put_mcp(host: _Typed, obj: Mapping[str, Any]) -> _Typed: ...


def put_mcp(host: object, obj: Mapping[str, Any]) -> object:
    """A copy of the MCP ``host`` carrying ``obj`` under ``_meta[MCP_META_KEY]``: the params
    of ``tools/call`` (an offer) or of ``notifications/cancelled`` (a ``canceled``), or a
    CallToolResult (a status), as JSON or as the mcp package's model (a copy of the same
    type is returned). Other ``_meta`` keys are kept. Raises ValueError when ``obj`` is
    not JSON (the COSE form)."""
    value = _json_object(obj)
    if is_pydantic(host):
        return type(host).model_validate(put_mcp(as_json(host), value))  # type: ignore[attr-defined]
    if not isinstance(host, Mapping):
        kind = type(host).__name__
        raise ValueError(f"an MCP host message must be a map or an mcp model, not {kind}")
    out = dict(host)
    out["_meta"] = {**dict(out.get("_meta") or {}), MCP_META_KEY: value}
    return out


def _json_object(obj: object) -> dict[str, Any]:
    """A handoff or status object as plain JSON (a ``Struct`` found in typed metadata is
    accepted too). JSON carriers take the JWS form: COSE byte strings are refused."""
    value = as_json(obj)
    if not isinstance(value, Mapping):
        raise ValueError("a handoff or status object must be a map")
    out = dict(value)
    if "chain" in out and isinstance(out["chain"], tuple):
        out["chain"] = list(out["chain"])
    elements = [out.get("offer"), out.get("status"), *(out.get("chain") or [])]
    if any(isinstance(e, bytes | bytearray) for e in elements):
        raise ValueError("A2A and MCP carry the JWS form (strings), not COSE byte strings")
    return out


# --- finding ------------------------------------------------------------------------------


def find(message: object) -> list[Found | Unreadable]:
    """Every handoff or status object in one decoded message, in message order.

    ``message`` is a handoff or status object itself, an A2A JSON-RPC request or response
    (1.0 or 0.3), a bare A2A Message, Task or status update (or a 1.0 wrapper of one), or an
    MCP JSON-RPC request, response or notification, as decoded JSON or as the typed
    message of a2a-sdk (protobuf) or mcp (pydantic). Returns an empty list for a message
    that carries nothing, and ``Unreadable`` entries for malformed carrying places. Never
    raises on bad input.
    """
    return [f for f in find_all(message) if not isinstance(f, TaskState)]


def find_all(message: object, *, path: str | None = None) -> list[Found | Unreadable | TaskState]:
    """``find``, plus the host task states of Tasks and status updates that carry no
    handoff (``TaskState``), in message order. ``path``: the URL path the message was sent
    to, for the A2A HTTP+JSON binding, whose cancel (``POST .../tasks/{id}:cancel``) is
    known only by it. Typed SDK messages are read as their JSON. Never raises on bad input."""
    message = as_json(message)
    if not is_map(message):
        return [Unreadable(f"the payload is {_type_name(message)}, not an object")]
    if path is not None and not is_bare_object(message):
        task = _rest_cancel(path)
        if task is not None:
            return list(_cancel(message, carrier=Carrier.A2A_1_0, task_id=task))
    return list(_message(message))


def _type_name(value: object) -> str:
    """How a JSON value's type is named in details ("an array", "a string", "null")."""
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    if value is None:
        return "null"
    if isinstance(value, bytes):
        return "a byte string"
    if isinstance(value, list):
        return "an array"
    return names.get(type(value), f"a {type(value).__name__}")


def is_bare_object(value: Mapping[str, Any]) -> bool:
    """True for a handoff or status object travelling bare (profile §1.4). An A2A Task or status
    update also has a "status" member, but it is a map; a status object's is a JWS string or
    COSE bytes."""
    return is_handoff_like(value) and not is_map(value.get("status"))


_Any = Found | Unreadable | TaskState


def _message(value: Mapping[str, Any]) -> Iterator[_Any]:
    if is_bare_object(value):
        role = Role.OFFER if "offer" in value else Role.STATUS
        yield _found(value, "the object", carrier=Carrier.RAW, role=role)
    elif isinstance(value.get("method"), str):
        yield from _request(value)
    elif "result" in value:
        yield from _response(value.get("result"))
    elif "error" not in value:
        yield from _a2a_object(value, role=None)


def _found(
    value: object,
    where: str,
    *,
    carrier: Carrier,
    role: Role,
    dialog: str | None = None,
    task_id: str | None = None,
    task_state: str | None = None,
) -> Found | Unreadable:
    if not is_map(value):
        return Unreadable(f"the handoff entry in {where} is {_type_name(value)}, not an object")
    return Found(value, carrier, role, where, dialog, task_id, task_state)


_A2A_SEND = {
    "SendMessage": Carrier.A2A_1_0,
    "SendStreamingMessage": Carrier.A2A_1_0,
    "message/send": Carrier.A2A_0_3,
    "message/stream": Carrier.A2A_0_3,
}
_A2A_CANCEL = {"CancelTask": Carrier.A2A_1_0, "tasks/cancel": Carrier.A2A_0_3}
_MCP_METHODS = {"tools/call": Role.OFFER, "notifications/cancelled": Role.CANCEL}

# A2A 0.3 task state names and their A2A 1.0 equivalents (the 0.3 names cover every state).
TASK_STATES_0_3 = {
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
_TASK_STATES_1_0 = frozenset(TASK_STATES_0_3.values())


def _request(value: Mapping[str, Any]) -> Iterator[_Any]:
    method = value["method"]
    params = value.get("params")
    if not is_map(params):
        return
    if method in _A2A_SEND:
        carrier = _A2A_SEND[method]
        yield from _a2a_message(params.get("message"), carrier=carrier, role=Role.OFFER)
    elif method in _A2A_CANCEL:
        carrier = _A2A_CANCEL[method]
        yield from _cancel(params, carrier=carrier, task_id=_text(params.get("id")))
    elif method in _MCP_METHODS:
        yield from _mcp_meta(params, "params._meta", role=_MCP_METHODS[method])


def _cancel(
    params: Mapping[str, Any], *, carrier: Carrier, task_id: str | None
) -> Iterator[Found | Unreadable]:
    # Profile §9: a delegator's canceled rides in the cancel request's own metadata. The
    # request names the task but no context, so the carrier dialog is unknown.
    metadata = params.get("metadata")
    if is_map(metadata) and A2A_EXTENSION_URI in metadata:
        yield _found(
            metadata[A2A_EXTENSION_URI],
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


def _response(result: object) -> Iterator[_Any]:
    if not is_map(result):
        return
    if is_map(result.get("_meta")):  # only MCP results have "_meta"
        yield from _mcp_meta(result, "result._meta", role=Role.STATUS)
    else:
        yield from _a2a_object(result, role=Role.STATUS)


def _mcp_meta(
    container: Mapping[str, Any], where: str, *, role: Role
) -> Iterator[Found | Unreadable]:
    # Only our key counts; io.modelcontextprotocol/* and every other _meta key are ignored.
    meta = container.get("_meta")
    if is_map(meta) and MCP_META_KEY in meta:
        yield _found(meta[MCP_META_KEY], where, carrier=Carrier.MCP, role=role)


def a2a_member(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    """An A2A member by its JSON name, or by its snake_case name: protobuf JSON parsers
    accept the original field names too, so A2A 1.0 senders may use either."""
    return obj[camel] if camel in obj else obj.get(snake)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _a2a_object(obj: Mapping[str, Any], *, role: Role | None) -> Iterator[_Any]:
    """A result or bare A2A object: Message, Task, status update, or a 1.0 wrapper of one."""
    kind = obj.get("kind")
    if kind is not None:  # A2A 0.3 names every object's kind
        if kind == "message":
            yield from _a2a_message(obj, carrier=Carrier.A2A_0_3, role=role)
        elif kind in ("task", "status-update"):
            yield from _a2a_task(obj, carrier=Carrier.A2A_0_3)
        return
    # A2A 1.0 SendMessageResponse / StreamResponse: exactly one of these members. (A bare
    # send request's params look the same; the message's own clues then give the version.)
    message = obj.get("message")
    task = obj.get("task")
    update = a2a_member(obj, "statusUpdate", "status_update")
    if is_map(message):
        yield from _a2a_message(message, carrier=None, role=role)
    elif is_map(task):
        yield from _a2a_task(task, carrier=None)
    elif is_map(update):
        yield from _a2a_task(update, carrier=Carrier.A2A_1_0)
    elif a2a_member(obj, "messageId", "message_id") is not None:
        yield from _a2a_message(obj, carrier=None, role=role)
    elif is_map(obj.get("status")):
        yield from _a2a_task(obj, carrier=None)


def _version_of(obj: Mapping[str, Any]) -> Carrier:
    """A2A version of an object without a version-bearing envelope (0.3 clues, else 1.0)."""
    status = obj.get("status")
    state = status.get("state") if is_map(status) else None
    if (
        "kind" in obj
        or obj.get("role") in ("user", "agent")
        or (isinstance(state, str) and state in TASK_STATES_0_3)
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
    return Role.OFFER if is_map(value) and "offer" in value else Role.STATUS


def _a2a_message(
    message: object,
    *,
    carrier: Carrier | None,
    role: Role | None,
    task_id: str | None = None,
    task_context: str | None = None,
    task_state: str | None = None,
) -> Iterator[Found | Unreadable]:
    if not is_map(message):
        return
    metadata = message.get("metadata")
    if not is_map(metadata) or A2A_EXTENSION_URI not in metadata:
        return
    value = metadata[A2A_EXTENSION_URI]
    yield _found(
        value,
        "message.metadata",
        carrier=carrier or _version_of(message),
        role=role or _sender_role(message.get("role"), value),
        # The carrying message's contextId; a task status message may omit it, then the
        # task's own contextId is the dialog.
        dialog=_text(a2a_member(message, "contextId", "context_id")) or task_context,
        task_id=task_id or _text(a2a_member(message, "taskId", "task_id")),
        task_state=task_state,
    )


def _a2a_task(task: Mapping[str, Any], *, carrier: Carrier | None) -> Iterator[_Any]:
    """A Task or a status update event: the status rides in ``status.message``; the host
    task state is read whether or not it carries one."""
    status = task.get("status")
    if not is_map(status):
        return
    state = status.get("state")
    normal_state = None
    if isinstance(state, str):
        normal_state = state if state in _TASK_STATES_1_0 else TASK_STATES_0_3.get(state)
    carrier = carrier or _version_of(task)
    task_id = _text(task.get("id")) or _text(a2a_member(task, "taskId", "task_id"))
    task_context = _text(a2a_member(task, "contextId", "context_id"))
    carried = list(
        _a2a_message(
            status.get("message"),
            carrier=carrier,
            role=Role.STATUS,
            task_id=task_id,
            task_context=task_context,
            task_state=normal_state,
        )
    )
    yield from carried
    if not carried and task_id is not None and normal_state is not None:
        yield TaskState(carrier, task_id, normal_state, task_context)
