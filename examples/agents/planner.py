"""The planner: an a2a-sdk agent that hands the coding to the coder (A2A) and the build to
the tool (MCP), then reports back."""

from __future__ import annotations

import asyncio

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb
from common import CODER, PLANNER, SERVICE, TOKEN, TOOL, TRUST, a2a_app, card, key, serve, url
from handoff_context import Agent, Signer, TrustStore
from handoff_context.a2a import HandoffClient, HandoffRequestHandler
from handoff_context.mcp import HandoffMcpClient
from handoff_context.reporter import Reporter
from mcp.client.client import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

reporter = Reporter(SERVICE, TOKEN, receiver=PLANNER)  # handoff
agent = Agent(Signer.load(key("planner")), TrustStore.load(TRUST), reporter=reporter)  # handoff


class Planner(AgentExecutor):
    def __init__(self) -> None:
        self.cancels: dict[str, asyncio.Event] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await event_queue.enqueue_event(
            context.current_task or new_task_from_user_message(context.message)
        )
        await updater.start_work()
        what = context.get_user_input()
        async with httpx.AsyncClient(timeout=60) as http:
            sdk = ClientFactory(ClientConfig(httpx_client=http)).create(card("coder"))
            coder = HandoffClient(agent, sdk, to=CODER)  # handoff
            ask = pb.Message(
                message_id=context.task_id + "-code",
                context_id=context.context_id,
                role=pb.Role.ROLE_USER,
                parts=[pb.Part(text=what)],
            )
            if what == "wait":  # a long job: delegated, then waits for a cancel
                ask_request = pb.SendMessageRequest(message=ask)
                ask_request.configuration.return_immediately = True
                await coder.delegate(ask_request)
                await self.cancels.setdefault(context.task_id, asyncio.Event()).wait()
                return
            coded = await coder.delegate(pb.SendMessageRequest(message=ask))
        if coded.state is None or coded.state.value != "completed":
            await updater.failed()
            return
        async with (
            httpx.AsyncClient(timeout=60) as http,
            HandoffMcpClient(  # handoff
                agent,
                McpClient(streamable_http_client(url("tool") + "/mcp", http_client=http)),
                to=TOOL,
            ) as tool,
        ):
            await tool.call_tool("build", {"target": "app"})
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()
        self.cancels.setdefault(context.task_id, asyncio.Event()).set()


handler = HandoffRequestHandler(agent, Planner(), InMemoryTaskStore(), card("planner"))  # handoff

if __name__ == "__main__":
    serve(a2a_app(handler, card("planner")), "planner")
