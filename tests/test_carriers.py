"""Carrier extraction (profile §9, §10): real A2A and MCP SDK traffic in, carried objects out.

The handoff values are dummies: extraction hands objects over as found and never verifies,
so only their place and shape matter here.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterable
from typing import Any

import anyio
import cbor2
import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as types_v03
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format
from handoff_context import carry
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonrpc.jsonrpc2 import JSONRPC20Request, JSONRPC20Response
from mcp import types as mcp_types
from mcp.client._memory import InMemoryTransport  # what Client(server) uses in process
from mcp.client.client import Client as McpClient
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette

from app.capture import carriers
from app.capture.carriers import (
    A2A_EXTENSION_URI,
    MCP_META_KEY,
    CaptureFormat,
    Carried,
    Carrier,
    CarrierError,
    ExtractStats,
    Role,
    detect_format,
    extract,
    read_capture,
)

OFFER = {"offer": "aaa.bbb.ccc", "chain": []}
STATUS = {"status": "sss.ttt.uuu"}
CANCELED = {"status": "ccc.aaa.nnn"}
T0 = 1_790_000_000  # 2026-09-21T14:13:20Z


def run(data: bytes, **kwargs: Any) -> tuple[list[Carried], list[CarrierError], ExtractStats]:
    stats = ExtractStats()
    found = list(read_capture(data, stats=stats, **kwargs))
    carried = [item for item in found if isinstance(item, Carried)]
    errors = [item for item in found if isinstance(item, CarrierError)]
    assert len(carried) + len(errors) == len(found)
    return carried, errors, stats


def jsonl(messages: Iterable[object]) -> bytes:
    return b"".join(json.dumps(message).encode() + b"\n" for message in messages)


# --- A2A 1.0 shapes, serialised the way the SDK's JSON-RPC transport and server do ---------


def a2a_message(
    role: int, payload: dict[str, Any] | None, *, extensions: bool = True
) -> pb.Message:
    message = pb.Message(
        message_id="m-1",
        context_id="ctx-1",
        task_id="task-1",
        role=role,
        parts=[pb.Part(text="please build it")],
    )
    if extensions:
        message.extensions.append(A2A_EXTENSION_URI)
    if payload is not None:
        message.metadata.update({A2A_EXTENSION_URI: payload})
    return message


def rpc_request(method: str, request: Any) -> dict[str, Any]:
    # a2a.client.transports.jsonrpc: JSONRPC20Request(params=json_format.MessageToDict(request))
    return dict(
        JSONRPC20Request(method=method, params=json_format.MessageToDict(request), _id="7").data
    )


def rpc_result(result: Any) -> dict[str, Any]:
    # a2a.server.routes.jsonrpc_dispatcher: MessageToDict(...) inside a JSONRPC20Response
    return dict(JSONRPC20Response(result=json_format.MessageToDict(result), _id="7").data)


def working_task() -> pb.Task:
    task = pb.Task(id="task-1", context_id="ctx-1")
    task.status.state = pb.TaskState.TASK_STATE_WORKING
    task.status.message.CopyFrom(a2a_message(pb.Role.ROLE_AGENT, STATUS, extensions=False))
    # The history repeats the offer that started the task: it must not be reported again.
    task.history.append(a2a_message(pb.Role.ROLE_USER, OFFER))
    return task


def test_a2a_1_0_send_message_request() -> None:
    wire = rpc_request(
        "SendMessage", pb.SendMessageRequest(message=a2a_message(pb.Role.ROLE_USER, OFFER))
    )
    assert wire["params"]["message"]["role"] == "ROLE_USER"
    [carried] = extract(wire, source="x:1")
    assert carried == Carried(
        source="x:1",
        value=OFFER,
        carrier=Carrier.A2A_1_0,
        dialog="ctx-1",
        received_at=None,
        received_by=None,
        record_dialog=None,
        task_id="task-1",
        task_state=None,
        role=Role.OFFER,
    )


def test_a2a_1_0_streaming_request_and_missing_extensions_entry() -> None:
    # The URI missing from Message.extensions does not hide the object: the key names it.
    message = a2a_message(pb.Role.ROLE_USER, OFFER, extensions=False)
    wire = rpc_request("SendStreamingMessage", pb.SendMessageRequest(message=message))
    [carried] = extract(wire, source="s")
    assert isinstance(carried, Carried)
    assert (carried.carrier, carried.role, carried.value) == (Carrier.A2A_1_0, Role.OFFER, OFFER)


def test_a2a_1_0_task_response_reads_status_message_not_history() -> None:
    wire = rpc_result(pb.SendMessageResponse(task=working_task()))
    [carried] = extract(wire, source="r")
    assert isinstance(carried, Carried)
    assert carried.value == STATUS
    assert carried.role is Role.STATUS
    assert carried.carrier is Carrier.A2A_1_0
    assert (carried.dialog, carried.task_id) == ("ctx-1", "task-1")
    assert carried.task_state == "TASK_STATE_WORKING"


def test_a2a_1_0_message_response_and_bare_objects() -> None:
    reply = a2a_message(pb.Role.ROLE_AGENT, STATUS)
    [from_reply] = extract(rpc_result(pb.SendMessageResponse(message=reply)), source="r")
    assert isinstance(from_reply, Carried)
    assert (from_reply.value, from_reply.role, from_reply.task_state) == (STATUS, Role.STATUS, None)
    # A bare Message: the sender's role says which side of the exchange it is.
    [bare_offer] = extract(
        json_format.MessageToDict(a2a_message(pb.Role.ROLE_USER, OFFER)), source="b"
    )
    [bare_status] = extract(json_format.MessageToDict(reply), source="b")
    assert isinstance(bare_offer, Carried) and isinstance(bare_status, Carried)
    assert (bare_offer.role, bare_status.role) == (Role.OFFER, Role.STATUS)
    [bare_task] = extract(json_format.MessageToDict(working_task()), source="t")
    assert isinstance(bare_task, Carried)
    assert (bare_task.carrier, bare_task.task_state) == (Carrier.A2A_1_0, "TASK_STATE_WORKING")


def test_a2a_1_0_cancel_task_request() -> None:
    request = pb.CancelTaskRequest(id="task-1")
    request.metadata.update({A2A_EXTENSION_URI: CANCELED})
    wire = rpc_request("CancelTask", request)
    [carried] = extract(wire, source="c")
    assert isinstance(carried, Carried)
    assert (carried.role, carried.carrier, carried.value) == (
        Role.CANCEL,
        Carrier.A2A_1_0,
        CANCELED,
    )
    assert (carried.task_id, carried.dialog) == ("task-1", None)


def test_a2a_1_0_stream_status_update() -> None:
    event = pb.TaskStatusUpdateEvent(task_id="task-1", context_id="ctx-1")
    event.status.state = pb.TaskState.TASK_STATE_COMPLETED
    event.status.message.CopyFrom(a2a_message(pb.Role.ROLE_AGENT, STATUS))
    wire = rpc_result(pb.StreamResponse(status_update=event))
    assert "statusUpdate" in wire["result"]
    [carried] = extract(wire, source="e")
    assert isinstance(carried, Carried)
    assert (carried.task_state, carried.role, carried.task_id) == (
        "TASK_STATE_COMPLETED",
        Role.STATUS,
        "task-1",
    )
    # Protobuf JSON parsers accept snake_case names too.
    snake = json_format.MessageToDict(
        pb.StreamResponse(status_update=event), preserving_proto_field_name=True
    )
    [from_snake] = extract({"jsonrpc": "2.0", "id": 1, "result": snake}, source="e")
    assert isinstance(from_snake, Carried)
    assert (from_snake.dialog, from_snake.task_id) == ("ctx-1", "task-1")


# --- A2A 0.3 shapes via the SDK's compat layer ---------------------------------------------


def compat_dump(model: Any) -> dict[str, Any]:
    # a2a.compat.v0_3.jsonrpc_transport: model_dump(by_alias=True, exclude_none=True, mode="json")
    return dict(model.model_dump(by_alias=True, exclude_none=True, mode="json"))


def test_a2a_0_3_message_send_request() -> None:
    request = pb.SendMessageRequest(message=a2a_message(pb.Role.ROLE_USER, OFFER))
    params = compat_dump(conversions.to_compat_send_message_request(request, request_id=0).params)
    assert params["message"]["kind"] == "message" and params["message"]["role"] == "user"
    for method in ("message/send", "message/stream"):
        [carried] = extract(
            {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, source="q"
        )
        assert isinstance(carried, Carried)
        assert (carried.carrier, carried.role, carried.dialog) == (
            Carrier.A2A_0_3,
            Role.OFFER,
            "ctx-1",
        )
    # Bare params and a bare message (no JSON-RPC envelope): the message's kind and role tell.
    for bare in (params, params["message"]):
        [carried] = extract(bare, source="b")
        assert isinstance(carried, Carried)
        assert (carried.carrier, carried.role) == (Carrier.A2A_0_3, Role.OFFER)


def test_a2a_0_3_task_response_normalises_state() -> None:
    wire = compat_dump(
        conversions.to_compat_send_message_response(
            pb.SendMessageResponse(task=working_task()), request_id=1
        )
    )
    assert wire["result"]["kind"] == "task" and wire["result"]["status"]["state"] == "working"
    [carried] = extract(wire, source="r")
    assert isinstance(carried, Carried)
    assert (carried.carrier, carried.task_state, carried.value) == (
        Carrier.A2A_0_3,
        "TASK_STATE_WORKING",
        STATUS,
    )


def test_a2a_0_3_status_update_and_cancel() -> None:
    event = pb.TaskStatusUpdateEvent(task_id="task-1", context_id="ctx-1")
    event.status.state = pb.TaskState.TASK_STATE_INPUT_REQUIRED
    event.status.message.CopyFrom(a2a_message(pb.Role.ROLE_AGENT, STATUS))
    wire = compat_dump(
        conversions.to_compat_stream_response(pb.StreamResponse(status_update=event), request_id=1)
    )
    assert wire["result"]["kind"] == "status-update"
    [update] = extract(wire, source="u")
    assert isinstance(update, Carried)
    assert (update.carrier, update.task_state) == (Carrier.A2A_0_3, "TASK_STATE_INPUT_REQUIRED")

    cancel = pb.CancelTaskRequest(id="task-1")
    cancel.metadata.update({A2A_EXTENSION_URI: CANCELED})
    params = compat_dump(conversions.to_compat_cancel_task_request(cancel, request_id=0).params)
    [carried] = extract(
        {"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel", "params": params}, source="c"
    )
    assert isinstance(carried, Carried)
    assert (carried.carrier, carried.role, carried.task_id) == (
        Carrier.A2A_0_3,
        Role.CANCEL,
        "task-1",
    )


def test_a2a_without_key_is_skipped_and_non_object_entry_is_an_error() -> None:
    plain = rpc_request(
        "SendMessage", pb.SendMessageRequest(message=a2a_message(pb.Role.ROLE_USER, None))
    )
    broken = rpc_request(
        "SendMessage", pb.SendMessageRequest(message=a2a_message(pb.Role.ROLE_USER, None))
    )
    broken["params"]["message"]["metadata"] = {A2A_EXTENSION_URI: "aaa.bbb.ccc"}
    carried, errors, stats = run(jsonl([plain, broken]), name="c.jsonl")
    assert carried == []
    assert [e.source for e in errors] == ["c.jsonl:2"]
    assert "message.metadata" in errors[0].detail and "a string" in errors[0].detail
    assert (stats.items, stats.without_handoff, stats.errors) == (2, 1, 1)


# --- A real A2A client and server, in process, captured as a HAR ----------------------------


class DelegateExecutor(AgentExecutor):
    """Creates the task, then answers the offer with a status in the status message."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = pb.Task(id=context.task_id, context_id=context.context_id)
        task.status.state = pb.TaskState.TASK_STATE_SUBMITTED
        if context.message is not None:
            task.history.append(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        reply = updater.new_agent_message(
            parts=[pb.Part(text="accepted")], metadata={A2A_EXTENSION_URI: STATUS}
        )
        await updater.start_work(reply)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


async def a2a_round_trip(protocol_version: str) -> list[dict[str, Any]]:
    card = pb.AgentCard(
        name="delegate",
        description="builds things",
        version="1",
        supported_interfaces=[
            pb.AgentInterface(
                protocol_binding="JSONRPC",
                url="http://agent/rpc",
                protocol_version=protocol_version,
            )
        ],
        capabilities=pb.AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id="build", name="build", description="build", tags=["build"])],
    )
    handler = DefaultRequestHandler(DelegateExecutor(), InMemoryTaskStore(), card)
    app = Starlette(routes=create_jsonrpc_routes(handler, "/rpc", enable_v0_3_compat=True))
    entries: list[dict[str, Any]] = []

    async def on_response(response: httpx.Response) -> None:
        body = await response.aread()
        entries.append(
            {
                "startedDateTime": f"2026-09-21T14:13:{20 + len(entries):02d}.750+00:00",
                "request": {
                    "method": "POST",
                    "url": str(response.request.url),
                    "postData": {
                        "mimeType": "application/json",
                        "text": response.request.content.decode(),
                    },
                },
                # Browsers store some bodies base64: do so for every response.
                "response": {
                    "status": response.status_code,
                    "content": {
                        "mimeType": "application/json",
                        "encoding": "base64",
                        "text": base64.b64encode(body).decode(),
                    },
                },
            }
        )

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, event_hooks={"response": [on_response]}
    ) as http:
        client = await create_client(card, ClientConfig(httpx_client=http, streaming=False))
        message = a2a_message(pb.Role.ROLE_USER, OFFER)
        message.ClearField("task_id")
        task_id = ""
        async for event in client.send_message(pb.SendMessageRequest(message=message)):
            task_id = event.task.id
        cancel = pb.CancelTaskRequest(id=task_id)
        cancel.metadata.update({A2A_EXTENSION_URI: CANCELED})
        await client.cancel_task(cancel)
    return entries


@pytest.mark.parametrize(
    ("version", "carrier"), [("1.0", Carrier.A2A_1_0), ("0.3", Carrier.A2A_0_3)]
)
def test_real_a2a_exchange_captured_as_har(version: str, carrier: Carrier) -> None:
    entries = asyncio.run(a2a_round_trip(version))
    har = json.dumps(
        {"log": {"version": "1.2", "creator": {"name": "t", "version": "1"}, "entries": entries}}
    )
    carried, errors, stats = run(har.encode(), name="a2a.har")
    assert errors == []
    assert [(c.source, c.role, c.value) for c in carried] == [
        ("a2a.har:entries[0].request", Role.OFFER, OFFER),
        ("a2a.har:entries[0].response", Role.STATUS, STATUS),
        ("a2a.har:entries[1].request", Role.CANCEL, CANCELED),
    ]
    assert {c.carrier for c in carried} == {carrier}
    task_id = carried[1].task_id
    assert task_id and carried[2].task_id == task_id
    assert carried[1].task_state == "TASK_STATE_WORKING"
    assert [c.dialog for c in carried] == ["ctx-1", "ctx-1", None]
    # A request's URL path names no observation.
    assert [(c.key, c.seq) for c in carried] == [(None, 0)] * 3
    # startedDateTime with its milliseconds: the checks floor it, the store keeps it.
    assert [c.received_at for c in carried] == [T0 + 0.75, T0 + 0.75, T0 + 1.75]
    # The cancel response's task repeats offer and status in its history: not read again.
    assert (stats.items, stats.carried, stats.without_handoff) == (4, 3, 1)


# --- MCP, through a real in-process client session ------------------------------------------


class _Recorder:
    """Wraps one side of an MCP in-memory transport and keeps every message as JSON."""

    def __init__(self, inner: Any, wire: list[dict[str, Any]]) -> None:
        self.inner = inner
        self.wire = wire

    def keep(self, item: Any) -> None:
        if not isinstance(item, Exception):
            self.wire.append(
                item.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
            )

    async def send(self, item: Any) -> None:
        self.keep(item)
        await self.inner.send(item)

    async def receive(self) -> Any:
        item = await self.inner.receive()
        self.keep(item)
        return item

    def __aiter__(self) -> _Recorder:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _Recorder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.inner.aclose()


class RecordingTransport:
    def __init__(self, server: MCPServer, wire: list[dict[str, Any]]) -> None:
        self.transport = InMemoryTransport(server)
        self.wire = wire

    async def __aenter__(self) -> tuple[_Recorder, _Recorder]:
        read, write = await self.transport.__aenter__()
        return _Recorder(read, self.wire), _Recorder(write, self.wire)

    async def __aexit__(self, *exc: Any) -> None:
        await self.transport.__aexit__(*exc)


async def mcp_exchange() -> list[dict[str, Any]]:
    server = MCPServer("delegate")

    @server.tool()
    def build(target: str) -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=f"built {target}")],
            _meta={MCP_META_KEY: STATUS},
        )

    wire: list[dict[str, Any]] = []
    async with McpClient(RecordingTransport(server, wire)) as client:
        await client.call_tool("build", {"target": "x"}, meta={MCP_META_KEY: OFFER})
        cancelled = mcp_types.CancelledNotification(
            params=mcp_types.CancelledNotificationParams(
                request_id=99, _meta={MCP_META_KEY: CANCELED}
            )
        )
        await client.session.send_notification(cancelled)
    return wire


def test_real_mcp_session_captured_as_jsonl() -> None:
    wire = anyio.run(mcp_exchange)
    call = next(m for m in wire if m.get("method") == "tools/call")
    # The 2026-07-28 session stamps reserved keys beside ours; they must be ignored.
    assert mcp_types.PROTOCOL_VERSION_META_KEY in call["params"]["_meta"]
    carried, errors, stats = run(jsonl(wire), name="mcp.jsonl")
    assert errors == []
    assert [(c.role, c.value) for c in carried] == [
        (Role.OFFER, OFFER),
        (Role.STATUS, STATUS),
        (Role.CANCEL, CANCELED),
    ]
    assert all(c.carrier is Carrier.MCP and c.dialog is None and c.task_id is None for c in carried)
    # server/discover, tools/list and their results carry nothing and are counted as such.
    assert stats.items == len(wire) and stats.without_handoff == len(wire) - 3


def test_mcp_types_serialised_directly() -> None:
    params = mcp_types.CallToolRequestParams(
        name="build",
        arguments={},
        _meta={mcp_types.CLIENT_INFO_META_KEY: {"name": "c", "version": "1"}, MCP_META_KEY: OFFER},
    )
    request = mcp_types.CallToolRequest(params=params).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    [carried] = extract({"jsonrpc": "2.0", "id": 3, **request}, source="m")
    assert isinstance(carried, Carried) and carried.value == OFFER
    # Other _meta keys alone carry nothing.
    del request["params"]["_meta"][MCP_META_KEY]
    assert extract({"jsonrpc": "2.0", "id": 3, **request}, source="m") == []
    result = mcp_types.CallToolResult(content=[], _meta={MCP_META_KEY: ["not", "an", "object"]})
    response = {
        "jsonrpc": "2.0",
        "id": 3,
        "result": result.model_dump(by_alias=True, mode="json", exclude_none=True),
    }
    [error] = extract(response, source="m")
    assert isinstance(error, CarrierError) and "result._meta" in error.detail


# --- file formats ----------------------------------------------------------------------------


def test_json_single_payload_and_array() -> None:
    [one], errors, _ = run(json.dumps(OFFER).encode(), name="x.json")
    assert (one.source, one.carrier, one.role) == ("x.json", Carrier.RAW, Role.OFFER)
    carried, errors, stats = run(
        json.dumps([OFFER, {"unrelated": 1}, STATUS, 7]).encode(), name="x.json"
    )
    assert [(c.source, c.role) for c in carried] == [
        ("x.json[0]", Role.OFFER),
        ("x.json[2]", Role.STATUS),
    ]
    assert [e.source for e in errors] == ["x.json[3]"]
    assert (stats.items, stats.carried, stats.without_handoff, stats.errors) == (4, 2, 1, 1)


def test_json_whole_file_error_and_strictness() -> None:
    for bad in (
        b'{"offer": "a", "offer": "b"}',
        b"\xef\xbb\xbf{}",
        b'{"x": NaN}',
        b"{" + b'"a": [' * 40 + b"]" * 40 + b"}",
    ):
        carried, errors, _ = run(bad, name="x.json")
        assert carried == [] and len(errors) == 1 and errors[0].source == "x.json"
    # An array is read element by element, so a bad element is an error of its own.
    carried, errors, _ = run(b"[" * 40 + b"]" * 40, name="x.json")
    assert carried == [] and [(e.source, e.detail) for e in errors] == [
        ("x.json[0]", "x.json[0] nests deeper than 32 levels")
    ]


def test_capture_records_override_and_are_validated() -> None:
    records = [
        {
            "received_at": T0 + 0.9,
            "received_by": "spiffe://b.example/coder",
            "dialog": "d-9",
            "payload": OFFER,
        },
        {"received_at": T0, "payload": rpc_result(pb.SendMessageResponse(task=working_task()))},
        {"received_at": "yesterday", "payload": OFFER},
        {"received_at": True, "payload": OFFER},
        {"received_by": "has space", "payload": OFFER},
        {"payload": {"payload": OFFER}},
    ]
    carried, errors, _ = run(json.dumps(records).encode(), name="r.json")
    first, second = carried
    # A fractional received_at is kept as it is (the checks floor it to seconds).
    assert (first.received_at, first.received_by, first.record_dialog) == (
        T0 + 0.9,
        "spiffe://b.example/coder",
        "d-9",
    )
    assert (second.received_at, second.dialog, second.record_dialog) == (T0, "ctx-1", None)
    assert [e.source for e in errors] == ["r.json[2]", "r.json[3]", "r.json[4]", "r.json[5]"]
    assert all(e.detail.startswith("capture record") for e in errors[:3])
    # extract() arguments are the defaults a record overrides.
    [from_args] = extract(
        {"payload": OFFER, "dialog": "d-1"}, source="s", received_at=5, received_by="me"
    )
    assert isinstance(from_args, Carried)
    assert (from_args.received_at, from_args.received_by, from_args.record_dialog) == (
        5,
        "me",
        "d-1",
    )


def test_jsonl_bad_line_in_the_middle() -> None:
    lines = [
        json.dumps(OFFER).encode(),
        b"",
        b'{"status": "a", "status": "b"}',  # duplicate member: this line only
        b"   ",
        json.dumps({"received_at": T0, "payload": STATUS}).encode(),
        b"{not json",
        json.dumps([OFFER, STATUS]).encode(),  # a JSON-RPC batch style array
    ]
    carried, errors, stats = run(b"\r\n".join(lines), name="cap.jsonl")
    assert [c.source for c in carried] == [
        "cap.jsonl:1",
        "cap.jsonl:5",
        "cap.jsonl:7[0]",
        "cap.jsonl:7[1]",
    ]
    assert [(e.source, e.detail.split(" ")[:2]) for e in errors] == [
        ("cap.jsonl:3", ["line", "3:"]),
        ("cap.jsonl:6", ["line", "6"]),
    ]
    assert carried[1].received_at == T0
    assert (stats.items, stats.carried, stats.errors, stats.without_handoff) == (5, 4, 2, 0)


def har_entry(
    started: str, request: str | None, response: str | None, *, base64_response: bool = False
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "startedDateTime": started,
        "request": {"method": "POST"},
        "response": {"status": 200},
    }
    if request is not None:
        entry["request"]["postData"] = {"mimeType": "application/json", "text": request}
    if response is not None:
        content: dict[str, Any] = {"mimeType": "application/json", "text": response}
        if base64_response:
            content = {
                "mimeType": "application/json",
                "encoding": "base64",
                "text": base64.b64encode(response.encode()).decode(),
            }
        entry["response"]["content"] = content
    return entry


def test_har_bodies() -> None:
    send = json.dumps(
        rpc_request(
            "SendMessage", pb.SendMessageRequest(message=a2a_message(pb.Role.ROLE_USER, OFFER))
        )
    )
    reply = json.dumps(rpc_result(pb.SendMessageResponse(task=working_task())))
    truncated = send[: send.index(A2A_EXTENSION_URI) + len(A2A_EXTENSION_URI) + 5]
    entries = [
        har_entry("2026-09-21T14:13:20.999Z", send, reply, base64_response=True),
        har_entry("2026-09-21T16:13:21+02:00", None, "<html>not json</html>"),
        har_entry("2026-09-21T14:13:22Z", '{"query": "x"', None),  # broken, but mentions no key
        har_entry("2026-09-21T14:13:23Z", truncated, None),  # broken and names our key: an error
        har_entry("yesterday", send, None),
        "not an entry",
    ]
    har = json.dumps({"log": {"version": "1.2", "entries": entries}}).encode()
    carried, errors, stats = run(har, name="t.har")
    assert [(c.source, c.role, c.received_at) for c in carried] == [
        ("t.har:entries[0].request", Role.OFFER, T0 + 0.999),
        ("t.har:entries[0].response", Role.STATUS, T0 + 0.999),
    ]
    assert [e.source for e in errors] == [
        "t.har:entries[3].request",
        "t.har:entries[4]",
        "t.har:entries[5]",
    ]
    assert "startedDateTime" in errors[1].detail
    assert (stats.items, stats.carried, stats.without_handoff, stats.errors) == (7, 2, 2, 3)
    # A HAR uploaded as plain application/json is still read as a HAR.
    carried_again, _, _ = run(har, name="upload", content_type="application/json")
    assert [c.source for c in carried_again] == [
        c.source.replace("t.har", "upload") for c in carried
    ]


def test_har_that_is_not_a_har() -> None:
    carried, errors, _ = run(b'{"log": []}', name="x.har")
    assert carried == [] and len(errors) == 1 and "HAR" in errors[0].detail


def test_cbor_single_object_and_sequence() -> None:
    offer = {"offer": b"\xd2\x84COSE", "chain": [b"\xd2\x84older"]}
    status = {"status": b"\xd2\x84status"}
    [one], errors, _ = run(cbor2.dumps(offer), name="o.cbor")
    assert errors == [] and (one.source, one.value, one.role) == ("o.cbor#1", offer, Role.OFFER)
    record = {"received_at": T0, "received_by": "spiffe://b", "dialog": "d", "payload": status}
    data = cbor2.dumps(offer) + cbor2.dumps(record) + cbor2.dumps(status)
    carried, errors, _ = run(data, content_type="application/cbor")
    assert [c.source for c in carried] == ["-#1", "-#2", "-#3"]
    assert (carried[1].received_at, carried[1].record_dialog, carried[1].value) == (T0, "d", status)


def test_cbor_broken_item_stops_the_sequence() -> None:
    good = cbor2.dumps({"status": b"x"})
    duplicate = (
        bytes.fromhex("a2")
        + cbor2.dumps("status")[0:]
        + b"\x41x"
        + cbor2.dumps("status")
        + b"\x41y"
    )
    for broken in (b"\xff", duplicate, b"\x81" * 40 + b"\x00", bytes.fromhex("d81c81d81d00")):
        carried, errors, stats = run(good + broken + good, name="s.cbor")
        assert [c.source for c in carried] == ["s.cbor#1"]
        [error] = errors
        assert error.source == "s.cbor#2"
        assert "cannot be resynchronised" in error.detail and f"byte {len(good)}" in error.detail
        assert stats.items == 2


@pytest.mark.parametrize(
    ("data", "name", "content_type", "expected"),
    [
        (b"{}", None, "application/json; charset=utf-8", CaptureFormat.JSON),
        (b"{}", None, "application/x-ndjson", CaptureFormat.JSONL),
        (b"{}", None, "application/jsonl", CaptureFormat.JSONL),
        (b"{}", None, "Application/CBOR", CaptureFormat.CBOR),
        (b"{}", None, "application/har+json", CaptureFormat.HAR),
        (b"{}", "cap.NDJSON", "application/octet-stream", CaptureFormat.JSONL),
        (b"{}", "cap.jsonl", None, CaptureFormat.JSONL),
        (b"{}", "cap.har", None, CaptureFormat.HAR),
        (b"{}", "cap.cbor", None, CaptureFormat.CBOR),
        (b"{}", "dir.json/cap", None, CaptureFormat.JSON),  # sniffed: no extension
        (b'  {"offer": "a"}\n', "-", None, CaptureFormat.JSON),
        (b'{"offer": "a"}\n{"offer": "b"}\n', "-", None, CaptureFormat.JSONL),
        (b'{\n  "offer": "a"\n}\n', None, None, CaptureFormat.JSON),
        (b'[\n  {"offer": "a"}\n]', None, None, CaptureFormat.JSON),
        (b'{"log": {"version": "1.2", "entries": []}}', None, None, CaptureFormat.HAR),
        (b"\xef\xbb\xbf{}", None, None, CaptureFormat.JSON),
        (cbor2.dumps({"offer": b"x"}), None, None, CaptureFormat.CBOR),
        (b" \n\t", None, None, CaptureFormat.JSONL),
    ],
)
def test_detect_format(
    data: bytes, name: str | None, content_type: str | None, expected: CaptureFormat
) -> None:
    assert detect_format(data, name=name, content_type=content_type) is expected


# --- robustness: read_capture yields, it never raises ---------------------------------------

KEYS = [
    "offer", "status", "chain", "payload", "received_at", "received_by", "dialog", "jsonrpc",
    "id", "method", "params", "result", "error", "message", "task", "statusUpdate", "kind",
    "metadata", "contextId", "messageId", "taskId", "role", "state", "history", "_meta",
    A2A_EXTENSION_URI, MCP_META_KEY, "log", "entries", "request", "response", "postData",
    "content", "text", "encoding", "startedDateTime",
]  # fmt: skip
STRINGS = [
    "SendMessage", "message/send", "CancelTask", "tasks/cancel", "tools/call",
    "notifications/cancelled", "message", "task", "status-update", "ROLE_USER", "agent",
    "working", "TASK_STATE_WORKING", "base64", "2026-09-21T14:13:20Z", "aaa.bbb.ccc",
]  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(STRINGS)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)
cbor_values = st.recursive(
    scalars | st.binary(max_size=16),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)
formats = st.sampled_from(
    [None, "application/json", "application/x-ndjson", "application/har+json", "application/cbor"]
)


def check_only_yields(data: bytes, content_type: str | None) -> None:
    stats = ExtractStats()
    found = list(read_capture(data, name="fuzz", content_type=content_type, stats=stats))
    assert all(isinstance(item, Carried | CarrierError) for item in found)
    assert all(isinstance(item.value, dict) for item in found if isinstance(item, Carried))
    assert stats.carried + stats.errors == len(found)
    assert stats.without_handoff <= stats.items


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300), content_type=formats)
def test_random_bytes_only_yield(data: bytes, content_type: str | None) -> None:
    check_only_yields(data, content_type)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(json_values, max_size=4), content_type=formats)
def test_random_json_values_only_yield(values: list[Any], content_type: str | None) -> None:
    as_jsonl = b"\n".join(json.dumps(value).encode() for value in values)
    check_only_yields(as_jsonl, content_type)
    check_only_yields(json.dumps(values).encode(), content_type)
    entries = [
        {
            "startedDateTime": "2026-09-21T14:13:20Z",
            "request": {"postData": {"text": json.dumps(v)}},
        }
        for v in values
    ]
    check_only_yields(json.dumps({"log": {"entries": entries + values}}).encode(), content_type)
    for value in values:
        assert all(isinstance(item, Carried | CarrierError) for item in extract(value, source="v"))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(cbor_values, max_size=4), cut=st.integers(min_value=0, max_value=400))
def test_random_cbor_sequences_only_yield(values: list[Any], cut: int) -> None:
    data = b"".join(cbor2.dumps(value) for value in values)
    check_only_yields(data, "application/cbor")
    check_only_yields(data[:cut], "application/cbor")


def test_task_state_names_match_the_sdks() -> None:
    assert set(pb.TaskState.keys()) == set(carry.TASK_STATES_0_3.values())
    assert {state.value for state in types_v03.TaskState} == set(carry.TASK_STATES_0_3)


def sample_captures() -> list[tuple[bytes, str]]:
    send = rpc_request(
        "SendMessage", pb.SendMessageRequest(message=a2a_message(pb.Role.ROLE_USER, OFFER))
    )
    reply = rpc_result(pb.SendMessageResponse(task=working_task()))
    lines = jsonl([send, {"received_at": T0, "payload": reply}, STATUS])
    entry = har_entry("2026-09-21T14:13:20Z", json.dumps(send), json.dumps(reply))
    har = json.dumps({"log": {"entries": [entry]}})
    record = {"received_at": T0, "payload": {"offer": b"\xd2\x84", "chain": [b"x"]}}
    return [
        (lines, "application/x-ndjson"),
        (har.encode(), "application/har+json"),
        (cbor2.dumps(record) + cbor2.dumps({"status": b"y"}), "application/cbor"),
    ]


SAMPLES = sample_captures()


def test_samples_are_whole() -> None:
    for data, content_type in SAMPLES:
        carried, errors, _ = run(data, content_type=content_type)
        assert len(carried) >= 2 and errors == []


@settings(max_examples=300, deadline=None)
@given(which=st.integers(0, len(SAMPLES) - 1), where=st.integers(0), byte=st.integers(0, 255))
def test_tampered_captures_only_yield(which: int, where: int, byte: int) -> None:
    data, content_type = SAMPLES[which]
    position = where % len(data)
    tampered = data[:position] + bytes([byte]) + data[position + 1 :]
    check_only_yields(tampered, content_type)
    check_only_yields(tampered, None)


# Host text with what ``_storable`` looks for: NUL, surrogates (lone, paired, reversed),
# other non-ASCII characters, and anything else, surrogates included.
_HOST_TEXT = st.lists(
    st.sampled_from(["a", "\x00", "\ud800", "\udbff", "\udc00", "\udfff", "é", "\U0001f600"])
    | st.characters(exclude_categories=()),
    max_size=12,
).map("".join)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_HOST_TEXT)
def test_storable_is_the_character_walk(text: str) -> None:
    # ``_storable`` asks UTF-8 whether the text holds a surrogate; the walk of every
    # character it replaced is the reference.
    walk = not any(c == "\x00" or "\ud800" <= c <= "\udfff" for c in text)
    assert carriers._storable(text) is walk
