"""Host messages for the demo: A2A 1.0, A2A 0.3 and MCP JSON-RPC, built by hand.

The shapes are those the real SDKs put on the wire (a2a-sdk's protobuf-JSON for 1.0 and
its 0.3 compat models, the mcp package's pydantic models); ``tests/demo`` parses what this
module emits with both SDKs, which stay development-only dependencies. Where the handoff or
status object goes inside each message is the library's (``handoff_context.carry``).

One ``Channel`` is one delegation link: every message of a hop (offer, retransmissions,
statuses, cancel) travels in the same host protocol, as between two real agents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from handoff_context.carry import put_a2a, put_mcp

A2A_1_0, A2A_0_3, MCP, RAW = "a2a-1.0", "a2a-0.3", "mcp", "raw"
KINDS = (A2A_1_0, A2A_0_3, MCP, RAW)
KIND_WEIGHTS = (35, 20, 25, 20)

# Status state -> host task state (profile §8 table). Only hops whose host task state agrees
# with the final hop state carry statuses in Task results (see ``Channel.task_states``).
_TASK_STATE_1_0 = {
    "accepted": "TASK_STATE_WORKING",
    "completed": "TASK_STATE_COMPLETED",
    "failed": "TASK_STATE_FAILED",
    "rejected": "TASK_STATE_REJECTED",
}
_TASK_STATE_0_3 = {
    "accepted": "working",
    "completed": "completed",
    "failed": "failed",
    "rejected": "rejected",
}
_FINAL = frozenset({"completed", "failed", "rejected"})


def _text(text: str, *, kind: bool) -> dict[str, Any]:
    return {"kind": "text", "text": text} if kind else {"text": text}


@dataclass
class Channel:
    """How one hop's messages travel.

    ``task_states``: A2A statuses ride in Task results (with the host task state) rather
    than in reply Messages; ``streaming``: the A2A send was a streaming one, so later
    statuses come as status-update events under the same request id.
    """

    kind: str
    dialog: str
    task_id: str
    request_id: int
    next_id: Callable[[], int]
    text: str
    tool: str
    task_states: bool = False
    streaming: bool = False
    _messages: int = 0
    _answered: bool = field(default=False, repr=False)

    def _message_id(self) -> str:
        self._messages += 1
        return f"msg-{self.task_id}-{self._messages}"

    # -- the delegator's send ------------------------------------------------------------

    def offer(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The request that carries a handoff object (its retransmission is the same)."""
        if self.kind == RAW:
            return obj
        if self.kind == MCP:
            meta = {"progressToken": self.request_id}
            params = {"name": self.tool, "arguments": {"request": self.text}, "_meta": meta}
            return {
                "jsonrpc": "2.0",
                "id": self.request_id,
                "method": "tools/call",
                "params": put_mcp(params, obj),
            }
        v03 = self.kind == A2A_0_3
        message = put_a2a(
            {
                "messageId": f"msg-{self.task_id}-0",
                "contextId": self.dialog,
                "role": "user" if v03 else "ROLE_USER",
                "parts": [_text(self.text, kind=v03)],
            },
            obj,
        )
        if v03:
            message["kind"] = "message"
            method = "message/stream" if self.streaming else "message/send"
        else:
            method = "SendStreamingMessage" if self.streaming else "SendMessage"
        return {
            "jsonrpc": "2.0",
            "id": self.request_id,
            "method": method,
            "params": {"message": message},
        }

    def cancel(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The delegator's cancel request carrying a ``canceled`` status (profile §9)."""
        if self.kind == RAW:
            return obj
        if self.kind == MCP:
            params = put_mcp(
                {"requestId": self.request_id, "reason": "canceled by the delegator"}, obj
            )
            return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        method = "tasks/cancel" if self.kind == A2A_0_3 else "CancelTask"
        params = put_a2a({"id": self.task_id}, obj)
        return {"jsonrpc": "2.0", "id": self.next_id(), "method": method, "params": params}

    # -- the delegate's answers ----------------------------------------------------------

    def status(self, obj: dict[str, Any], state: str, *, text: str) -> dict[str, Any]:
        """The response that carries a status object: the first answers the send request,
        later ones come as stream events (streaming) or as answers to later polls."""
        if self.kind == RAW:
            return obj
        first = not self._answered
        self._answered = True
        request_id = self.request_id if first or self.streaming else self.next_id()
        if self.kind == MCP:
            result = put_mcp(
                {"content": [{"type": "text", "text": text}], "isError": state == "failed"}, obj
            )
            return {"jsonrpc": "2.0", "id": request_id, "result": result}
        if self.kind == A2A_0_3:
            result = self._result_0_3(obj, state, text=text, first=first)
        else:
            result = self._result_1_0(obj, state, text=text, first=first)
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _reply(self, obj: dict[str, Any], text: str, *, v03: bool) -> dict[str, Any]:
        reply = put_a2a(
            {
                "messageId": self._message_id(),
                "contextId": self.dialog,
                "taskId": self.task_id,
                "role": "agent" if v03 else "ROLE_AGENT",
                "parts": [_text(text, kind=v03)],
            },
            obj,
        )
        if v03:
            reply["kind"] = "message"
        return reply

    def _result_1_0(
        self, obj: dict[str, Any], state: str, *, text: str, first: bool
    ) -> dict[str, Any]:
        reply = self._reply(obj, text, v03=False)
        if not self.task_states:
            return {"message": reply}
        status = {"state": _TASK_STATE_1_0[state], "message": reply}
        if self.streaming and not first:
            return {
                "statusUpdate": {"taskId": self.task_id, "contextId": self.dialog, "status": status}
            }
        task = {"id": self.task_id, "contextId": self.dialog, "status": status}
        # The send's answer wraps the Task; a later GetTask answers with the Task itself.
        return {"task": task} if first or self.streaming else task

    def _result_0_3(
        self, obj: dict[str, Any], state: str, *, text: str, first: bool
    ) -> dict[str, Any]:
        reply = self._reply(obj, text, v03=True)
        if not self.task_states:
            return reply
        status = {"state": _TASK_STATE_0_3[state], "message": reply}
        if self.streaming and not first:
            return {
                "kind": "status-update",
                "taskId": self.task_id,
                "contextId": self.dialog,
                "status": status,
                "final": state in _FINAL,
            }
        return {"kind": "task", "id": self.task_id, "contextId": self.dialog, "status": status}
