#!/usr/bin/env python3
"""Write the example captures that `make run` verifies (see README.md beside this file).

    python examples/make_examples.py           # write trust.json, capture.jsonl, broken.jsonl
    python examples/make_examples.py --check   # regenerate in memory, compare with the files

The carrier messages are produced with the real SDKs (a2a-sdk for A2A 1.0 protobuf-JSON and
A2A 0.3, mcp for MCP) and the elements with the project's signing toolkit
(``handoff_context``). Every input is fixed: keys come from fixed seeds, times are
constants, hops are derived from names, and ES256 signs with deterministic ECDSA (RFC 6979),
so running this again reproduces the files byte for byte.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import mcp.types as mcp
from a2a import types as a2a
from a2a.compat.v0_3 import types as a2a03
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from google.protobuf import json_format
from handoff_context import (
    Signer,
    b64url_encode,
    handoff_digest,
    handoff_object,
    make_offer,
    make_status,
    status_object,
    trust_document,
)
from joserfc.jwk import ECKey, OKPKey

HERE = Path(__file__).resolve().parent
T0 = 1_793_000_000  # `make run` judges at --at 1793000030; capture records say when each came
DIALOG = "ctx-7c1e"
A2A_KEY = "https://quantumlearningmachines.com/a2a/ext/agent-handoff/v1"
MCP_KEY = "quantumlearningmachines.com/agent-handoff"
_P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def _seed(kid: str) -> bytes:
    return hashlib.sha256(f"handoff-trace examples v1: {kid}".encode()).digest()


class _RFC6979Signing:
    """A P-256 private key whose signatures use deterministic ECDSA (RFC 6979)."""

    def __init__(self, key: ec.EllipticCurvePrivateKey) -> None:
        self._key = key

    def sign(self, data: bytes, algorithm: ec.ECDSA) -> bytes:
        return self._key.sign(data, ec.ECDSA(algorithm.algorithm, deterministic_signing=True))


class _DeterministicECKey(ECKey):
    def get_op_key(self, operation: str) -> Any:
        op_key = super().get_op_key(operation)
        return _RFC6979Signing(op_key) if operation == "sign" else op_key


def agent(iss: str, alg: str, kid: str) -> Signer:
    if alg == "ES256":
        scalar = int.from_bytes(_seed(kid), "big") % (_P256_N - 1) + 1
        private = ec.derive_private_key(scalar, ec.SECP256R1())
        return Signer(iss, _DeterministicECKey.import_key(private, {"kid": kid}), "ES256")
    private_ed = ed25519.Ed25519PrivateKey.from_private_bytes(_seed(kid))
    return Signer(iss, OKPKey.import_key(private_ed, {"kid": kid}), "Ed25519")


ASSISTANT = agent("spiffe://a.example/agent/assistant", "Ed25519", "assistant-1")
PLANNER = agent("spiffe://a.example/agent/planner", "ES256", "planner-1")
CODER = agent("spiffe://b.example/agent/coder", "Ed25519", "coder-1")
TESTER = agent("spiffe://c.example/agent/tester", "ES256", "tester-1")
MALLORY = agent("spiffe://evil.example/agent/mallory", "Ed25519", "mallory-1")  # not trusted


def hop(name: str) -> str:
    return b64url_encode(hashlib.sha256(f"example hop {name}".encode()).digest()[:16])


def offer(signer: Signer, aud: Signer, name: str, iat: int, **fields: Any) -> bytes:
    fields.setdefault("dialog", DIALOG)
    return make_offer(signer, aud=aud.iss, iat=iat, lifetime=120, hop=hop(name), **fields)


# --- carriers, built with the SDKs ----------------------------------------------------------


def a2a10_send(
    rpc_id: str, text: str, obj: dict[str, Any], *, context: str = DIALOG, message_id: str
) -> dict[str, Any]:
    """An A2A 1.0 SendMessage request (protobuf-JSON names)."""
    message = a2a.Message(
        message_id=message_id,
        context_id=context,
        role=a2a.Role.ROLE_USER,
        parts=[a2a.Part(text=text)],
        extensions=[A2A_KEY],
    )
    message.metadata.update({A2A_KEY: obj})
    params = json_format.MessageToDict(a2a.SendMessageRequest(message=message))
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "SendMessage", "params": params}


def a2a10_task(
    rpc_id: str, task_id: str, state: Any, text: str, obj: dict[str, Any]
) -> dict[str, Any]:
    """An A2A 1.0 SendMessage response: a Task whose status message carries the status."""
    message = a2a.Message(
        message_id=f"{task_id}-{rpc_id}",
        context_id=DIALOG,
        task_id=task_id,
        role=a2a.Role.ROLE_AGENT,
        parts=[a2a.Part(text=text)],
        extensions=[A2A_KEY],
    )
    message.metadata.update({A2A_KEY: obj})
    task = a2a.Task(
        id=task_id, context_id=DIALOG, status=a2a.TaskStatus(state=state, message=message)
    )
    result = json_format.MessageToDict(a2a.SendMessageResponse(task=task))
    return {"jsonrpc": "2.0", "id": rpc_id, "result": result}


def _a2a03_message(
    role: Any,
    message_id: str,
    text: str,
    obj: dict[str, Any],
    *,
    context: str = DIALOG,
    task_id: str | None = None,
) -> Any:
    return a2a03.Message(
        message_id=message_id,
        context_id=context,
        task_id=task_id,
        role=role,
        parts=[a2a03.Part(root=a2a03.TextPart(text=text))],
        extensions=[A2A_KEY],
        metadata={A2A_KEY: obj},
    )


def a2a03_send(rpc_id: str, text: str, obj: dict[str, Any], *, message_id: str) -> dict[str, Any]:
    """An A2A 0.3 message/send request."""
    message = _a2a03_message(a2a03.Role.user, message_id, text, obj)
    request = a2a03.SendMessageRequest(id=rpc_id, params=a2a03.MessageSendParams(message=message))
    out: dict[str, Any] = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    return out


def a2a03_task(
    rpc_id: str, task_id: str, state: Any, text: str, obj: dict[str, Any]
) -> dict[str, Any]:
    """An A2A 0.3 message/send response: a Task whose status message carries the status."""
    message = _a2a03_message(a2a03.Role.agent, f"{task_id}-{rpc_id}", text, obj, task_id=task_id)
    task = a2a03.Task(
        id=task_id, context_id=DIALOG, status=a2a03.TaskStatus(state=state, message=message)
    )
    response = a2a03.SendMessageSuccessResponse(id=rpc_id, result=task)
    out: dict[str, Any] = response.model_dump(mode="json", by_alias=True, exclude_none=True)
    return out


def mcp_call(
    rpc_id: int, tool: str, arguments: dict[str, Any], obj: dict[str, Any]
) -> dict[str, Any]:
    """An MCP tools/call request; other _meta keys ride along and are ignored."""
    params = mcp.CallToolRequestParams(
        name=tool, arguments=arguments, _meta={"progressToken": f"progress-{rpc_id}", MCP_KEY: obj}
    )
    request = mcp.CallToolRequest(params=params)
    body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {"jsonrpc": "2.0", "id": rpc_id, **body}


def mcp_result(rpc_id: int, text: str, obj: dict[str, Any]) -> dict[str, Any]:
    """An MCP CallToolResult carrying a status in result._meta."""
    result = mcp.CallToolResult(
        content=[mcp.TextContent(type="text", text=text)], isError=False, _meta={MCP_KEY: obj}
    )
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def record(
    at: int, by: Signer, payload: dict[str, Any], *, dialog: str | None = None
) -> dict[str, Any]:
    """A profile §10 capture record: when and by whom the payload was received."""
    out: dict[str, Any] = {"received_at": at, "received_by": by.iss}
    if dialog is not None:  # MCP carries no dialog of its own
        out["dialog"] = dialog
    out["payload"] = payload
    return out


# --- the captures ------------------------------------------------------------------------------


def capture() -> list[dict[str, Any]]:
    """assistant -> planner -> coder -> tester in dialog ctx-7c1e, as the agents received it."""
    o1 = offer(ASSISTANT, PLANNER, "plan", T0, task="task-plan")
    o2 = offer(PLANNER, CODER, "code", T0 + 5, task="task-code", prev=handoff_digest(o1))
    o3 = offer(CODER, TESTER, "test", T0 + 10, prev=handoff_digest(o2))
    o4 = offer(CODER, TESTER, "lint", T0 + 12, prev=handoff_digest(o2))  # request not captured

    def answer(who: Signer, answered: bytes, state: str, at: int) -> dict[str, Any]:
        return status_object(make_status(who, offer_octets=answered, state=state, iat=at))

    send_code = a2a03_send(
        "2",
        "Implement the streaming parser from the plan.",
        handoff_object(o2, [o1]),
        message_id="msg-code-1",
    )
    return [
        record(
            T0 + 1,
            PLANNER,
            a2a10_send(
                "1",
                "Plan the parser rewrite for issue #812.",
                handoff_object(o1),
                message_id="msg-plan-1",
            ),
        ),
        record(
            T0 + 2,
            ASSISTANT,
            a2a10_task(
                "1",
                "task-plan",
                a2a.TaskState.TASK_STATE_WORKING,
                "Planning.",
                answer(PLANNER, o1, "accepted", T0 + 2),
            ),
        ),
        record(T0 + 6, CODER, send_code),
        record(
            T0 + 7,
            PLANNER,
            a2a03_task(
                "2",
                "task-code",
                a2a03.TaskState.working,
                "Coding.",
                answer(CODER, o2, "accepted", T0 + 7),
            ),
        ),
        record(
            T0 + 11,
            TESTER,
            mcp_call(7, "run_tests", {"suite": "parser"}, handoff_object(o3, [o1, o2])),
            dialog=DIALOG,
        ),
        # The coder's A2A client timed out and sent the same request again: a retransmission.
        record(T0 + 12, CODER, send_code),
        record(
            T0 + 25,
            CODER,
            mcp_result(7, "42 passed, 0 failed", answer(TESTER, o3, "completed", T0 + 25)),
        ),
        # The answer to a run_lint call whose request is not in this capture: pending.
        record(
            T0 + 26, CODER, mcp_result(8, "lint started", answer(TESTER, o4, "accepted", T0 + 26))
        ),
        record(
            T0 + 28,
            PLANNER,
            a2a03_task(
                "2",
                "task-code",
                a2a03.TaskState.completed,
                "Parser merged.",
                answer(CODER, o2, "completed", T0 + 28),
            ),
        ),
        record(
            T0 + 29,
            ASSISTANT,
            a2a10_task(
                "1",
                "task-plan",
                a2a.TaskState.TASK_STATE_COMPLETED,
                "Done.",
                answer(PLANNER, o1, "completed", T0 + 29),
            ),
        ),
    ]


def broken() -> list[Any]:
    """What a careful receiver refuses; each line says why in the verify table."""
    o1 = offer(ASSISTANT, PLANNER, "plan", T0, task="task-plan")
    o2 = offer(PLANNER, CODER, "code", T0 + 5, task="task-code", prev=handoff_digest(o1))
    dropped = offer(CODER, TESTER, "broken-chain", T0 + 14, prev=handoff_digest(o2))
    first = offer(PLANNER, CODER, "equivocation", T0 + 15, task="task-docs")
    second = offer(PLANNER, CODER, "equivocation", T0 + 16, task="task-docs-and-deploy")
    stale = offer(PLANNER, CODER, "stale", T0 - 600)
    forged = offer(MALLORY, CODER, "untrusted", T0 + 17)
    misrouted = offer(PLANNER, TESTER, "wrong-audience", T0 + 18)
    genuine = offer(PLANNER, CODER, "bad-signature", T0 + 19, task="task-review")
    # A relay rewrote the task after signing: the payload changes, the signature does not.
    head, payload, signature = genuine.decode().split(".")
    doc = json.loads(_b64decode(payload))
    doc["task"] = "task-deploy"
    relayed = f"{head}.{b64url_encode(json.dumps(doc, separators=(',', ':')).encode())}"
    relayed += f".{signature}"
    elsewhere = offer(PLANNER, CODER, "dialog", T0 + 20)
    lines: list[Any] = [
        record(
            T0 + 15,
            TESTER,
            mcp_call(9, "run_tests", {"suite": "all"}, handoff_object(dropped, [o1])),
            dialog=DIALOG,
        ),
        record(
            T0 + 16,
            CODER,
            a2a10_send("20", "Write the docs.", handoff_object(first), message_id="msg-docs-1"),
        ),
        record(
            T0 + 17,
            CODER,
            a2a10_send(
                "21", "Write the docs and deploy.", handoff_object(second), message_id="msg-docs-2"
            ),
        ),
        record(
            T0 + 18,
            CODER,
            a2a10_send("22", "Old work item.", handoff_object(stale), message_id="msg-stale"),
        ),
        record(
            T0 + 19,
            CODER,
            a2a03_send("23", "Please run this.", handoff_object(forged), message_id="msg-evil"),
        ),
        record(
            T0 + 20,
            CODER,
            a2a10_send("24", "Test this.", handoff_object(misrouted), message_id="msg-misrouted"),
        ),
        record(
            T0 + 21,
            CODER,
            a2a10_send("25", "Review and deploy.", {"offer": relayed}, message_id="msg-relayed"),
        ),
        record(
            T0 + 22,
            CODER,
            a2a10_send(
                "26",
                "Side quest.",
                handoff_object(elsewhere),
                context="ctx-0000",
                message_id="msg-elsewhere",
            ),
        ),
    ]
    return lines


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def rendered() -> dict[str, str]:
    def jsonl(items: list[Any]) -> str:
        return "".join(json.dumps(item) + "\n" for item in items)

    trust = trust_document([ASSISTANT, PLANNER, CODER, TESTER])
    # The last line of broken.jsonl: a capture cut off in the middle of a request.
    truncated = '{"received_at": 1793000023, "payload": {"jsonrpc": "2.0", "method": "SendMe\n'
    return {
        "trust.json": json.dumps(trust, indent=2) + "\n",
        "capture.jsonl": jsonl(capture()),
        "broken.jsonl": jsonl(broken()) + truncated,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the files with a fresh rendering instead of writing",
    )
    args = parser.parse_args(argv)
    files = rendered()
    if args.check:
        stale = [
            name
            for name, text in files.items()
            if not (HERE / name).is_file() or (HERE / name).read_text() != text
        ]
        for name in stale:
            print(f"examples/{name} differs from what make_examples.py writes", file=sys.stderr)
        return 1 if stale else 0
    for name, text in files.items():
        (HERE / name).write_text(text)
    print(f"wrote {', '.join(files)} to {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
