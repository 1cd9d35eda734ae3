"""The real multi-agent system of the live tests, with the real SDKs:

    client --A2A--> planner --A2A--> coder
                       \\---MCP Streamable HTTP---> tool

Each agent signs its own elements. The client runs four scripted tasks against the
planner: ``complete`` (streamed; the planner delegates to the coder and calls the tool, both
complete), ``fail``, ``wait`` (the client cancels; the planner propagates the cancel to the
coder, which cancels its task without echoing a signed element) and ``lost`` (accepted,
then no outcome). Every server listens on loopback under uvicorn.

``Wiring`` says how the traffic reaches the service: ``middleware`` (the library's ASGI tap
on every server, httpx hooks on every client), ``tap`` (``handoff-trace tap`` in front of
every server), or ``har`` (every client's traffic recorded, uploaded afterwards).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
from a2a.client import ClientConfig, ClientFactory
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as pb
from handoff_context import (
    Signer,
    handoff_digest,
    handoff_object,
    make_offer,
    make_status,
    status_object,
    trust_document,
)
from handoff_context.reporter import Reporter
from handoff_context.taps.asgi import HandoffTap
from handoff_context.taps.httpx import async_hooks
from mcp import types as mcp_types
from mcp.client.client import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer

from app.capture.carriers import A2A_EXTENSION_URI, MCP_META_KEY

from .agents import Delegate, HarRecorder, a2a_app, card, offer_of
from .servers import serving, wait_until
from .service import Service, tap

CLIENT = Signer.generate("spiffe://a.example/agent/client", "Ed25519", kid="a1")
PLANNER = Signer.generate("spiffe://b.example/agent/planner", "ES256", kid="b1")
CODER = Signer.generate("spiffe://c.example/agent/coder", "ES256", kid="c1")
TOOL = Signer.generate("spiffe://d.example/tool/builder", "Ed25519", kid="d1")
TRUST = trust_document([CLIENT, PLANNER, CODER, TOOL])
SCRIPTS = ("complete", "fail", "wait", "lost")


def now() -> int:
    return int(time.time())


@dataclass
class Wiring:
    """How one run reaches the service (see the module docstring)."""

    mode: str
    service: Service
    work: Path
    reporters: dict[str, Reporter] = field(default_factory=dict)
    recorder: HarRecorder = field(default_factory=HarRecorder)

    def reporter(self, who: Signer) -> Reporter | None:
        if self.mode != "middleware":
            return None
        if who.iss not in self.reporters:
            self.reporters[who.iss] = Reporter(
                self.service.url, self.service.token, receiver=who.iss, interval=0.05
            )
        return self.reporters[who.iss]

    def server_app(self, app: Any, who: Signer) -> Any:
        reporter = self.reporter(who)
        return app if reporter is None else HandoffTap(app, reporter)

    def hooks(self, who: Signer, to: Signer) -> dict[str, list[Any]]:
        if self.mode == "har":
            return self.recorder.hooks
        reporter = self.reporter(who)
        return {} if reporter is None else async_hooks(reporter, to=to.iss)

    @contextlib.contextmanager
    def front(self, url: str, who: Signer) -> Iterator[str]:
        """The URL others use to reach a server: itself, or a tap in front of it."""
        if self.mode != "tap":
            yield url
            return
        log = self.work / f"tap-{who.iss.rsplit('/', 1)[-1]}.log"
        with tap(url, receiver=who.iss, svc=self.service, log=log) as tapped:
            yield tapped

    def close(self) -> None:
        for reporter in self.reporters.values():
            reporter.close(30)


# --- the tool (MCP) -------------------------------------------------------------------------


def tool_app() -> Any:
    server = MCPServer("builder")

    @server.tool()
    def build(target: str, ctx: Context) -> mcp_types.CallToolResult:
        carried = (ctx.request_context.meta or {}).get(MCP_META_KEY) or {}
        offer = carried["offer"].encode("ascii")
        done = make_status(TOOL, offer_octets=offer, state="completed", iat=now())
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=f"built {target}")],
            _meta={MCP_META_KEY: status_object(done)},
        )

    return server.streamable_http_app()


# --- the planner (A2A server and client) ----------------------------------------------------


def a2a_message(text: str, context: str, carried: dict[str, Any] | None) -> pb.Message:
    message = pb.Message(
        message_id=f"m-{text}-{time.monotonic_ns()}",
        context_id=context,
        role=pb.Role.ROLE_USER,
        parts=[pb.Part(text=text)],
    )
    if carried is not None:
        message.extensions.append(A2A_EXTENSION_URI)
        message.metadata.update({A2A_EXTENSION_URI: carried})
    return message


class Planner(AgentExecutor):
    """Accepts the client's offer and acts on the script (see the module docstring)."""

    def __init__(self, wiring: Wiring) -> None:
        self.wiring = wiring
        self.coder_url = ""
        self.tool_url = ""
        self.waiting: dict[str, tuple[str, bytes]] = {}  # task -> (coder task, offer to it)
        self.cancels: dict[str, asyncio.Event] = {}

    def _status(self, updater: TaskUpdater, offer: bytes, state: str) -> pb.Message:
        status = make_status(PLANNER, offer_octets=offer, state=state, iat=now())
        metadata = {A2A_EXTENSION_URI: status_object(status)}
        return updater.new_agent_message(parts=[pb.Part(text=state)], metadata=metadata)

    def _delegation(self, upstream: bytes, to: Signer, dialog: str) -> tuple[bytes, dict[str, Any]]:
        offer = make_offer(
            PLANNER, aud=to.iss, dialog=dialog, iat=now(), prev=handoff_digest(upstream)
        )
        return offer, handoff_object(offer, [upstream])

    async def _ask_coder(self, upstream: bytes, script: str, dialog: str) -> tuple[str, bytes]:
        offer, carried = self._delegation(upstream, CODER, dialog)
        hooks = self.wiring.hooks(PLANNER, CODER)
        async with httpx.AsyncClient(event_hooks=hooks, timeout=30) as http:
            streaming = script == "complete"
            config = ClientConfig(httpx_client=http, streaming=streaming)
            client = ClientFactory(config).create(card(self.coder_url + "/"))
            request = pb.SendMessageRequest(message=a2a_message(script, dialog, carried))
            if not streaming:
                request.configuration.return_immediately = True
            task_id = ""
            async for event in client.send_message(request):
                task_id = event.task.id or event.status_update.task_id or task_id
            return task_id, offer

    async def _call_tool(self, upstream: bytes) -> None:
        _, carried = self._delegation(upstream, TOOL, "tool-dialog")
        hooks = self.wiring.hooks(PLANNER, TOOL)
        async with httpx2.AsyncClient(event_hooks=hooks, timeout=30) as http:
            transport = streamable_http_client(self.tool_url + "/mcp", http_client=http)
            async with McpClient(transport, mode="legacy") as client:
                await client.call_tool("build", {"target": "x"}, meta={MCP_META_KEY: carried})

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        from a2a.helpers.proto_helpers import new_task_from_user_message

        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await event_queue.enqueue_event(
            context.current_task or new_task_from_user_message(context.message)
        )
        offer = offer_of(context.message)
        assert offer is not None
        script = context.get_user_input().split()[0]
        if script == "wait":  # delegate first, so that a cancel finds what to propagate to
            self.waiting[context.task_id] = await self._ask_coder(offer, "wait", context.context_id)
        await updater.start_work(self._status(updater, offer, "accepted"))
        if script == "complete":
            await self._ask_coder(offer, "complete", context.context_id)
            await self._call_tool(offer)
            await updater.complete(self._status(updater, offer, "completed"))
        elif script == "fail":
            await updater.failed(self._status(updater, offer, "failed"))
        elif script == "wait":
            await self.cancels.setdefault(context.task_id, asyncio.Event()).wait()
        elif script == "lost":
            await updater.requires_input()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        coder_task, offer = self.waiting[context.task_id]
        # Profile §8: a delegate that receives a valid canceled cancels what it issued below.
        canceled = make_status(PLANNER, offer_octets=offer, state="canceled", iat=now())
        hooks = self.wiring.hooks(PLANNER, CODER)
        async with httpx.AsyncClient(event_hooks=hooks, timeout=30) as http:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(
                card(self.coder_url + "/")
            )
            request = pb.CancelTaskRequest(id=coder_task)
            request.metadata.update({A2A_EXTENSION_URI: status_object(canceled)})
            await client.cancel_task(request)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()
        self.cancels.setdefault(context.task_id, asyncio.Event()).set()


# --- the client and the run -----------------------------------------------------------------


async def _client_run(wiring: Wiring, planner_url: str) -> dict[str, bytes]:
    offers: dict[str, bytes] = {}
    hooks = wiring.hooks(CLIENT, PLANNER)
    async with httpx.AsyncClient(event_hooks=hooks, timeout=60) as http:
        for script in SCRIPTS:
            dialog = f"dialog-{script}"
            offer = make_offer(CLIENT, aud=PLANNER.iss, dialog=dialog, iat=now())
            offers[script] = offer
            # Streamed where the accepted status would otherwise ride only in the final
            # task's history (which is not a carrying place): a task that ends working.
            streaming = script in ("complete", "lost")
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(
                card(planner_url + "/")
            )
            request = pb.SendMessageRequest(
                message=a2a_message(script, dialog, handoff_object(offer))
            )
            if script == "wait":
                request.configuration.return_immediately = True
            task_id = ""
            async for event in client.send_message(request):
                task_id = event.task.id or event.status_update.task_id or task_id
            if script == "wait":
                await _cancel_when_working(client, task_id, offer)
    return offers


async def _cancel_when_working(client: Any, task_id: str, offer: bytes) -> None:
    # The planner answers at once; it accepts once it has delegated. Poll the task (the
    # protocol's own way to ask) until it is working, then cancel with a signed canceled.
    for _ in range(600):
        task = await client.get_task(pb.GetTaskRequest(id=task_id))
        if task.status.state == pb.TaskState.TASK_STATE_WORKING:
            break
        await asyncio.sleep(0.05)
    canceled = make_status(CLIENT, offer_octets=offer, state="canceled", iat=now())
    request = pb.CancelTaskRequest(id=task_id)
    request.metadata.update({A2A_EXTENSION_URI: status_object(canceled)})
    await client.cancel_task(request)


def run_system(wiring: Wiring) -> dict[str, bytes]:
    """Run the four scripts once through real servers; returns the client's offers."""
    planner = Planner(wiring)
    coder = Delegate(CODER, now)
    with (
        serving(wiring.server_app(tool_app(), TOOL), lifespan="on") as tool_url,
        wiring.front(tool_url, TOOL) as tool_front,
        serving(wiring.server_app(a2a_app(coder, card("http://coder/")), CODER)) as coder_url,
        wiring.front(coder_url, CODER) as coder_front,
        serving(wiring.server_app(a2a_app(planner, card("http://planner/")), PLANNER)) as p_url,
        wiring.front(p_url, PLANNER) as planner_front,
    ):
        planner.tool_url, planner.coder_url = tool_front, coder_front
        offers = asyncio.run(_client_run(wiring, planner_front))
    wiring.close()
    return offers


def settled(service: Service, expected: int) -> list[dict[str, Any]]:
    """The hops once every one of ``expected`` reached a state other than offered and the
    lost one shows its flag (polled: the service is live, not a fixed wait)."""
    answer: list[dict[str, Any]] = []

    def done() -> bool:
        nonlocal answer
        answer = service.hops()
        states = [h["state"] for h in answer]
        return (
            len(answer) == expected
            and "offered" not in states
            and any("lost-outcome" in h["flags"] for h in answer)
        )

    wait_until(done, what=lambda: f"every hop settled ({shape(answer)})", timeout=60, interval=0.25)
    return answer


def shape(hops: list[dict[str, Any]]) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """What must be equal across wirings: who, state and flags of every hop."""
    return sorted((h["iss"], h["aud"], h["state"], tuple(sorted(h["flags"]))) for h in hops)
