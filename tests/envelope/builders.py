"""Envelope traffic for the tests, built with the real a2a-sdk types (1.0 protobuf JSON and
the 0.3 compat models), so the shapes are the ones real agents send.

The worked example of the seed: triage hands case C-1001 to billing at epoch 3.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from a2a.compat.v0_3 import types as a2a03
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from tests.conftest import T0

V2 = "application/vnd.acme.handoff.v2+json"
TRIAGE = "https://triage.example/a2a"
BILLING = "https://billing.example/a2a"
REFUNDS = "https://refunds.example/a2a"
CASE = "C-1001"
TRANSCRIPT = b"redacted transcript of the double charge conversation\n"
TRANSCRIPT_SHA = hashlib.sha256(TRANSCRIPT).hexdigest()


def envelope(
    *,
    case_id: str = CASE,
    epoch: int = 3,
    from_agent: str = TRIAGE,
    handoff_id: str | None = None,
    facts: Sequence[dict[str, Any]] | None = None,
    **changes: Any,
) -> dict[str, Any]:
    """A valid v2 envelope; ``changes`` replace or (value None) remove members."""
    body: dict[str, Any] = {
        "version": 2,
        "case_id": case_id,
        "handoff_id": handoff_id or f"{case_id}:{epoch + 1}",
        "from_agent": from_agent,
        "epoch": epoch,
        "goal": "refund the duplicate card payment",
        "done": ["verified the account", "found two identical payments 40 s apart"],
        "remaining": ["refund one payment", "confirm to the customer"],
        "facts": list(
            facts
            if facts is not None
            else [
                {"key": "account_id", "value": "A-77", "source": "auth", "verified": True},
                {
                    "key": "payment_ids",
                    "value": ["P-1", "P-2"],
                    "source": "payments-api",
                    "verified": True,
                },
                {
                    "key": "disputed_amount",
                    "value": "49.90 EUR",
                    "source": "customer",
                    "verified": False,
                },
            ]
        ),
        "open_questions": ["was the second payment captured?"],
        "constraints": {"deadline": "2026-12-03T12:00:00Z", "refund_cap": "100 EUR"},
        "summary": "Customer reports a double charge; both payments found.",
    }
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def signed_url(name: str = "transcript.txt", *, expires: int | None = None) -> str:
    query = "" if expires is None else f"?Expires={expires}&Signature=abc"
    return f"https://store.example/evidence/{name}{query}"


def message_v1(
    env: dict[str, Any] | None = None,
    *,
    message_id: str | None = None,
    context_id: str | None = None,
    media_type: str = V2,
    extra_data: Sequence[tuple[dict[str, Any], str]] = (),
    text: str = "Handoff of case C-1001. Accept or reject.",
    urls: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An A2A 1.0 Message (protobuf JSON, via a2a-sdk's types)."""
    env = envelope() if env is None else env
    parts: list[dict[str, Any]] = [{"text": text}, {"data": env, "mediaType": media_type}]
    parts += [{"data": d, "mediaType": m} for d, m in extra_data]
    for u in urls if urls is not None else [reference()]:
        parts.append(
            {
                "url": u["url"],
                "mediaType": "text/plain",
                "filename": u.get("filename", "transcript.txt"),
                "metadata": u.get("metadata", {}),
            }
        )
    msg = {
        "messageId": message_id or str(env.get("handoff_id")),
        "role": "ROLE_USER",
        "parts": parts,
    }
    if context_id:
        msg["contextId"] = context_id
    return json_format.MessageToDict(json_format.ParseDict(msg, pb.Message()))


def reference(
    *,
    url: str | None = None,
    sha256: str | None = TRANSCRIPT_SHA,
    size: int | None = len(TRANSCRIPT),
) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if sha256 is not None:
        metadata["sha256"] = sha256
    if size is not None:
        metadata["bytes"] = size
    return {"url": url or signed_url(expires=T0 + 86400), "metadata": metadata}


def send_v1(message: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC SendMessage request, its params checked by the SDK's protobuf type."""
    params = json_format.MessageToDict(
        json_format.ParseDict({"message": message}, pb.SendMessageRequest())
    )
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}


def message_v03(
    env: dict[str, Any] | None = None,
    *,
    message_id: str | None = None,
    context_id: str | None = None,
    urls: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An A2A 0.3 Message (the SDK's 0.3 compat models)."""
    env = envelope() if env is None else env
    parts: list[Any] = [
        a2a03.TextPart(text="Handoff of case. Accept or reject."),
        a2a03.DataPart(data=env, metadata={"mediaType": V2}),
    ]
    for u in urls if urls is not None else [reference()]:
        file = a2a03.FileWithUri(uri=u["url"], mime_type="text/plain", name="transcript.txt")
        parts.append(a2a03.FilePart(file=file, metadata=u.get("metadata") or None))
    msg = a2a03.Message(
        message_id=message_id or str(env.get("handoff_id")),
        role=a2a03.Role.user,
        parts=[a2a03.Part(root=p) for p in parts],
        context_id=context_id,
    )
    return msg.model_dump(mode="json", by_alias=True, exclude_none=True)


def send_v03(message: dict[str, Any]) -> dict[str, Any]:
    request = a2a03.SendMessageRequest.model_validate(
        {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    )
    return request.model_dump(mode="json", by_alias=True, exclude_none=True)


def answer(
    accepted: bool,
    *,
    epoch: int | None = 4,
    handoff_id: str | None = f"{CASE}:4",
    reason: str | None = None,
    case_id: str = CASE,
) -> dict[str, Any]:
    data: dict[str, Any] = {"accepted": accepted, "case_id": case_id}
    if epoch is not None:
        data["epoch"] = epoch
    if handoff_id is not None:
        data["handoff_id"] = handoff_id
    if reason is not None:
        data["reason"] = reason
    return data


def task_v1(
    data: dict[str, Any],
    *,
    state: str = "TASK_STATE_COMPLETED",
    task_id: str = "task-9",
    context_id: str = "billing-ctx",
) -> dict[str, Any]:
    """An A2A 1.0 Task with the answer as an artifact (protobuf JSON)."""
    task = {
        "id": task_id,
        "contextId": context_id,
        "status": {"state": state},
        "artifacts": [{"artifactId": "handoff-answer", "parts": [{"data": data}]}],
    }
    return json_format.MessageToDict(json_format.ParseDict(task, pb.Task()))


def task_v03(
    data: dict[str, Any], *, state: str = "completed", task_id: str = "task-9"
) -> dict[str, Any]:
    task = a2a03.Task(
        id=task_id,
        context_id="billing-ctx",
        status=a2a03.TaskStatus(state=a2a03.TaskState(state)),
        artifacts=[
            a2a03.Artifact(
                artifact_id="handoff-answer", parts=[a2a03.Part(root=a2a03.DataPart(data=data))]
            )
        ],
    )
    return task.model_dump(mode="json", by_alias=True, exclude_none=True)


def response(result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "result": result}


def event(
    agent: str,
    action: str,
    at: int,
    *,
    epoch: int | None = None,
    outcome: str | None = None,
    case_id: str = CASE,
    detail: str | None = None,
) -> dict[str, Any]:
    return {
        "case_event": {
            "case_id": case_id,
            "agent": agent,
            "action": action,
            "epoch": epoch,
            "at": at,
            "outcome": outcome,
            "detail": detail,
        }
    }


def record(payload: Any, at: int, by: str | None = None) -> dict[str, Any]:
    """A capture record (profile §10)."""
    rec: dict[str, Any] = {"received_at": at, "payload": payload}
    if by is not None:
        rec["received_by"] = by
    return rec


def jsonl(records: Sequence[Any]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def worked_example(*, rejected: bool = False, version: str = "1.0") -> list[dict[str, Any]]:
    """The seed's worked example as captured: triage sends the handoff at epoch 3 (billing
    receives it), billing accepts to epoch 4 (triage receives the completed task), triage
    marks the case handed off, and an hour later triage's retry job writes at epoch 3 and
    the case system refuses it. ``rejected``: billing rejects instead, and triage keeps
    acting as the owner."""
    send = send_v1(message_v1()) if version == "1.0" else send_v03(message_v03())
    task = task_v1 if version == "1.0" else task_v03
    records = [
        event(TRIAGE, "write", T0, epoch=3, outcome="applied", detail="handoff intent"),
        record(send, T0 + 10, BILLING),
    ]
    if rejected:
        reason = "payment id P-2 not found in billing"
        state = "TASK_STATE_REJECTED" if version == "1.0" else "rejected"
        records += [
            record(
                response(task(answer(False, epoch=None, reason=reason), state=state)),
                T0 + 20,
                TRIAGE,
            ),
            event(TRIAGE, "write", T0 + 60, epoch=3, outcome="applied", detail="corrected P-2"),
        ]
    else:
        records += [
            record(response(task(answer(True))), T0 + 20, TRIAGE),
            event(TRIAGE, "handed-off", T0 + 30, epoch=3),
            event(
                TRIAGE, "write", T0 + 3630, epoch=3, outcome="rejected", detail="retry: add note"
            ),
        ]
    return records
