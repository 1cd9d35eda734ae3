"""``handoff-trace tap --egress-listen``: the sidecar as the agent's delegating side, for an
agent whose code cannot change (issue 22, item 3).

The agent uses the egress listener as its HTTP proxy (``HTTP_PROXY`` in its environment, or
its HTTP client's ``proxy`` setting) and calls its delegates by their own URLs, as it
always did. A forward proxy rather than a base URL because an A2A client goes where the
delegate's agent card sends it: a card fetched through the proxy still names the delegate's
own URL, which the proxy also serves, so nothing in the agent or the card is rewritten.
Only the delegates given with ``--delegate ID URL`` are reached (matched by the host and
port the agent names); every other target is refused, and a ``CONNECT`` tunnel too (what
passes inside TLS cannot be read, nor signed).

For each new delegation the sidecar signs the offer as the agent, with the agent's key:

- A2A ``SendMessage`` / ``SendStreamingMessage`` (1.0: JSON-RPC, or the HTTP+JSON
  binding's ``message:send`` / ``message:stream``) without an offer of its own: the
  offer goes into ``message.metadata`` and the extension into ``message.extensions``
  (profile §9). A2A 0.3 sends and JSON-RPC batches are refused (nothing it cannot read
  is signed). A message that names a task of an earlier
  delegation (a follow-up) gets none; a message that carries an offer already (an agent
  with its own integration) passes unchanged.
- MCP ``tools/call``: the offer goes into ``params._meta`` beside what is there.

Which handoff does it continue? The one the agent is working under, as far as the request
says so (``tie``): the task id in a ``Handoff-Context`` request header or in the message's
``referenceTaskIds``, or the dialog (A2A ``contextId``, or the ``Handoff-Context`` header)
of an offer the ingress side (``app.cli.enforce.Enforcer``, same process) took on. It never
guesses from timing ("the only task in flight"): two tasks at once would get each other's
chain, a signed false statement. A dialog with two live offers whose tasks go on is
ambiguous and refused unless a task id names one (a turn whose task ended does not
count). A call tied to nothing is refused (``--egress-untied refuse``, the default) or
starts a new dialog (``new-dialog``: an offer with no ``prev``, in the message's
``contextId``, or the header's value, or a new one).

On the way back, the delegate's signed statuses (in the answer, a JSON answer or an event
stream) and a refusal's signed ``rejected`` are checked against the delegation
(``Agent.check_reply``); the answer passes unchanged. A ``CancelTask`` or MCP
``notifications/cancelled`` for a delegation the sidecar signed gets the agent's signed
``canceled`` (one per delegation: a second cancel carries the same octets), and a valid
cancel of the task the delegations continue cancels them first (``Enforcer`` calls
``Agent.propagate_cancel``; the sidecar sends each a ``CancelTask``). Both directions are
reported through the agent's reporter.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import json
import urllib.parse
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from handoff_context import StatusState
from handoff_context.agent import Delegation, Received, enter, leave
from handoff_context.carry import A2A_EXTENSION_URI, MCP_META_KEY
from handoff_context.errors import ChainWindowError, Reason

from app.cli.enforce import (
    AnswerReader,
    Enforcer,
    Refusal,
    compact_json,
    header,
    invalid_params,
    plain_error,
    read_body,
    rest_call,
    rest_error,
    rpc_error,
    rpc_id,
)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

CONTEXT_HEADER = b"handoff-context"
UNTIED = ("refuse", "new-dialog")
_SEND = frozenset({"SendMessage", "SendStreamingMessage"})
# What a cancel the sidecar sends itself does not repeat of the agent's own request: its
# framing and the connection's headers.
_NOT_REPEATED = frozenset(
    {
        b"host",
        b"content-length",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_UNSIGNED = {
    "message/send": "A2A 0.3 requests are not signed by the egress proxy: use A2A 1.0",
    "message/stream": "A2A 0.3 requests are not signed by the egress proxy: use A2A 1.0",
}
_KEEP = 10_000


@dataclass(frozen=True)
class Delegate:
    """A delegate the agent may reach through the egress proxy: its identifier (the
    offer's ``aud``) and URL; the agent names it by the URL's host and port."""

    iss: str
    url: str

    @property
    def netloc(self) -> str:
        return urllib.parse.urlsplit(self.url).netloc.lower()

    @property
    def origin(self) -> str:
        parts = urllib.parse.urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"


def loopback(host: str) -> bool:
    """Is ``host`` a loopback address (the egress listener may listen nowhere else)?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def delegates_of(pairs: Sequence[Sequence[str]]) -> list[Delegate]:
    """``--delegate ID URL`` pairs as delegates. Raises argparse.ArgumentTypeError."""
    found: dict[str, Delegate] = {}
    for iss, url in pairs:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise argparse.ArgumentTypeError(f"--delegate: {url[:60]!r} is not an http(s) URL")
        if not iss or not iss.isprintable() or " " in iss:
            raise argparse.ArgumentTypeError(f"--delegate: {iss[:60]!r} is not an identifier")
        delegate = Delegate(iss, url)
        if delegate.netloc in found:
            raise argparse.ArgumentTypeError(f"--delegate: {parts.netloc} is named twice")
        found[delegate.netloc] = delegate
    return list(found.values())


class Egress:
    """The ASGI app of the egress listener (see the module docstring)."""

    def __init__(
        self,
        enforcer: Enforcer,
        delegates: Sequence[Delegate],
        forwarder: Callable[[str], App],
        *,
        untied: str = "refuse",
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if untied not in UNTIED:
            raise ValueError(f"untied must be one of {UNTIED}")
        self.enforcer = enforcer
        self.agent = enforcer.agent
        self.untied = untied
        # ``forwarder(origin)``: the tap's forwarding app to one delegate (app.cli.tap).
        self.routes = {d.netloc: (d, forwarder(d.origin)) for d in delegates}
        # The delegations made, by the delegate's task (A2A) or the call (MCP): what a
        # follow-up message or a cancel names.
        self.tasks: OrderedDict[tuple[str, str], Delegation] = OrderedDict()
        self.calls: OrderedDict[tuple[str, str, Any], Delegation] = OrderedDict()
        # The canceled signed for a delegation, by its offer: a second cancel carries the
        # same octets (a cancel propagated by the sidecar, then the agent's own).
        self.canceled: OrderedDict[bytes, bytes] = OrderedDict()
        # For the cancels the sidecar propagates itself (``client`` None: none).
        self.client = client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "CONNECT":
            detail = "the egress proxy opens no tunnel: call the delegate by its http:// URL"
            await plain_error(send, detail, status=405)
            return
        route = self._route(scope)
        if route is None:
            detail = "not a delegate of this agent (--delegate): the egress proxy reaches no other"
            await plain_error(send, detail, status=403)
            return
        delegate, forward, inner = route
        if scope["method"] != "POST":
            await forward(inner, receive, send)
            return
        body = await read_body(receive, send, "the request body is too large to sign")
        if body is None:
            return
        try:
            request = json.loads(body) if body.strip() else None
        except (ValueError, UnicodeDecodeError):
            request = None  # not ours to sign: the delegate answers what it cannot read
        handle: Callable[[Any], bool] = _untouched
        made: Delegation | None = None
        rest = rest_call(inner["raw_path"])
        if isinstance(request, list) and rest is None:
            await rpc_error(send, None, Refusal(-32600, "JSON-RPC batches are not signed"))
            return
        if isinstance(request, dict):
            named = header(scope["headers"], CONTEXT_HEADER, lower=False).decode("latin-1")
            session = header(scope["headers"], b"mcp-session-id", lower=False).decode("latin-1")
            # The HTTP+JSON binding's body is its JSON-RPC twin's params (a cancel's task
            # is in the path): signed in place alike, its answers are the result itself.
            call = request if rest is None else {"method": rest[0], "params": request}
            if rest is not None and rest[1] is not None:
                call["id_in_path"] = rest[1]
            try:
                handle, changed, made = self._outgoing(call, delegate, named, session)
            except Refusal as exc:
                if rest is not None:
                    await rest_error(send, None, exc)
                else:
                    status = 200 if "id" in request else 400
                    await rpc_error(send, request.get("id"), exc, status=status)
                return
            if rest is not None:
                handle = functools.partial(_bare, handle)
            if changed:
                body = compact_json(request)
        drop = {b"content-length", b"accept-encoding", CONTEXT_HEADER}
        headers = [(k, v) for k, v in inner["headers"] if k.lower() not in drop]
        if made is not None and rest is None and made.cancel is None:
            made.cancel = self._canceler(delegate, made, inner["raw_path"], headers)
        if body:
            headers.append((b"content-length", str(len(body)).encode()))
        inner["headers"] = headers
        replayed = False

        async def again() -> MutableMapping[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return dict(await receive())

        reader = AnswerReader(send, handle, errors=rest is not None)
        await forward(inner, again, reader.send)

    def _route(self, scope: Scope) -> tuple[Delegate, Any, Scope] | None:
        """The delegate a request is for, its forwarding app and the request in origin form.
        A proxy request names its target in full (``POST http://host:port/path``); a direct
        one names it in ``Host``."""
        raw = scope.get("raw_path") or scope["path"].encode()
        if raw.startswith(b"/"):
            netloc = header(scope["headers"], b"host").decode("latin-1")
            path = raw
        else:
            parts = urllib.parse.urlsplit(raw.decode("latin-1"))
            if parts.scheme != "http":
                return None
            netloc, path = parts.netloc.lower(), (parts.path or "/").encode("latin-1")
        found = self.routes.get(netloc)
        if found is None:
            return None
        inner = dict(scope)
        inner["raw_path"], inner["path"] = path, urllib.parse.unquote(path.decode("latin-1"))
        return found[0], found[1], inner

    # -- requests -------------------------------------------------------------------------

    def _outgoing(
        self, request: dict[str, Any], delegate: Delegate, named: str, session: str
    ) -> tuple[Callable[[Any], bool], bool, Delegation | None]:
        """Sign what ``request`` calls for, in place. Returns how to read its answer,
        whether the request changed and the A2A delegation it makes or follows up; raises
        Refusal."""
        method = request.get("method")
        params = request.get("params")
        if not isinstance(params, dict):
            return _untouched, False, None
        if method in _SEND:
            delegation, changed = self._send(params, delegate, named)
            if delegation is None:
                return _untouched, changed, None
            handle = functools.partial(self._a2a_answer, delegate, delegation)
            return handle, changed, delegation
        if method == "tools/call":
            delegation = self._tool_call(params, delegate, named)
            if delegation is None:
                return _untouched, False, None
            key = (delegate.netloc, session, rpc_id(request.get("id")))
            _keep(self.calls, key, delegation)
            handle = functools.partial(self._mcp_answer, request.get("id"), delegation)
            return handle, True, None
        if method in _UNSIGNED:
            raise _refusal(_UNSIGNED[str(method)])
        if method == "CancelTask":
            task_id = request.get("id_in_path", params.get("id"))
            found = self.tasks.get((delegate.netloc, str(task_id)))
            return _untouched, self._cancel(params, "metadata", A2A_EXTENSION_URI, found), None
        if method == "notifications/cancelled":
            found = self.calls.get((delegate.netloc, session, rpc_id(params.get("requestId"))))
            return _untouched, self._cancel(params, "_meta", MCP_META_KEY, found), None
        return _untouched, False, None

    def _send(
        self, params: dict[str, Any], delegate: Delegate, named: str
    ) -> tuple[Delegation | None, bool]:
        message = params.get("message")
        if not isinstance(message, dict):
            return None, False
        metadata = message.get("metadata")
        if isinstance(metadata, dict) and A2A_EXTENSION_URI in metadata:
            return None, False  # the agent signed its own offer
        task_id = message.get("taskId")
        if isinstance(task_id, str) and task_id:
            follow = self.tasks.get((delegate.netloc, task_id))
            if follow is not None:
                return follow, False  # a follow-up of a delegated task: no new offer
        context = message.get("contextId") if isinstance(message.get("contextId"), str) else ""
        refs = message.get("referenceTaskIds")
        refs = refs if isinstance(refs, list) else []
        names = [n for n in (named, *refs) if isinstance(n, str) and n]
        received = self.tie(names, context)
        if received is not None and context and context != received.payload.dialog:
            raise _refusal(
                f"the call names dialog {context!r}, but the handoff it continues is in "
                f"{received.payload.dialog!r}: a chain keeps one dialog (profile §6.5)"
            )
        delegation = self._delegate(delegate, received, dialog=context or named, carrier="a2a")
        message["contextId"] = delegation.dialog
        message["metadata"] = {**(metadata if isinstance(metadata, dict) else {})}
        message["metadata"][A2A_EXTENSION_URI] = delegation.handoff
        extensions = message.get("extensions")
        extensions = list(extensions) if isinstance(extensions, list) else []
        if A2A_EXTENSION_URI not in extensions:
            extensions.append(A2A_EXTENSION_URI)
        message["extensions"] = extensions
        return delegation, True

    def _tool_call(
        self, params: dict[str, Any], delegate: Delegate, named: str
    ) -> Delegation | None:
        meta = params.get("_meta")
        meta = dict(meta) if isinstance(meta, dict) else {}
        if MCP_META_KEY in meta:
            return None  # the agent signed its own offer
        received = self.tie([named] if named else [], "")
        delegation = self._delegate(delegate, received, dialog=named, carrier="mcp")
        meta[MCP_META_KEY] = delegation.handoff
        params["_meta"] = meta
        return delegation

    def tie(self, names: Sequence[str], context: str) -> Received | None:
        """The inbound handoff an outgoing call continues, from what the call names: a task
        the ingress side knows (by its id), else the one offer taken on in a named dialog
        whose work goes on (live, its task not ended). None when nothing ties (the
        dialog's work all ended); raises Refusal when a dialog holds several."""
        for name in names:
            found = self.enforcer.task_named(name)
            if found is not None:
                return found
        for name in (*names, context):
            offers = self.enforcer.offers_in(name) if name else []
            going = [r for r, done in offers if not done]
            now = self.agent.clock()
            live = [r for r in going if r.payload.exp >= now]
            if len(live) > 1:
                raise _refusal(
                    f"dialog {name!r} holds {len(live)} handoffs the agent works under: name "
                    "the task (a Handoff-Context header or referenceTaskIds with its id)"
                )
            if live:
                return live[0]
            if going:  # none live: the latest, so that the delegation fails with the window
                return going[-1]
        return None

    def _delegate(
        self, delegate: Delegate, received: Received | None, *, dialog: str, carrier: str
    ) -> Delegation:
        if received is None and self.untied == "refuse":
            raise _refusal(
                "this call names no task or dialog of a handoff the agent works under (pass "
                "the task's contextId, referenceTaskIds or a Handoff-Context header), and "
                "the sidecar starts no dialog of its own (--egress-untied refuse)"
            )
        token = enter(received)
        try:
            delegation = self.agent.delegate(
                delegate.iss, dialog=dialog or uuid.uuid4().hex, carrier=carrier
            )
        except ChainWindowError as exc:
            raise _refusal(f"the handoff this call continues is no longer live: {exc}") from None
        finally:
            leave(token)
        return delegation

    def _cancel(
        self, params: dict[str, Any], member: str, key: str, delegation: Delegation | None
    ) -> bool:
        """A cancel of a delegation the sidecar signed, without the delegator's ``canceled``
        of its own: the sidecar signs it, as the agent's delegating side (profile §8)."""
        if delegation is None:
            return False
        carried = params.get(member)
        carried = dict(carried) if isinstance(carried, dict) else {}
        if key in carried:
            return False
        from handoff_context import status_object

        carried[key] = status_object(self._canceled(delegation))
        params[member] = carried
        return True

    def _canceled(self, delegation: Delegation, status: bytes | None = None) -> bytes:
        """The one ``canceled`` for ``delegation``: ``status`` (just signed) or the one
        signed before, else a new one."""
        known = self.canceled.get(delegation.offer)
        if known is None:
            known = status if status is not None else self.agent.sign_cancel(delegation)
            self.canceled[delegation.offer] = known
            # Canceled by its delegator: never canceled again by propagation (§8).
            delegation.state = StatusState.CANCELED
            while len(self.canceled) > _KEEP:
                self.canceled.popitem(last=False)
        return known

    def _canceler(
        self, delegate: Delegate, delegation: Delegation, path: bytes, headers: Any
    ) -> Callable[[bytes], Awaitable[None]] | None:
        """How the sidecar cancels ``delegation`` itself when the task it continues is
        canceled (profile §8 propagation, ``Agent.propagate_cancel``): a JSON-RPC
        ``CancelTask`` with the signed ``canceled``, to where the agent sent the task, with
        the headers the agent sent it with."""
        client = self.client
        if client is None:
            return None
        kept = [(k, v) for k, v in headers if k.lower() not in _NOT_REPEATED]

        async def cancel(status: bytes) -> None:
            if not delegation.task_id:
                return
            from handoff_context import status_object

            octets = self._canceled(delegation, status)
            params = {"id": delegation.task_id}
            params["metadata"] = {A2A_EXTENSION_URI: status_object(octets)}
            body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": "CancelTask"}
            body["params"] = params
            url = delegate.origin + path.decode("latin-1")
            answer = await client.post(url, content=compact_json(body), headers=kept)
            answer.raise_for_status()

        return cancel

    # -- answers --------------------------------------------------------------------------

    def _a2a_answer(self, delegate: Delegate, delegation: Delegation, answer: Any) -> bool:
        """Check the statuses an A2A answer carries for ``delegation``; never changes it."""
        if not isinstance(answer, dict):
            return False
        from handoff_context.a2a import check_refusal, check_reply_event

        error = answer.get("error")
        if isinstance(error, dict):
            check_refusal(self.agent, delegation, error_data(error))
            return False
        if not isinstance(answer.get("result"), dict):
            return False
        from a2a.types import a2a_pb2
        from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]

        try:
            event = json_format.ParseDict(
                answer["result"], a2a_pb2.StreamResponse(), ignore_unknown_fields=True
            )
        except (json_format.ParseError, TypeError, ValueError):
            return False
        check_reply_event(self.agent, delegation, event)
        if delegation.task_id:
            _keep(self.tasks, (delegate.netloc, delegation.task_id), delegation)
        return False

    def _mcp_answer(self, request_id: Any, delegation: Delegation, answer: Any) -> bool:
        """Check the status in an MCP tool call's answer (``result._meta``) or the signed
        ``rejected`` in its refusal; never changes it."""
        if not isinstance(answer, dict) or answer.get("id") != request_id:
            return False
        error, result = answer.get("error"), answer.get("result")
        if isinstance(error, dict):
            from handoff_context.a2a import check_refusal

            check_refusal(self.agent, delegation, error_data(error))
        elif isinstance(result, dict):
            meta = result.get("_meta")
            value = meta.get(MCP_META_KEY) if isinstance(meta, dict) else None
            if value is not None:
                self.agent.check_reply(delegation, value)
        return False


def error_data(error: dict[str, Any]) -> Any:
    """A JSON-RPC error's ``data`` as the SDK clients hand it over: the a2a-sdk renders it
    as a list holding a ``google.rpc.ErrorInfo`` whose ``metadata`` is the data (its
    client unwraps it so); the mcp SDK sends the map itself."""
    data = error.get("data")
    if isinstance(data, list):
        for item in data:
            if isinstance(item, dict) and str(item.get("@type", "")).endswith("rpc.ErrorInfo"):
                return item.get("metadata")
        return None
    return data


def _bare(handle: Callable[[Any], bool], answer: Any) -> bool:
    """``handle`` for the HTTP+JSON binding, whose answer is the result (or the error)
    itself rather than a JSON-RPC answer."""
    if not isinstance(answer, dict):
        return False
    if isinstance(answer.get("error"), dict):
        error = dict(answer["error"])
        error["data"] = error.get("details")  # the ErrorInfo list, as JSON-RPC carries it
        return handle({"error": error})
    return handle({"result": answer})


def _untouched(answer: Any) -> bool:
    return False


def _refusal(detail: str) -> Refusal:
    return invalid_params(
        f"delegation refused: {detail}", {"reason": Reason.POLICY.value, "detail": detail}
    )


def _keep(table: OrderedDict[Any, Delegation], key: Any, delegation: Delegation) -> None:
    table[key] = delegation
    table.move_to_end(key)
    while len(table) > _KEEP:
        table.popitem(last=False)
