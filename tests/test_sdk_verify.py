"""Toolkit-made handoffs inside messages built by the real a2a-sdk and mcp packages, judged
by `handoff-trace verify` end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from a2a.compat.v0_3 import conversions
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format
from handoff_context import (
    Signer,
    handoff_object,
    make_chain,
    make_offer,
    make_status,
    status_object,
    trust_document,
)
from handoff_context.carry import A2A_EXTENSION_URI, MCP_META_KEY
from mcp import types as mcp_types

from app.cli import main

T0 = 1_793_000_000
PLANNER, CODER, TESTER = (f"spiffe://example.org/agent/{a}" for a in ("planner", "coder", "tester"))


def a2a_send(obj: dict[str, Any], *, context: str) -> dict[str, Any]:
    message = pb.Message(
        message_id="m-1",
        context_id=context,
        role=pb.Role.ROLE_USER,
        parts=[pb.Part(text="please do the work")],
    )
    message.extensions.append(A2A_EXTENSION_URI)
    message.metadata.update({A2A_EXTENSION_URI: obj})
    request = pb.SendMessageRequest(message=message)
    return {
        "jsonrpc": "2.0",
        "id": "1",
        "method": "SendMessage",
        "params": json_format.MessageToDict(request),
    }


def a2a_task_result(obj: dict[str, Any], *, context: str) -> dict[str, Any]:
    task = pb.Task(id="task-42", context_id=context)
    task.status.state = pb.TaskState.TASK_STATE_WORKING
    reply = pb.Message(
        message_id="m-2", context_id=context, role=pb.Role.ROLE_AGENT, parts=[pb.Part(text="on it")]
    )
    reply.metadata.update({A2A_EXTENSION_URI: obj})
    task.status.message.CopyFrom(reply)
    result = pb.SendMessageResponse(task=task)
    return {"jsonrpc": "2.0", "id": "1", "result": json_format.MessageToDict(result)}


def a2a_03_send(obj: dict[str, Any], *, context: str) -> dict[str, Any]:
    message = pb.Message(
        message_id="m-3",
        context_id=context,
        role=pb.Role.ROLE_USER,
        parts=[pb.Part(text="legacy peer")],
    )
    message.extensions.append(A2A_EXTENSION_URI)
    message.metadata.update({A2A_EXTENSION_URI: obj})
    request = pb.SendMessageRequest(message=message)
    params = conversions.to_compat_send_message_request(request, request_id=0).params
    return {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "message/send",
        "params": params.model_dump(by_alias=True, exclude_none=True, mode="json"),
    }


def mcp_call(obj: dict[str, Any]) -> dict[str, Any]:
    params = mcp_types.CallToolRequestParams(
        name="run_tests",
        arguments={},
        _meta={
            mcp_types.CLIENT_INFO_META_KEY: {"name": "planner", "version": "1"},
            MCP_META_KEY: obj,
        },
    )
    request = mcp_types.CallToolRequest(params=params)
    return {
        "jsonrpc": "2.0",
        "id": 4,
        **request.model_dump(by_alias=True, mode="json", exclude_none=True),
    }


def mcp_result(obj: dict[str, Any]) -> dict[str, Any]:
    result = mcp_types.CallToolResult(content=[], _meta={MCP_META_KEY: obj})
    return {
        "jsonrpc": "2.0",
        "id": 4,
        "result": result.model_dump(by_alias=True, mode="json", exclude_none=True),
    }


def mcp_cancelled(obj: dict[str, Any]) -> dict[str, Any]:
    params = mcp_types.CancelledNotificationParams(request_id=4, _meta={MCP_META_KEY: obj})
    note = mcp_types.CancelledNotification(params=params)
    return {"jsonrpc": "2.0", **note.model_dump(by_alias=True, mode="json", exclude_none=True)}


def record(payload: dict[str, Any], *, at: int, by: str) -> dict[str, Any]:
    return {"received_at": at, "received_by": by, "payload": payload}


@pytest.fixture
def capture(tmp_path: Path) -> Path:
    planner = Signer.generate(PLANNER)
    coder = Signer.generate(CODER, "Ed25519")
    tester = Signer.generate(TESTER)
    (tmp_path / "trust.json").write_text(json.dumps(trust_document([planner, coder, tester])))
    # planner -> coder -> tester, one dialog; the coder's hand-off carries the chain.
    first, second = make_chain([planner, coder], dialog="ctx-7c1e", iat=T0, final_aud=TESTER)
    accepted = make_status(coder, offer_octets=first, state="accepted", iat=T0 + 2)
    tests = make_offer(planner, aud=TESTER, dialog="ctx-7c1e", iat=T0 + 3)
    completed = make_status(tester, offer_octets=tests, state="completed", iat=T0 + 9)
    canceled = make_status(planner, offer_octets=tests, state="canceled", iat=T0 + 10)
    elsewhere = make_offer(planner, aud=CODER, dialog="ctx-7c1e", iat=T0 + 4)
    lines = [
        record(a2a_send(handoff_object(first), context="ctx-7c1e"), at=T0 + 1, by=CODER),
        record(a2a_task_result(status_object(accepted), context="ctx-7c1e"), at=T0 + 2, by=PLANNER),
        record(
            a2a_03_send(handoff_object(second, [first]), context="ctx-7c1e"), at=T0 + 6, by=TESTER
        ),
        record(mcp_call(handoff_object(tests)), at=T0 + 4, by=TESTER),
        record(mcp_result(status_object(completed)), at=T0 + 9, by=PLANNER),
        record(mcp_cancelled(status_object(canceled)), at=T0 + 10, by=TESTER),
        # Carried in another dialog than the one it was signed for (profile §6.5).
        record(a2a_send(handoff_object(elsewhere), context="ctx-other"), at=T0 + 5, by=CODER),
    ]
    path = tmp_path / "capture.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_verify_finds_and_judges_sdk_carried_handoffs(
    capture: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["verify", "--trust", str(capture.parent / "trust.json"), "--json", str(capture)])
    verdicts = json.loads(capsys.readouterr().out)
    assert code == 1  # the last offer is rejected
    judged = [(v["element"], v["outcome"], v["reason"]) for v in verdicts]
    assert judged == [
        ("offer", "accept", None),
        ("status", "accept", None),
        ("offer", "accept", None),
        ("offer", "accept", None),
        ("status", "accept", None),
        ("status", "accept", None),
        ("offer", "reject", "policy"),
    ]
    # The A2A contextId was the dialog; the capture record's receiver was the audience.
    for v in (verdicts[0], verdicts[2]):
        checks = {c["check"]: c["result"] for c in v["checks"]}
        assert checks["dialog"] == "pass" and checks["audience"] == "pass"
    # MCP has no dialog of its own: the dialog check could not run.
    mcp_checks = {c["check"]: c["result"] for c in verdicts[3]["checks"]}
    assert mcp_checks["dialog"] == "not-checked"
    assert verdicts[2]["chain"]["length"] == 2 and verdicts[2]["form"] == "jws"
    assert [c["check"] for c in verdicts[5]["checks"]] == ["signature", "offer", "parties"]
    assert verdicts[6]["detail"] == "dialog 'ctx-7c1e' is not the carrier's 'ctx-other'"
    assert [v["source"] for v in verdicts] == [f"{capture}:{i}" for i in range(1, 8)]
