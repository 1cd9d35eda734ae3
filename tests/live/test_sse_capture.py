"""Event streams in capture files: the SSE parser, and real a2a-sdk streaming traffic
captured as HAR and read back event by event (profile §10, docs/profile.md §10.5)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from handoff_context import Signer, handoff_object, make_offer
from mcp import types as mcp_types

from app.capture import sse
from app.capture.carriers import (
    A2A_EXTENSION_URI,
    MCP_META_KEY,
    Carried,
    CarrierError,
    HostState,
    Role,
    read_capture,
)

from .agents import Delegate, HarRecorder, a2a_app, card

PLANNER = Signer.generate("spiffe://a.example/agent/planner", "Ed25519", kid="p1")
CODER = Signer.generate("spiffe://b.example/agent/coder", "ES256", kid="c1")


# --- the parser -----------------------------------------------------------------------------


def test_events_lf_crlf_cr_multiline_comments_and_fields() -> None:
    text = (
        ": a comment\r\n"
        "event: message\r\n"
        "id: 7\r\n"
        'data: {"a":\r\n'
        "data:  1}\r\n"
        "\r\n"
        "data: two\n\n"
        "retry: 10\rdata: three\r\r"
        "id\n"
        "event: empty\n\n"  # no data: not dispatched
        "data: last, without a blank line"
    )
    found = list(sse.events(text))
    assert [(e.index, e.line, e.data, e.event, e.id) for e in found] == [
        (0, 2, '{"a":\n 1}', "message", "7"),
        (1, 7, "two", None, "7"),
        (2, 9, "three", None, "7"),
        (3, 15, "last, without a blank line", None, ""),
    ]


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_decoder_gives_the_same_events_for_any_chunking(size: int) -> None:
    text = "data: a\r\ndata: b\r\n\r\n: ping\r\n\r\ndata: c\r\rdata: d\n\n"
    decoder = sse.Decoder()
    chunked = [e for i in range(0, len(text), size) for e in decoder.feed(text[i : i + size])]
    chunked += decoder.close()
    assert chunked == list(sse.events(text))
    assert [e.data for e in chunked] == ["a\nb", "c", "d"]


def test_event_stream_detection() -> None:
    assert sse.is_event_stream("text/event-stream; charset=utf-8", "{}")
    assert sse.is_event_stream(None, "data: {}\n\n")
    assert sse.is_event_stream("application/json", ": ping\n\n")
    assert not sse.is_event_stream("application/json", '{"data": 1}')


# --- HAR entries holding streams ------------------------------------------------------------


def _har(entries: list[dict[str, Any]]) -> bytes:
    return json.dumps({"log": {"version": "1.2", "entries": entries}}).encode()


def _read(data: bytes) -> tuple[list[Carried], list[CarrierError], list[HostState]]:
    host: list[HostState] = []
    found = list(read_capture(data, name="s.har", on_host=host.append))
    carried = [f for f in found if isinstance(f, Carried)]
    errors = [f for f in found if isinstance(f, CarrierError)]
    return carried, errors, host


def test_a_bad_event_is_its_own_error_and_spoils_nothing() -> None:
    def event(state: str, message: dict[str, Any] | None = None) -> str:
        status: dict[str, Any] = {"state": state}
        if message is not None:
            status["message"] = message
        update = {"taskId": "t-1", "contextId": "c-1", "status": status}
        return json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": update}})

    status = {
        "messageId": "m",
        "role": "ROLE_AGENT",
        "metadata": {A2A_EXTENSION_URI: {"status": "x"}},
    }
    broken = event("TASK_STATE_WORKING", status)[:-9]  # cut inside, names our key
    body = "\r\n\r\n".join(
        [
            "data: " + event("TASK_STATE_SUBMITTED"),
            "data: " + broken,
            "data: [DONE]",  # not JSON at all: skipped like a non-JSON body
            "data: " + event("TASK_STATE_COMPLETED", status),
        ]
    )
    entry = {
        "startedDateTime": "2026-09-21T14:13:20.250Z",
        "request": {"method": "POST", "url": "http://a/"},
        "response": {"status": 200, "content": {"mimeType": "text/event-stream", "text": body}},
    }
    carried, errors, host = _read(_har([entry]))
    assert [e.source for e in errors] == ["s.har:entries[0].response event 1 (line 3)"]
    assert "event 1 data" in errors[0].detail
    assert [(c.source, c.task_state, c.seq) for c in carried] == [
        ("s.har:entries[0].response event 3 (line 7)", "TASK_STATE_COMPLETED", 3)
    ]
    assert [(h.task_state, h.seq, h.received_at) for h in host] == [
        ("TASK_STATE_SUBMITTED", 0, 1790000000.25)
    ]


def test_mcp_streamable_http_answer_in_an_event_stream() -> None:
    result = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="done")],
        _meta={MCP_META_KEY: {"status": "x"}, "io.modelcontextprotocol/related": {}},
    )
    answer = {"jsonrpc": "2.0", "id": 3, "result": result.model_dump(by_alias=True, mode="json")}
    body = f"event: message\ndata: {json.dumps(answer)}\n\n"
    entry = {
        "startedDateTime": "2026-09-21T14:13:20.001Z",
        "request": {"method": "POST", "url": "http://tools/mcp"},
        "response": {"status": 200, "content": {"mimeType": "text/event-stream", "text": body}},
    }
    carried, errors, _ = _read(_har([entry]))
    assert errors == []
    assert [(c.role, c.value) for c in carried] == [(Role.STATUS, {"status": "x"})]


# --- real a2a-sdk streaming traffic ---------------------------------------------------------


async def _exchange(
    binding: str, version: str, streaming: bool
) -> tuple[list[dict[str, Any]], str]:
    """A planner's offer to a real a2a-sdk delegate that completes at once, then a second
    task that the planner cancels; the traffic recorded as HAR entries."""
    agent_card = card("http://coder/", version=version)
    delegate = Delegate(CODER)
    recorder = HarRecorder()
    transport = httpx.ASGITransport(app=a2a_app(delegate, agent_card))
    now = int(time.time())
    async with httpx.AsyncClient(
        transport=transport, base_url="http://coder", event_hooks=recorder.hooks
    ) as http:
        clients = {
            # httpx's ASGI transport hands a response over only once it is complete, so the
            # task that waits for its cancel is sent without streaming, returning at once.
            script: ClientFactory(
                ClientConfig(
                    httpx_client=http,
                    streaming=streaming and script == "complete",
                    supported_protocol_bindings=[binding],
                )
            ).create(agent_card)
            for script in ("complete", "wait")
        }
        offers = []
        task_ids = []
        for script, client in clients.items():
            offer = make_offer(PLANNER, aud=CODER.iss, dialog="ctx-1", iat=now)
            offers.append(offer)
            message = pb.Message(
                message_id=f"m-{script}",
                context_id="ctx-1",
                role=pb.Role.ROLE_USER,
                parts=[pb.Part(text=script)],
            )
            message.extensions.append(A2A_EXTENSION_URI)
            message.metadata.update({A2A_EXTENSION_URI: handoff_object(offer)})
            request = pb.SendMessageRequest(message=message)
            if script == "wait":
                request.configuration.return_immediately = True
            async for event in client.send_message(request):
                task = event.task if event.HasField("task") else event.status_update
                task_ids.append(task.id if event.HasField("task") else task.task_id)
        await client.cancel_task(pb.CancelTaskRequest(id=task_ids[-1]))
    return recorder.entries, task_ids[-1]


@pytest.mark.parametrize(
    ("binding", "version", "streaming"),
    [
        ("JSONRPC", "1.0", True),
        ("JSONRPC", "0.3", True),
        ("HTTP+JSON", "1.0", True),
        ("JSONRPC", "1.0", False),
        ("HTTP+JSON", "1.0", False),
    ],
)
def test_real_streams_read_event_by_event(binding: str, version: str, streaming: bool) -> None:
    entries, canceled_task = asyncio.run(_exchange(binding, version, streaming))
    carried, errors, host = _read(_har(entries))
    assert errors == []
    roles = [c.role for c in carried]
    assert roles.count(Role.OFFER) == 2
    # The completing task: accepted and completed, each in its own event when streaming
    # (non-streaming, the accepted status goes into the task's history, which is not read).
    states = [c.task_state for c in carried if c.role is Role.STATUS]
    if streaming:
        assert states[:2] == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
        seqs = [c.seq for c in carried if c.role is Role.STATUS][:2]
        assert seqs[0] < seqs[1]  # stream order, not the order of names
    else:
        assert "TASK_STATE_COMPLETED" in states
    # The canceled task is last seen CANCELED, from a Task that carries no element.
    last = [h for h in host if h.task_id == canceled_task][-1]
    assert last.task_state == "TASK_STATE_CANCELED"
    assert all(isinstance(h.received_at, float) for h in host)


def test_an_event_stream_request_body_is_read_too() -> None:
    # Some clients stream their requests (MCP's server-to-client requests travel the other
    # way): a request body in text/event-stream is read event by event like a response.
    send = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "build", "_meta": {MCP_META_KEY: {"offer": "o"}}},
    }
    body = f"id: 1\nevent: message\ndata: {json.dumps(send)}\n\n"
    entry = {
        "startedDateTime": "2026-09-21T14:13:20Z",
        "request": {
            "method": "POST",
            "url": "http://tools/mcp",
            "postData": {"mimeType": "text/event-stream", "text": body},
        },
        "response": {"status": 202, "content": {"mimeType": "text/plain", "text": ""}},
    }
    carried, errors, _ = _read(_har([entry]))
    assert errors == []
    assert [(c.source, c.role) for c in carried] == [
        ("s.har:entries[0].request event 0 (line 1)", Role.OFFER)
    ]
