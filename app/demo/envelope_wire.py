"""Envelope handoff traffic on the wire (docs/envelopes.md): A2A 1.0 and 0.3 messages with
an envelope data part and url reference parts, the receiver's acceptance or rejection Task,
``case_event`` payloads, and signed URLs in the three expiry styles the service reads.

Built by hand in the shapes the real SDKs accept (``tests/demo/test_sdk_shapes.py`` parses
them with a2a-sdk's 1.0 protobuf types and its 0.3 models).
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

from app.demo.carry import A2A_0_3

ENVELOPE_TYPE = "application/vnd.acme.handoff.v2+json"
DRIFT_TYPE = "application/vnd.acme.handoff.v3+json"  # a version the service does not accept
FILES = "https://files.acme.example/cases"


def data_part(data: dict[str, Any], media_type: str | None, *, kind: str) -> dict[str, Any]:
    if kind == A2A_0_3:
        part: dict[str, Any] = {"kind": "data", "data": data}
        if media_type:
            part["metadata"] = {"mediaType": media_type}
        return part
    return {"data": data, "mediaType": media_type} if media_type else {"data": data}


def url_part(
    url: str, media_type: str, name: str, metadata: dict[str, Any], *, kind: str
) -> dict[str, Any]:
    if kind == A2A_0_3:
        file = {"uri": url, "mimeType": media_type, "name": name}
        return {"kind": "file", "file": file, "metadata": metadata}
    return {"url": url, "mediaType": media_type, "filename": name, "metadata": metadata}


def text_part(text: str, *, kind: str) -> dict[str, Any]:
    return {"kind": "text", "text": text} if kind == A2A_0_3 else {"text": text}


def send(
    kind: str,
    *,
    request_id: int,
    message_id: str,
    context_id: str,
    parts: list[dict[str, Any]],
    related: list[str],
) -> dict[str, Any]:
    """The sender's JSON-RPC request carrying the handoff message."""
    v03 = kind == A2A_0_3
    message: dict[str, Any] = {
        "messageId": message_id,
        "contextId": context_id,
        "role": "user" if v03 else "ROLE_USER",
        "parts": parts,
    }
    if related:
        message["referenceTaskIds"] = related
    if v03:
        message["kind"] = "message"
    method = "message/send" if v03 else "SendMessage"
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"message": message}}


def answer(
    kind: str, *, request_id: int, task_id: str, context_id: str, data: dict[str, Any]
) -> dict[str, Any]:
    """The receiver's JSON-RPC answer: a completed Task whose artifact holds ``data`` (an
    acceptance), or a rejected Task whose status message holds it (a rejection)."""
    v03 = kind == A2A_0_3
    accepted = bool(data.get("accepted"))
    parts = [data_part(data, None, kind=kind)]
    if v03:
        task: dict[str, Any] = {"kind": "task", "id": task_id, "contextId": context_id}
        state = "completed" if accepted else "rejected"
    else:
        task = {"id": task_id, "contextId": context_id}
        state = "TASK_STATE_COMPLETED" if accepted else "TASK_STATE_REJECTED"
    if accepted:
        task["status"] = {"state": state}
        task["artifacts"] = [{"artifactId": f"{task_id}-acceptance", "parts": parts}]
    else:
        reply: dict[str, Any] = {
            "messageId": f"{task_id}-rejection",
            "role": "agent" if v03 else "ROLE_AGENT",
            "parts": parts,
        }
        if v03:
            reply["kind"] = "message"
        task["status"] = {"state": state, "message": reply}
    return {"jsonrpc": "2.0", "id": request_id, "result": task if v03 else {"task": task}}


def case_event(
    case_id: str,
    agent: str,
    action: str,
    *,
    epoch: int | None,
    at: int,
    outcome: str | None = None,
    detail: str | None = None,
) -> dict[str, Any]:
    """What a system of record (or the agent's own store) logged about the case."""
    event = {
        "case_id": case_id,
        "agent": agent,
        "action": action,
        "epoch": epoch,
        "at": at,
        "outcome": outcome,
        "detail": detail,
    }
    return {"case_event": event}


def _amz_date(seconds: int) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))


def signed_url(name: str, *, style: str, signed_at: int, lifetime: int, token: str) -> str:
    """A pre-signed URL valid from ``signed_at`` for ``lifetime`` seconds, in the style of
    S3 (``X-Amz-Date`` + ``X-Amz-Expires``), CloudFront (``Expires``) or Azure SAS (``se``)."""
    if style == "amz":
        query = {
            "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
            "X-Amz-Date": _amz_date(signed_at),
            "X-Amz-Expires": str(lifetime),
            "X-Amz-SignedHeaders": "host",
            "X-Amz-Signature": token,
        }
    elif style == "expires":
        query = {"Expires": str(signed_at + lifetime), "Signature": token, "Key-Pair-Id": "K2DEMO"}
    else:
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(signed_at + lifetime))
        query = {"sv": "2022-11-02", "sr": "b", "sp": "r", "se": until, "sig": token}
    return f"{FILES}/{name}?{urlencode(query)}"
