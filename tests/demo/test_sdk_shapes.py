"""The host messages the simulator writes by hand are what the real SDKs accept.

Every A2A 1.0 payload is parsed strictly (unknown fields refused) into a2a-sdk's protobuf
types, every A2A 0.3 payload into its 0.3 compat models, every MCP payload into the mcp
package's models; and the shapes seen cover every way the simulator carries an element.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from a2a.compat.v0_3 import types as a2a03
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format
from mcp import types as mcp_types

from app.demo import DemoConfig, generate
from app.demo.agents import make_cast

from .helpers import make_run

_A2A10_REQUESTS = {
    "SendMessage": pb.SendMessageRequest,
    "SendStreamingMessage": pb.SendMessageRequest,
    "CancelTask": pb.CancelTaskRequest,
}
_A2A03_REQUESTS = {
    "message/send": a2a03.SendMessageRequest,
    "message/stream": a2a03.SendStreamingMessageRequest,
    "tasks/cancel": a2a03.CancelTaskRequest,
}


def _strict(params: dict[str, Any], message: Any) -> None:
    json_format.ParseDict(params, message, ignore_unknown_fields=False)


def _check_mcp(payload: dict[str, Any]) -> str:
    if payload.get("method") == "tools/call":
        mcp_types.CallToolRequest.model_validate({k: payload[k] for k in ("method", "params")})
        return "mcp tools/call"
    if payload.get("method") == "notifications/cancelled":
        note = {k: payload[k] for k in ("method", "params")}
        mcp_types.CancelledNotification.model_validate(note)
        return "mcp notifications/cancelled"
    mcp_types.CallToolResult.model_validate(payload["result"])
    return "mcp CallToolResult"


def _check_a2a_result(result: dict[str, Any]) -> str:
    if "kind" in result:  # A2A 0.3: every object names its kind
        envelope = {"jsonrpc": "2.0", "id": 1, "result": result}
        if result["kind"] == "status-update":
            a2a03.SendStreamingMessageSuccessResponse.model_validate(envelope)
        else:
            a2a03.SendMessageSuccessResponse.model_validate(envelope)
        return f"a2a-0.3 {result['kind']}"
    if "statusUpdate" in result:
        _strict(result, pb.StreamResponse())
        return "a2a-1.0 statusUpdate"
    if "task" in result or "message" in result:
        _strict(result, pb.SendMessageResponse())
        return f"a2a-1.0 {next(iter(result))}"
    _strict(result, pb.Task())  # a GetTask answer is the Task itself
    return "a2a-1.0 Task"


def check(payload: dict[str, Any]) -> str:
    """Parse ``payload`` with the SDK that owns its shape; returns the shape's name."""
    if "offer" in payload or "status" in payload:
        return "raw"
    if "case_event" in payload:  # not A2A: what a case system logged (docs/envelopes.md)
        assert set(payload["case_event"]) == {
            "case_id",
            "agent",
            "action",
            "epoch",
            "at",
            "outcome",
            "detail",
        }
        return "case_event"
    method = payload.get("method")
    if method in _A2A10_REQUESTS:
        _strict(payload["params"], _A2A10_REQUESTS[method]())
        return f"a2a-1.0 {method}"
    if method in _A2A03_REQUESTS:
        _A2A03_REQUESTS[method].model_validate(payload)
        return f"a2a-0.3 {method}"
    result = payload.get("result", {})
    if method is not None or "_meta" in result:
        return _check_mcp(payload)
    return _check_a2a_result(result)


def test_every_emitted_host_message_parses_with_the_real_sdk(tmp_path: Path) -> None:
    run = make_run(tmp_path, seed=9, dialogs=60, fault_rate=0.3)
    shapes: dict[str, int] = {}
    for line in run.paths.out.read_text().splitlines():
        shape = check(json.loads(line)["payload"])
        shapes[shape] = shapes.get(shape, 0) + 1
    assert set(shapes) == {
        "raw",
        "a2a-1.0 SendMessage",
        "a2a-1.0 SendStreamingMessage",
        "a2a-1.0 CancelTask",
        "a2a-1.0 task",
        "a2a-1.0 message",
        "a2a-1.0 statusUpdate",
        "a2a-1.0 Task",
        "a2a-0.3 message/send",
        "a2a-0.3 message/stream",
        "a2a-0.3 tasks/cancel",
        "a2a-0.3 task",
        "a2a-0.3 message",
        "a2a-0.3 status-update",
        "mcp tools/call",
        "mcp CallToolResult",
        "mcp notifications/cancelled",
        "case_event",
    }


def test_every_envelope_case_message_parses_with_the_real_sdk() -> None:
    """The cases' traffic: handoff messages with envelope data parts and url parts, and
    the acceptance and rejection Tasks, in both A2A versions."""
    cast = make_cast(9, 10)
    config = DemoConfig(seed=9, dialogs=4, cases=25, fault_rate=0.3)
    shapes: dict[str, int] = {}
    for output in generate(config, cast):
        for record in output.records if output.case else ():
            shape = check(record.value["payload"])
            shapes[shape] = shapes.get(shape, 0) + 1
    assert set(shapes) == {
        "a2a-1.0 SendMessage",
        "a2a-1.0 task",
        "a2a-0.3 message/send",
        "a2a-0.3 task",
        "case_event",
    }


def test_the_strict_parse_would_notice_a_wrong_shape() -> None:
    # The check above is only worth something if a hand-made mistake fails it.
    bad = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"mesage": {}}}
    with pytest.raises(json_format.ParseError):
        check(bad)
