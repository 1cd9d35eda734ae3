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
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as pb
from handoff_context import FileState, Signer, TrustStore, trust_document
from handoff_context.a2a import HandoffClient
from handoff_context.agent import Agent, Delegation
from handoff_context.mcp import HandoffMcpClient, HandoffMiddleware
from handoff_context.reporter import Reporter
from handoff_context.taps.asgi import HandoffTap
from handoff_context.taps.httpx import async_hooks
from mcp.client.client import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer

from .agents import HarRecorder, Worker, a2a_app, card
from .servers import serving, wait_until
from .service import Service, tap

CLIENT = Signer.generate("spiffe://a.example/agent/client", "Ed25519", kid="a1")
PLANNER = Signer.generate("spiffe://b.example/agent/planner", "ES256", kid="b1")
CODER = Signer.generate("spiffe://c.example/agent/coder", "ES256", kid="c1")
TOOL = Signer.generate("spiffe://d.example/tool/builder", "Ed25519", kid="d1")
# The coder's own delegate, in the sidecar egress test (tests/live/test_tap_enforce.py).
TESTER = Signer.generate("spiffe://e.example/agent/tester", "Ed25519", kid="e1")
TRUST = trust_document([CLIENT, PLANNER, CODER, TOOL, TESTER])
TRUST_STORE = TrustStore.from_mapping(TRUST)
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
    states: list[FileState] = field(default_factory=list)

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
        for state in self.states:
            state.close()


# --- the agents' handoff side: the integrations (enforce) --------------------------------


def make_agent(who: Signer, wiring: Wiring, **options: Any) -> Agent:
    """``who``'s handoff side: its signer, the trust configuration and a replay memory that
    survives a restart (a file in the run's folder)."""
    state = FileState(wiring.work / f"{who.iss.rsplit('/', 1)[-1]}.state")
    wiring.states.append(state)
    return Agent(who, TRUST_STORE, state=state, clock=now, **options)


# --- the tool (MCP) -------------------------------------------------------------------------


def tool_app(agent: Agent) -> Any:
    server = MCPServer("builder", middleware=[HandoffMiddleware(agent)])

    @server.tool()
    def build(target: str) -> str:
        return f"built {target}"

    return server.streamable_http_app()


# --- the planner (A2A server and client) ----------------------------------------------------


def a2a_message(text: str, context: str) -> pb.Message:
    return pb.Message(
        message_id=f"m-{text}-{time.monotonic_ns()}",
        context_id=context,
        role=pb.Role.ROLE_USER,
        parts=[pb.Part(text=text)],
    )


class Planner(AgentExecutor):
    """Acts on the script (see the module docstring). No handoff code: the integration
    checks the client's offer, signs its statuses, continues the handoff in its
    delegations and propagates a cancel."""

    def __init__(self, agent: Agent, wiring: Wiring) -> None:
        self.agent = agent
        self.wiring = wiring
        self.coder_url = ""
        self.tool_url = ""
        self.cancels: dict[str, asyncio.Event] = {}

    @contextlib.asynccontextmanager
    async def _coder(self, *, streaming: bool) -> AsyncIterator[HandoffClient]:
        hooks = self.wiring.hooks(PLANNER, CODER)
        async with httpx.AsyncClient(event_hooks=hooks, timeout=30) as http:
            config = ClientConfig(httpx_client=http, streaming=streaming)
            client = ClientFactory(config).create(card(self.coder_url + "/"))
            yield HandoffClient(self.agent, client, to=CODER.iss)

    async def _call_tool(self) -> None:
        hooks = self.wiring.hooks(PLANNER, TOOL)
        async with httpx2.AsyncClient(event_hooks=hooks, timeout=30) as http:
            transport = streamable_http_client(self.tool_url + "/mcp", http_client=http)
            async with HandoffMcpClient(
                self.agent, McpClient(transport, mode="legacy"), to=TOOL.iss
            ) as tool:
                await tool.call_tool("build", {"target": "x"})

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await event_queue.enqueue_event(
            context.current_task or new_task_from_user_message(context.message)
        )
        script = context.get_user_input().split()[0]
        if script == "wait":  # delegate first, so that a cancel finds what to propagate to
            async with self._coder(streaming=False) as coder:
                request = pb.SendMessageRequest(message=a2a_message("wait", context.context_id))
                request.configuration.return_immediately = True
                await coder.delegate(request)
                await updater.start_work()
                await self.cancels.setdefault(context.task_id, asyncio.Event()).wait()
            return
        await updater.start_work()
        if script == "complete":
            async with self._coder(streaming=True) as coder:
                await coder.delegate(
                    pb.SendMessageRequest(message=a2a_message("complete", context.context_id))
                )
            await self._call_tool()
            await updater.complete()
        elif script == "fail":
            await updater.failed()
        elif script == "lost":
            await updater.requires_input()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()
        self.cancels.setdefault(context.task_id, asyncio.Event()).set()


# --- the client and the run -----------------------------------------------------------------


async def _client_run(wiring: Wiring, planner_url: str) -> dict[str, Delegation]:
    agent = make_agent(CLIENT, wiring)
    delegations: dict[str, Delegation] = {}
    hooks = wiring.hooks(CLIENT, PLANNER)
    async with httpx.AsyncClient(event_hooks=hooks, timeout=60) as http:
        for script in SCRIPTS:
            # Streamed where the accepted status would otherwise ride only in the final
            # task's history (which is not a carrying place): a task that ends working.
            streaming = script in ("complete", "lost")
            client = HandoffClient(
                agent,
                ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(
                    card(planner_url + "/")
                ),
                to=PLANNER.iss,
            )
            request = pb.SendMessageRequest(message=a2a_message(script, f"dialog-{script}"))
            if script == "wait":
                request.configuration.return_immediately = True
            delegations[script] = await client.delegate(request)
            if script == "wait":
                await _cancel_when_working(client)
    return delegations


async def _cancel_when_working(client: HandoffClient) -> None:
    # The planner answers at once; it accepts once it has delegated. Poll the task (the
    # protocol's own way to ask) until it is working, then cancel with a signed canceled.
    assert client.last is not None and client.last.task_id
    for _ in range(600):
        task = await client.get_task(pb.GetTaskRequest(id=client.last.task_id))
        if task.status.state == pb.TaskState.TASK_STATE_WORKING:
            break
        await asyncio.sleep(0.05)
    await client.cancel()


def run_system(wiring: Wiring) -> dict[str, Delegation]:
    """Run the four scripts once through real servers; returns the client's delegations."""
    planner = Planner(make_agent(PLANNER, wiring), wiring)
    coder = a2a_app(Worker(), card("http://coder/"), make_agent(CODER, wiring))
    with (
        serving(wiring.server_app(tool_app(make_agent(TOOL, wiring)), TOOL), lifespan="on") as t,
        wiring.front(t, TOOL) as tool_front,
        serving(wiring.server_app(coder, CODER)) as coder_url,
        wiring.front(coder_url, CODER) as coder_front,
        serving(
            wiring.server_app(a2a_app(planner, card("http://planner/"), planner.agent), PLANNER)
        ) as p_url,
        wiring.front(p_url, PLANNER) as planner_front,
    ):
        planner.tool_url, planner.coder_url = tool_front, coder_front
        delegations = asyncio.run(_client_run(wiring, planner_front))
    wiring.close()
    return delegations


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
