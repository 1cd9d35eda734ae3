"""The mcp integration (``pip install 'handoff-context[mcp]'``): tools that check the offer
before they run and answer with signed statuses, and clients that sign and check.

```python
agent = Agent(Signer.load("keys/tool.jwk"), TrustStore.load("trust.json"), reporter=reporter)
server = MCPServer("builder", middleware=[HandoffMiddleware(agent)])          # server
tool = HandoffMcpClient(agent, McpClient(transport), to=TOOL_ID)              # client
```

**Server side.** ``HandoffMiddleware`` is an mcp ``ServerMiddleware``. On ``tools/call``
the offer in ``params._meta`` (profile §9) is checked with this agent as the receiver
before the tool runs. A failing offer is refused with an ``MCPError`` (-32602, invalid
params) whose ``data`` holds the profile ``reason``, the ``detail`` and, where the profile
allows one, the signed ``rejected`` (``status``); the tool never runs. A retransmission of
the same offer octets is answered with a ``CallToolResult`` whose ``_meta`` carries the last
status, octet for octet, without running the tool again. A tool that ran gets its signed
``completed`` (or ``failed`` for an ``is_error`` result or a raised error) in the result's
``_meta``; a tool call answers at once, so ``completed`` implies ``accepted`` (profile §8).
``notifications/cancelled`` with the delegator's signed ``canceled`` in ``params._meta`` is
checked and the tool's own delegations are canceled in turn; the SDK cancels the request
itself before the middleware sees the notification, so an unsigned or invalid cancel can
only be reported (logged, ``on_verdict``), not undone.

**Client side.** ``HandoffMcpClient`` wraps an mcp ``Client`` (either protocol revision:
2025-11-25 with ``mode="legacy"``, 2026-07-28 by default) for the server ``to``;
``call_tool`` signs an offer (continuing the current task's handoff), puts it in
``params._meta`` beside whatever else is there and checks the status in the result's
``_meta``; ``last`` is the ``Delegation``. An ``MCPError`` refusal is recorded on
``last.refusal`` and raised. A lost reply ends the mcp client's session; a new session asks
again with ``call_tool(..., again=delegation)``, the identical offer octets.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent
from mcp_types.jsonrpc import INVALID_PARAMS

from handoff_context._model import StatusState
from handoff_context._sign import status_object
from handoff_context._verdict import Outcome
from handoff_context.agent import Agent, Decision, Delegation, Received, enter, leave
from handoff_context.carry import MCP_META_KEY
from handoff_context.errors import Reason

__all__ = [
    "HandoffMcpClient",
    "HandoffMiddleware",
    "answered_result",
    "refused",
    "retransmission_result",
]

log = logging.getLogger("handoff_context.mcp")
_KEEP_RESULTS = 1024  # recent tool results kept for retransmissions, per process


def _carried(params: object) -> Any:
    if not isinstance(params, Mapping):
        return None
    meta = params.get("_meta")
    return meta.get(MCP_META_KEY) if isinstance(meta, Mapping) else None


def refused(decision: Decision) -> MCPError:
    data = {"reason": decision.reason or Reason.POLICY.value, "detail": decision.detail or ""}
    if decision.status is not None:
        data["status"] = decision.status.decode("ascii")
    return MCPError(INVALID_PARAMS, f"handoff refused ({data['reason']}): {data['detail']}", data)


def _with_status(result: Any, status: bytes | None) -> Any:
    """``result`` (a CallToolResult or its dict) with the status in its ``_meta``."""
    if status is None:
        return result
    if isinstance(result, CallToolResult):
        meta = dict(result.meta or {})
        meta[MCP_META_KEY] = status_object(status)
        return result.model_copy(update={"meta": meta})
    if isinstance(result, dict):
        out = dict(result)
        out["_meta"] = {**dict(out.get("_meta") or {}), MCP_META_KEY: status_object(status)}
        return out
    return result


def _is_error(result: Any) -> bool:
    if isinstance(result, CallToolResult):
        return bool(result.is_error)
    if isinstance(result, Mapping):
        return bool(result.get("isError") or result.get("is_error"))
    return False


def answered_result(agent: Agent, received: Received, result: Any) -> Any:
    """A tool call's ``result`` (a CallToolResult or its dict) with the signed status it
    calls for in its ``_meta``: ``failed`` for an ``is_error`` result, else ``completed``
    (profile §8). Shared by ``HandoffMiddleware`` and ``handoff-trace tap --enforce``."""
    state = StatusState.FAILED if _is_error(result) else StatusState.COMPLETED
    return _with_status(result, agent.answer(received, state))


def retransmission_result(decision: Decision) -> CallToolResult:
    """The answer to a retransmission whose result is no longer held: an ``is_error``
    result whose ``_meta`` carries the last status, octet for octet (a tool's output
    schema cannot be met without running it)."""
    text = "retransmission: this offer was answered before; the status is in _meta"
    result = CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
    out: CallToolResult = _with_status(result, decision.answer)
    return out


class HandoffMiddleware:
    """mcp ``ServerMiddleware`` guarding a server's tools (see the module docstring)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        # Calls by (MCP session id, request id), kept a while after they end: the SDK cancels
        # a call before the middleware sees the notifications/cancelled that names it.
        self._calls: OrderedDict[tuple[str | None, object], Received] = OrderedDict()
        self._results: OrderedDict[bytes, Any] = OrderedDict()

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call" and ctx.request_id is not None:
            return await self._tool_call(ctx, call_next)
        if ctx.method == "notifications/cancelled":
            await self._cancelled(ctx)
        return await call_next(ctx)

    async def _tool_call(self, ctx: Any, call_next: Any) -> Any:
        value = _carried(ctx.params)
        if value is None:
            decision = self.agent.refuse_missing(dialog=None)
        else:
            # MCP names no dialog of its own: the carrier dialog is unknown (profile §6.5).
            decision = self.agent.check_offer(value, dialog=None, carrier="mcp")
        if not decision.run:
            if decision.retransmission:
                return self._again(decision)
            raise refused(decision)
        received = decision.received
        if received is None:
            return await call_next(ctx)
        key = (_session_id(ctx), ctx.request_id)
        self._calls[key] = received
        while len(self._calls) > _KEEP_RESULTS:
            self._calls.popitem(last=False)
        token = enter(received)
        try:
            result = await call_next(ctx)
        except MCPError:
            self.agent.answer(received, StatusState.FAILED)
            raise
        finally:
            leave(token)
        answered = answered_result(self.agent, received, result)
        self._results[received.offer.digest] = answered
        while len(self._results) > _KEEP_RESULTS:
            self._results.popitem(last=False)
        return answered

    def _again(self, decision: Decision) -> Any:
        """The answer to a retransmission: the tool's own result with its status when this
        process still holds it; otherwise (after a restart) an ``is_error`` result whose
        ``_meta`` carries the last status, octet for octet (a tool's output schema cannot
        be met without running it). Never a second run."""
        digest = decision.verdict.digest
        if digest is not None and digest in self._results:
            kept = self._results[digest]
            return _with_status(kept, decision.answer)
        return retransmission_result(decision)

    async def _cancelled(self, ctx: Any) -> None:
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        received = self._calls.get((_session_id(ctx), params.get("requestId")))
        value = _carried(params)
        if received is None:
            return
        if value is None:
            log.warning("handoff: a tool call was cancelled without a signed canceled")
            return
        verdict = self.agent.check_cancel(received, value)
        if verdict.outcome in (Outcome.ACCEPT, Outcome.DUPLICATE):
            await self.agent.propagate_cancel(received)
        else:
            log.warning("handoff: a cancel was refused: %s: %s", verdict.reason, verdict.detail)


def _session_id(ctx: Any) -> str | None:
    """The MCP session a message belongs to (Streamable HTTP's ``Mcp-Session-Id``; None on
    a transport with one session, such as stdio)."""
    headers = getattr(ctx, "headers", None)
    if headers is None:
        return None
    value = headers.get("mcp-session-id")
    return value if isinstance(value, str) else None


class HandoffMcpClient:
    """An mcp ``Client`` for the server ``to`` whose ``call_tool`` signs and checks (see
    the module docstring). Every other attribute is the wrapped client's."""

    def __init__(self, agent: Agent, client: Any, *, to: str) -> None:
        self.agent = agent
        self.client = client
        self.to = to
        self.last: Delegation | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def __aenter__(self) -> HandoffMcpClient:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.__aexit__(*exc)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *args: Any,
        dialog: str | None = None,
        meta: Mapping[str, Any] | None = None,
        again: Delegation | None = None,
        **kwargs: Any,
    ) -> CallToolResult:
        """``call_tool`` with a signed offer. ``dialog`` names the dialog of a delegation
        made outside a task (inside one, the task's dialog is used). ``again``: a delegation
        whose reply was lost, asked again with its identical offer octets (profile §6.4; a
        re-signed offer would be equivocation): the mcp client's session ends with a lost
        reply, so this is how a new session retransmits. Raises MCPError as the wrapped
        client does (a refusal included), ChainWindowError before sending when the task's
        offer is no longer live."""
        if again is None:
            delegation = self.agent.delegate(self.to, dialog=dialog, carrier="mcp")
        else:
            delegation = again
        self.last = delegation
        delegation.cancel = None  # MCP cancels by request id, which the SDK owns
        full = {**dict(meta or {}), MCP_META_KEY: delegation.handoff}
        try:
            result: CallToolResult = await self.client.call_tool(
                name, arguments, *args, meta=full, **kwargs
            )
        except MCPError as exc:
            data = exc.data if isinstance(exc.data, Mapping) else {}
            delegation.refusal = str(data.get("reason") or "refused")
            status = data.get("status")
            if isinstance(status, str):
                self.agent.check_reply(delegation, {"status": status})
            raise
        value = (result.meta or {}).get(MCP_META_KEY)
        if value is not None:
            self.agent.check_reply(delegation, value)
        return result
