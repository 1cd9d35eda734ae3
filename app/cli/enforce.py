"""``handoff-trace tap --enforce``: the tap as the agent's handoff side, for an agent whose
code cannot change (issue 22, item 2).

``Enforcer`` is an ASGI layer in front of the forwarding app. It holds the agent's
``handoff_context.agent.Agent`` (its identifier, the trust configuration, its replay memory
and, when the sidecar was given the agent's key, its signer) and does with the A2A JSON-RPC
traffic exactly what the in-process integration (``handoff_context.a2a``) does with the
SDK's calls, through the same functions:

- ``SendMessage`` / ``SendStreamingMessage``: the offer in the message's metadata
  (profile §9) is checked with the agent as the receiver (profile §6, §7, §5). A failing
  offer is answered with the JSON-RPC error the a2a-sdk client raises as
  ``InvalidParamsError`` (-32602, its ``data`` naming the profile reason, the detail and,
  with the key, the signed ``rejected``); the request never reaches the agent. A
  retransmission is answered with the last signed status, octet for octet, and not
  forwarded. A message without an offer is refused (``policy``), unless it names a task
  that arrived with one (a follow-up).
- with the key: in every answer that passes back (a JSON result or an event stream), the
  task states of a task that arrived with an offer become signed statuses in the status
  message's metadata (working: ``accepted``; completed, failed, rejected; never
  ``canceled``, which only the delegator signs), once per state.
- ``CancelTask`` for such a task must carry the delegator's signed ``canceled``.
- MCP ``tools/call`` (Streamable HTTP): the offer in ``params._meta`` is checked as the mcp
  integration's middleware checks it (refusal: its ``MCPError``, -32602, with the same
  ``data``); the call's result gets the signed ``completed`` (``failed`` for an
  ``isError`` result) in its ``_meta``; a JSON-RPC error answer gets a signed ``failed``
  reported, the error unchanged; a retransmission gets an ``isError`` result carrying the
  last status (the sidecar keeps no tool results).

- the HTTP+JSON binding's ``message:send``, ``message:stream`` and ``tasks/ID:cancel`` are
  checked as their JSON-RPC twins (the body is the same request message); a refusal is
  the error as the SDK's REST server renders it (HTTP 400, a ``google.rpc.ErrorInfo``
  whose ``metadata`` is the data), and answers (the result itself) are signed alike.

What it cannot check it does not let through: a POST body that is not JSON (-32700), the
A2A 0.3 methods (``message/send``, ``message/stream``) and JSON-RPC batches are refused
with a clear error.
Everything else (agent card, ``GetTask``, ``ListTasks``, ...) is forwarded; answers about
a known task are signed too. A guarded request goes upstream without the client's
``Accept-Encoding``, so that its answer can be read and signed.

- MCP ``notifications/cancelled`` for a tool call that arrived with an offer must carry the
  delegator's signed ``canceled``: a forged or unsigned one is refused (HTTP 400) and
  never reaches the tool.

The offers taken on are kept by task and by dialog (``tasks``, ``dialogs``): the egress
proxy (``app.cli.egress``) continues them in the agent's own delegations.
"""

from __future__ import annotations

import functools
import json
import logging
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from handoff_context import StatusState
from handoff_context.agent import Agent, Decision, Mode, Received
from handoff_context.errors import Reason

from app.errors import HandoffTraceError

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("handoff_trace.tap.enforce")

MAX_BODY = 8 * 1024 * 1024  # a request body, or one answer or event, read whole
_KEEP_TASKS = 10_000
_SEND = frozenset({"SendMessage", "SendStreamingMessage"})
_UNCHECKED = {
    "message/send": "A2A 0.3 requests are not checked by the enforcing tap: use A2A 1.0",
    "message/stream": "A2A 0.3 requests are not checked by the enforcing tap: use A2A 1.0",
}


class Refusal(HandoffTraceError):
    """A request the enforcer answers itself with a JSON-RPC error."""

    reason = "refused"

    def __init__(self, code: int, message: str, data: Any = None, error: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data
        self.error = error  # the a2a-sdk error, when it is one (the HTTP+JSON rendering)


class Enforcer:
    """The enforcing ASGI layer around ``app`` (see the module docstring)."""

    def __init__(self, app: App, agent: Agent) -> None:
        from a2a.types import a2a_pb2

        self.app = app
        self.agent = agent
        self.pb = a2a_pb2
        self.tasks: OrderedDict[str, Received] = OrderedDict()
        self.by_offer: dict[bytes, str] = {}
        # The offers taken on, by dialog (the offer's, and the task's contextId once an
        # answer shows it): what ``handoff-trace tap --egress`` ties an outgoing call to.
        self.dialogs: OrderedDict[str, dict[bytes, Received]] = OrderedDict()
        # MCP tool calls taken on, by (session, request id): what a cancel names.
        self.calls: OrderedDict[tuple[str, Any], Received] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        path = scope.get("raw_path") or scope["path"].encode()
        rest = rest_call(path.split(b"?")[0])
        body = await read_body(receive, send, "the request body is too large to check")
        if body is None:
            return
        fail = rpc_error if rest is None else rest_error
        request_id: Any = None
        try:
            request = json.loads(body) if body.strip() else None
        except (ValueError, UnicodeDecodeError):
            # What the tap cannot read it cannot check, and an upstream with another JSON
            # parser might read it: answered here, never forwarded.
            await fail(send, None, Refusal(-32700, "the request body is not JSON"))
            return
        if rest is not None:
            # The HTTP+JSON binding's send or cancel: checked as its JSON-RPC twin.
            method, task_id = rest
            if not isinstance(request, dict) and request is not None:
                await fail(send, None, Refusal(-32600, "the request body is not a JSON object"))
                return
            params = dict(request or {})
            if task_id is not None:
                params["id"] = task_id
            request = {"method": method, "params": params}
        received: Received | None = None
        session = header(scope["headers"], b"mcp-session-id", lower=False).decode("latin-1")
        if isinstance(request, list):
            await fail(send, None, Refusal(-32600, "JSON-RPC batches are not checked"))
            return
        if isinstance(request, dict):
            request_id = request.get("id")
            try:
                canceled = self._checked_cancel(request, session)
                early = self._admit(request, session) if canceled is None else None
            except Refusal as exc:
                # A refused notification has no id to answer: the Streamable HTTP
                # transport answers it with an HTTP error (MCP 2025-11-25, "Sending
                # Messages to the Server").
                status = 200 if "id" in request or rest is not None else 400
                await fail(send, request_id, exc, status=status)
                return
            if isinstance(early, tuple):
                await self._reply(send, request, early, rest=rest is not None)
                return
            received = early
            if canceled is not None and canceled.canceled is not None:
                self._ended(canceled)
                if self.agent.signs:
                    # Profile §8, as the in-process integration does: what the task
                    # delegated (through the egress proxy) is canceled first, then the task.
                    await self.agent.propagate_cancel(canceled)

        replayed = False

        async def again() -> MutableMapping[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        inner = dict(scope)
        inner["headers"] = [(k, v) for k, v in scope["headers"] if k.lower() != b"accept-encoding"]
        if _is_tool_call(request):
            if received is not None:
                self._keep_call((session, rpc_id(request_id)), received)
            handle: Callable[[Any], bool] = functools.partial(
                self.answer_tool, request_id, received
            )
        elif rest is not None:
            handle = functools.partial(self.sign_bare, received=received)
        else:
            handle = functools.partial(self.sign, received=received)
        await self.app(inner, again, AnswerReader(send, handle).send)

    # -- requests -------------------------------------------------------------------------

    def _admit(self, request: dict[str, Any], session: str) -> Received | tuple[Any, ...] | None:
        """None or the Received to forward the request with; a tuple (the retransmission
        reply) to answer it here; raises Refusal."""
        method = request.get("method")
        if method in _UNCHECKED:
            raise invalid_params(str(_UNCHECKED[method]), {"reason": Reason.POLICY.value})
        if method == "tools/call":
            return self._tool_call(request)
        if method not in _SEND:
            return None
        from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]
        from handoff_context.a2a import carried

        try:
            params = json_format.ParseDict(
                request.get("params") or {},
                self.pb.SendMessageRequest(),
                ignore_unknown_fields=True,
            )
        except (json_format.ParseError, TypeError, ValueError) as exc:
            raise invalid_params(f"invalid params: {str(exc)[:200]}", None) from None
        message = params.message
        value = carried(message.metadata)
        dialog = message.context_id or None
        if value is None:
            if message.task_id and message.task_id in self.tasks:
                return self.tasks[message.task_id]  # a follow-up of a task with an offer
            decision = self.agent.refuse_missing(dialog=dialog)
        else:
            decision = self.agent.check_offer(value, dialog=dialog)
        if decision.run:
            if decision.received is not None:
                self.working_in(decision.received.payload.dialog, decision.received)
            return decision.received
        if decision.retransmission:
            return ("retransmission", decision, message.context_id)
        raise _refused(decision)

    def _checked_cancel(self, request: dict[str, Any], session: str) -> Received | None:
        """A cancel (A2A ``CancelTask``, MCP ``notifications/cancelled``) of work that
        arrived with an offer: the Received it cancels once its ``canceled`` was checked;
        None for any other request. Raises Refusal."""
        method = request.get("method")
        if method == "CancelTask":
            return self._cancel(request.get("params"))
        if method == "notifications/cancelled":
            return self._tool_cancel(request.get("params"), session)
        return None

    def _tool_call(self, request: dict[str, Any]) -> Received | tuple[Any, ...] | None:
        """An MCP ``tools/call``: the offer in ``params._meta`` (profile §9), checked as the
        mcp integration's middleware checks it; refusals are its ``MCPError``."""
        from handoff_context.carry import MCP_META_KEY
        from handoff_context.mcp import refused

        params = request.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        value = meta.get(MCP_META_KEY) if isinstance(meta, dict) else None
        if value is None:
            decision = self.agent.refuse_missing(dialog=None)
        else:
            # MCP names no dialog of its own: the carrier dialog is unknown (profile §6.5).
            decision = self.agent.check_offer(value, dialog=None, carrier="mcp")
        if decision.run:
            if decision.received is not None:
                self.working_in(decision.received.payload.dialog, decision.received)
            return decision.received
        if decision.retransmission:
            return ("mcp", decision)
        error = refused(decision)
        raise Refusal(error.code, error.message, error.data)

    def _cancel(self, params: Any) -> Received | None:
        task_id = params.get("id") if isinstance(params, dict) else None
        received = self.tasks.get(task_id) if isinstance(task_id, str) else None
        if received is None:
            return None
        from handoff_context.carry import A2A_EXTENSION_URI

        metadata = params.get("metadata") if isinstance(params, dict) else None
        value = metadata.get(A2A_EXTENSION_URI) if isinstance(metadata, dict) else None
        ok, reason, detail = self._judge_cancel(received, value)
        if not ok and self.agent.mode is Mode.ENFORCE:
            raise invalid_params(
                f"cancel refused ({reason}): {detail}", {"reason": reason, "detail": detail}
            )
        return received

    def _judge_cancel(self, received: Received, value: Any) -> tuple[bool, str, str]:
        """Whether a cancel of ``received`` holds its delegator's signed ``canceled``
        (``value``, as carried), and the reason and detail when it does not."""
        from handoff_context import Outcome

        if value is None:
            return False, Reason.POLICY.value, "the cancel carries no signed canceled"
        verdict = self.agent.check_cancel(received, value)
        ok = verdict.outcome in (Outcome.ACCEPT, Outcome.DUPLICATE)
        reason = verdict.reason.value if verdict.reason else Reason.POLICY.value
        return ok, reason, verdict.detail or ""

    def _tool_cancel(self, params: Any, session: str) -> Received | None:
        """MCP ``notifications/cancelled`` for a tool call that arrived with an offer: it
        must carry the delegator's signed ``canceled`` in ``params._meta`` (profile §9),
        checked as the mcp integration checks it. Unlike the in-process integration, which
        sees the cancel only after the SDK acted on it, the sidecar sees it first: a
        forged or unsigned cancel is refused (HTTP 400) and never reaches the tool."""
        if not isinstance(params, dict):
            return None
        received = self.calls.get((session, rpc_id(params.get("requestId"))))
        if received is None:
            return None
        from handoff_context.carry import MCP_META_KEY

        meta = params.get("_meta")
        value = meta.get(MCP_META_KEY) if isinstance(meta, dict) else None
        ok, reason, detail = self._judge_cancel(received, value)
        if not ok and self.agent.mode is Mode.ENFORCE:
            from mcp_types.jsonrpc import INVALID_PARAMS

            message = f"cancel refused ({reason}): {detail}"
            raise Refusal(INVALID_PARAMS, message, {"reason": reason, "detail": detail})
        return received

    async def _reply(
        self, send: Send, request: dict[str, Any], early: tuple[Any, ...], *, rest: bool = False
    ) -> None:
        from google.protobuf import json_format
        from handoff_context.a2a import retransmission_reply

        if early[0] == "mcp":
            from handoff_context.mcp import retransmission_result

            result = retransmission_result(early[1])
            dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            answer = {"jsonrpc": "2.0", "id": request.get("id"), "result": dumped}
            await _send_whole(send, compact_json(answer), "application/json")
            return
        _, decision, context_id = early
        task_id = self.by_offer.get(decision.verdict.digest or b"")
        reply = retransmission_reply(decision, context_id=context_id, task_id=task_id)
        result = {"message": json_format.MessageToDict(reply, preserving_proto_field_name=False)}
        answer = {"jsonrpc": "2.0", "id": request.get("id"), "result": result}
        if rest:  # the HTTP+JSON binding answers with the result itself
            answer = result
        if request.get("method") == "SendStreamingMessage":
            await _send_whole(
                send, b"data: " + compact_json(answer) + b"\r\n\r\n", "text/event-stream"
            )
        else:
            await _send_whole(send, compact_json(answer), "application/json")

    # -- answers --------------------------------------------------------------------------

    def working_in(self, dialog: str, received: Received) -> None:
        """Remember that ``received`` is worked on in ``dialog`` (bounded, oldest out; and
        in the agent's state file, where it keeps one, for after a restart)."""
        offers = self.dialogs.setdefault(dialog, {})
        offers[received.offer.digest] = received
        self.dialogs.move_to_end(dialog)
        while len(self.dialogs) > _KEEP_TASKS:
            self.dialogs.popitem(last=False)
        self._store_working(f"dialog:{dialog}", received)

    def _store_working(self, name: str, received: Received) -> None:
        keep = getattr(self.agent.state, "keep_working", None)
        if keep is None:  # a memory without it (InMemoryState): this process's only
            return
        import cbor2
        from handoff_context import handoff_object

        obj = received.handoff
        carried = handoff_object(obj.offer, obj.chain, form=obj.form)
        keep(name, received.offer, cbor2.dumps({"carrier": received.carrier, "handoff": carried}))

    def _stored_working(self, name: str) -> list[tuple[Received, bool]]:
        """The offers the state file holds as worked on under ``name``: (Received, ended)."""
        rows = getattr(self.agent.state, "working", None)
        if rows is None:
            return []
        import cbor2
        from handoff_context import parse_element, parse_object
        from handoff_context.errors import HandoffError

        found = []
        for _digest, octets, done in rows(name):
            try:
                kept = cbor2.loads(octets)
                obj = parse_object(kept["handoff"])
                element = parse_element(obj.offer, obj.form)  # type: ignore[union-attr]
                found.append((Received(obj, element, str(kept["carrier"])), done))  # type: ignore[arg-type]
            except (HandoffError, ValueError, KeyError, TypeError, cbor2.CBORDecodeError):
                continue  # a row this version cannot read names no work it can continue
        return found

    def task_named(self, task_id: str) -> Received | None:
        """The offer the task ``task_id`` arrived with, if the sidecar took it on."""
        if task_id in self.tasks:
            return self.tasks[task_id]
        stored = self._stored_working(f"task:{task_id}")
        return stored[-1][0] if stored else None

    def offers_in(self, dialog: str) -> list[tuple[Received, bool]]:
        """The offers taken on in ``dialog``, oldest first, each with whether its work
        ended (a final status signed, or a cancel)."""
        found = {d: (r, ended(r)) for d, r in self.dialogs.get(dialog, {}).items()}
        for received, done in self._stored_working(f"dialog:{dialog}"):
            found.setdefault(received.offer.digest, (received, done))
        return list(found.values())

    def _ended(self, received: Received) -> None:
        end = getattr(self.agent.state, "end_working", None)
        if end is not None and ended(received):
            end(received.offer.digest)

    def keep(self, task_id: str, received: Received) -> None:
        received.task_id = received.task_id or task_id
        if task_id not in self.tasks:
            self._store_working(f"task:{task_id}", received)
        self.tasks[task_id] = received
        self.tasks.move_to_end(task_id)
        self.by_offer[received.offer.digest] = task_id
        while len(self.tasks) > _KEEP_TASKS:
            _, dropped = self.tasks.popitem(last=False)
            self.by_offer.pop(dropped.offer.digest, None)

    def _keep_call(self, key: tuple[str, Any], received: Received) -> None:
        self.calls[key] = received
        self.calls.move_to_end(key)
        while len(self.calls) > _KEEP_TASKS:
            self.calls.popitem(last=False)

    def answer_tool(self, request_id: Any, received: Received | None, answer: Any) -> bool:
        """Sign, in the answer to an MCP tool call that arrived with an offer, the status its
        result calls for (the mcp integration's ``answered_result``). True when changed."""
        if received is None or not isinstance(answer, dict) or answer.get("id") != request_id:
            return False
        from handoff_context.mcp import answered_result

        if isinstance(answer.get("result"), dict):
            answer["result"] = answered_result(self.agent, received, answer["result"])
            return True
        if "error" in answer:  # the tool call failed: a signed failed, the error unchanged
            from handoff_context import StatusState

            self.agent.answer(received, StatusState.FAILED)
        return False

    def sign_bare(self, answer: Any, received: Received | None) -> bool:
        """``sign`` for the HTTP+JSON binding, whose answers are the result itself."""
        if not isinstance(answer, dict) or "error" in answer:
            return False
        wrapped = {"result": answer}
        if not self.sign(wrapped, received):
            return False
        answer.clear()
        answer.update(wrapped["result"])
        return True

    def sign(self, answer: Any, received: Received | None) -> bool:
        """Sign, in a JSON-RPC answer, the task states of a task that arrived with an offer.
        True when the answer changed."""
        if not isinstance(answer, dict) or not isinstance(answer.get("result"), dict):
            return False
        from google.protobuf import json_format
        from handoff_context.a2a import sign_task_status

        try:
            event = json_format.ParseDict(
                answer["result"], self.pb.StreamResponse(), ignore_unknown_fields=True
            )
        except (json_format.ParseError, TypeError, ValueError):
            return False
        if event.HasField("task"):
            status, task_id, context_id = event.task.status, event.task.id, event.task.context_id
        elif event.HasField("status_update"):
            update = event.status_update
            status, task_id, context_id = update.status, update.task_id, update.context_id
        else:
            return False
        if received is not None and task_id:
            self.keep(task_id, received)
        owner = self.tasks.get(task_id)
        if owner is None:
            return False
        if context_id and context_id != owner.payload.dialog:
            self.working_in(context_id, owner)
        if not sign_task_status(self.agent, owner, status, task_id=task_id, context_id=context_id):
            return False
        self._ended(owner)
        answer["result"] = json_format.MessageToDict(event, preserving_proto_field_name=False)
        return True


class AnswerReader:
    """An upstream's answer on its way back: JSON and event-stream answers are read and
    each JSON-RPC answer in them is given to ``handle``, which may change it in place
    (``Enforcer`` puts signed statuses in) and says so; anything else passes untouched.
    The egress proxy (``app.cli.egress``) reads its delegates' answers with it too."""

    def __init__(self, send: Send, handle: Callable[[Any], bool], *, errors: bool = False) -> None:
        self._send = send
        self.handle = handle
        self.errors = errors  # read 4xx answers too (the HTTP+JSON binding's refusals)
        self.kind = ""
        self.start: MutableMapping[str, Any] = {}
        self.buffer = b""

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = message.get("headers", [])
            media = header(headers, b"content-type")
            encoded = header(headers, b"content-encoding") not in (b"", b"identity")
            readable = message["status"] == 200 or (self.errors and 400 <= message["status"] < 500)
            if encoded or not readable:
                self.kind = "pass"
            elif media.startswith(b"text/event-stream"):
                self.kind = "events"
            elif media.startswith(b"application/json") or media.split(b";")[0].endswith(b"+json"):
                # application/a2a+json: the A2A HTTP+JSON binding's answers.
                self.kind = "json"
            else:
                self.kind = "pass"
            if self.kind == "pass":
                await self._send(message)
                return
            kept = [(k, v) for k, v in headers if k.lower() != b"content-length"]
            self.start = {**message, "headers": kept}
            if self.kind == "events":
                await self._send(self.start)
            return
        if message["type"] != "http.response.body" or self.kind == "pass":
            await self._send(message)
            return
        self.buffer += message.get("body", b"")
        more = message.get("more_body", False)
        if self.kind == "json":
            if more and len(self.buffer) > MAX_BODY:
                # Too large to hold: passed on as it comes, unsigned (no A2A or MCP answer
                # about one task is this large).
                await self._send(self.start)
                await self._send(
                    {"type": "http.response.body", "body": self.buffer, "more_body": True}
                )
                self.buffer, self.kind = b"", "pass"
                return
            if more:
                return
            out = self._json(self.buffer)
            headers = [*self.start["headers"], (b"content-length", str(len(out)).encode())]
            await self._send({**self.start, "headers": headers})
            await self._send({"type": "http.response.body", "body": out, "more_body": False})
            return
        out = b""
        while True:
            end, sep = _event_end(self.buffer)
            if end < 0:
                break
            block, self.buffer = self.buffer[:end], self.buffer[end + len(sep) :]
            out += self._event(block, sep) + sep
        if not more or len(self.buffer) > MAX_BODY:  # the end, or an event too large to hold
            out += self.buffer
            self.buffer = b""
        if out or not more:
            await self._send({"type": "http.response.body", "body": out, "more_body": more})

    def _json(self, body: bytes) -> bytes:
        try:
            answer = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return body
        return compact_json(answer) if self.handle(answer) else body

    def _event(self, block: bytes, sep: bytes) -> bytes:
        line_sep = sep[: len(sep) // 2]
        lines = block.split(line_sep)
        data = [line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")]
        if not data:
            return block
        try:
            answer = json.loads(b"\n".join(data))
        except (ValueError, UnicodeDecodeError):
            return block
        if not self.handle(answer):
            return block
        rest = [line for line in lines if not line.startswith(b"data:")]
        return line_sep.join([*rest, b"data: " + compact_json(answer)])


def _is_tool_call(request: Any) -> bool:
    return isinstance(request, dict) and request.get("method") == "tools/call"


def _event_end(buffer: bytes) -> tuple[int, bytes]:
    found = [(buffer.find(sep), sep) for sep in (b"\r\n\r\n", b"\n\n")]
    found = [(i, sep) for i, sep in found if i >= 0]
    return min(found) if found else (-1, b"")


def header(headers: list[tuple[bytes, bytes]], name: bytes, *, lower: bool = True) -> bytes:
    for key, value in headers:
        if key.lower() == name:
            value = bytes(value).strip()
            return value.lower() if lower else value
    return b""


def compact_json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _refused(decision: Decision) -> Refusal:
    """The integration's own refusal error (``handoff_context.a2a.refused``)."""
    from handoff_context.a2a import refused

    return _rendered(refused(decision))


def invalid_params(message: str, data: dict[str, Any] | None) -> Refusal:
    from a2a.utils.errors import InvalidParamsError

    return _rendered(InvalidParamsError(message=message, data=data))


def _rendered(error: Any) -> Refusal:
    """An a2a-sdk error as the SDK's JSON-RPC server renders it (what its clients parse)."""
    from a2a.server.request_handlers.response_helpers import build_error_response

    body = build_error_response(None, error)["error"]
    return Refusal(body["code"], body["message"], body.get("data"), error)


async def rpc_error(send: Send, request_id: Any, exc: Refusal, *, status: int = 200) -> None:
    error: dict[str, Any] = {"code": exc.code, "message": exc.message}
    if exc.data is not None:
        error["data"] = exc.data
    answer = {"jsonrpc": "2.0", "id": request_id, "error": error}
    await _send_whole(send, compact_json(answer), "application/json", status=status)


def ended(received: Received) -> bool:
    """Has the work ``received`` started ended (a final status signed, or canceled)?"""
    final = {StatusState.COMPLETED, StatusState.FAILED, StatusState.REJECTED}
    return bool(received.signed & final) or received.canceled is not None


def rpc_id(value: Any) -> str | int | None:
    """A JSON-RPC id as a key: a string or an integer (JSON-RPC 2.0 §4), else None (an
    id of another type names no call the sidecar keeps)."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def rest_call(path: bytes) -> tuple[str, str | None] | None:
    """The A2A HTTP+JSON call a POST to ``path`` is, as its JSON-RPC method and the task
    id the path names: ``.../message:send``, ``.../message:stream``, ``.../tasks/ID:cancel``
    (any prefix, a tenant's included); None for any other path."""
    if path.endswith(b"/message:send"):
        return "SendMessage", None
    if path.endswith(b"/message:stream"):
        return "SendStreamingMessage", None
    head, slash, last = path.rpartition(b"/")
    if slash and last.endswith(b":cancel") and head.endswith(b"/tasks") and len(last) > 7:
        return "CancelTask", urllib.parse.unquote(last[:-7].decode("latin-1"))
    return None


async def rest_error(send: Send, request_id: Any, exc: Refusal, *, status: int = 400) -> None:
    """A refusal as the a2a-sdk's HTTP+JSON server renders its error (what its REST client
    raises: ``InvalidParamsError`` with the same ``data``), with that error's own HTTP
    status (``request_id`` and ``status``: unused, ``rpc_error``'s signature)."""
    from a2a.utils.error_handlers import build_rest_error_payload

    if exc.error is not None:
        payload = build_rest_error_payload(exc.error)
    else:
        payload = {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": exc.message}}
    code = payload["error"].get("code", 400)
    await _send_whole(send, compact_json(payload), "application/json", status=int(code))


async def read_body(receive: Receive, send: Send, too_large: str) -> bytes | None:
    """A request's whole body, at most ``MAX_BODY`` octets; None when the client went away
    or the body was too large (answered 413 with ``too_large``)."""
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > MAX_BODY:
            await plain_error(send, too_large, status=413)
            return None
        if not message.get("more_body", False):
            return body


async def plain_error(send: Send, detail: str, *, status: int = 400) -> None:
    await _send_whole(send, compact_json({"detail": detail}), "application/json", status=status)


async def _send_whole(send: Send, body: bytes, media: str, *, status: int = 200) -> None:
    headers = [(b"content-type", media.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
