"""Real a2a-sdk agents for the live-feed tests: a scripted delegate that signs statuses, the
Starlette app serving it (JSON-RPC 1.0 and 0.3, HTTP+JSON), and a HAR recorder built from
httpx event hooks, so that the very traffic the SDKs exchange can be uploaded afterwards."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format
from handoff_context import Form, Signer, make_status, parse_element, status_object
from handoff_context.a2a import HandoffRequestHandler
from handoff_context.agent import Agent
from starlette.applications import Starlette

from app.capture.carriers import A2A_EXTENSION_URI

Clock = Callable[[], int]


def card(url: str, *, version: str = "1.0") -> AgentCard:
    """An agent card that serves JSON-RPC at ``url`` and HTTP+JSON at ``url``rest."""
    return AgentCard(
        name="delegate",
        description="a scripted delegate",
        version="1",
        default_input_modes=["text"],
        default_output_modes=["text"],
        capabilities=AgentCapabilities(streaming=True),
        skills=[AgentSkill(id="work", name="work", description="work", tags=["work"])],
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version=version),
            AgentInterface(protocol_binding="HTTP+JSON", url=f"{url}rest", protocol_version="1.0"),
        ],
    )


def a2a_app(
    executor: AgentExecutor, agent_card: AgentCard, agent: Agent | None = None
) -> Starlette:
    """The agent's Starlette app; with an ``Agent``, guarded by the handoff integration."""
    handler = (
        DefaultRequestHandler(executor, InMemoryTaskStore(), agent_card)
        if agent is None
        else HandoffRequestHandler(agent, executor, InMemoryTaskStore(), agent_card)
    )
    return Starlette(
        routes=[
            *create_agent_card_routes(agent_card),
            *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True),
            *create_rest_routes(handler, path_prefix="/rest"),
        ]
    )


def offer_of(message: pb.Message | None) -> bytes | None:
    """The compact JWS offer a message carries (profile §9), or None."""
    if message is None or A2A_EXTENSION_URI not in message.metadata:
        return None
    carried = json_format.MessageToDict(message.metadata)[A2A_EXTENSION_URI]
    offer = carried.get("offer") if isinstance(carried, dict) else None
    return offer.encode("ascii") if isinstance(offer, str) else None


class Worker(AgentExecutor):
    """A delegate with no handoff code: the integration around it checks the offer and
    signs the statuses from its task's state changes. Acts as the first word of the text
    says: ``complete``, ``fail``, ``lost`` (working, then input-required: never a final
    word), ``wait`` (working until canceled) or ``crash`` (working, then raises). ``runs``
    counts the executions: a test proves with it that refused work never ran."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.cancels: dict[str, asyncio.Event] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        self.runs.append(context.get_user_input())
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await event_queue.enqueue_event(
            context.current_task or new_task_from_user_message(context.message)
        )
        script = context.get_user_input().split()[0]
        await updater.start_work()
        if script == "complete":
            await updater.complete()
        elif script == "fail":
            await updater.failed()
        elif script == "wait":
            await self.cancels.setdefault(context.task_id, asyncio.Event()).wait()
        elif script == "lost":
            await updater.requires_input()
        elif script == "crash":
            raise RuntimeError("the work crashed")

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()
        self.cancels.setdefault(context.task_id, asyncio.Event()).set()


class Delegate(AgentExecutor):
    """Signs by hand, for the capture tests, which need no checking delegate.
    Answers an offer as the first word of the message's text says: ``complete``, ``fail``,
    ``lost`` (accepted, then never a final word) or ``wait`` (accepted, then waits for a
    cancel; the cancel is reported as the host state CANCELED without echoing a signed
    status)."""

    def __init__(self, signer: Signer, clock: Clock = lambda: int(time.time())) -> None:
        self.signer = signer
        self.clock = clock
        self.cancels: dict[str, asyncio.Event] = {}

    def _message(self, updater: TaskUpdater, offer: bytes | None, state: str) -> pb.Message:
        metadata = None
        if offer is not None:
            status = make_status(self.signer, offer_octets=offer, state=state, iat=self.clock())
            metadata = {A2A_EXTENSION_URI: status_object(status)}
        return updater.new_agent_message(parts=[pb.Part(text=state)], metadata=metadata)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await event_queue.enqueue_event(
            context.current_task or new_task_from_user_message(context.message)
        )
        offer = offer_of(context.message)
        script = context.get_user_input().split()[0]
        await updater.start_work(self._message(updater, offer, "accepted"))
        if script == "complete":
            await updater.complete(self._message(updater, offer, "completed"))
        elif script == "fail":
            await updater.failed(self._message(updater, offer, "failed"))
        elif script == "wait":
            done = self.cancels.setdefault(context.task_id, asyncio.Event())
            await done.wait()
        elif script == "lost":
            await updater.requires_input()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()
        self.cancels.setdefault(context.task_id, asyncio.Event()).set()


def offer_payload_of(offer: bytes) -> Any:
    return parse_element(offer, Form.JWS).payload


class HarRecorder:
    """httpx event hooks that keep every exchange as a HAR 1.2 entry, the response body
    read whole (a stream included), its start time with milliseconds."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._started: dict[int, str] = {}

    @property
    def hooks(self) -> dict[str, list[Any]]:
        return {"request": [self._request], "response": [self._response]}

    async def _request(self, request: httpx.Request) -> None:
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        self._started[id(request)] = now

    async def _response(self, response: httpx.Response) -> None:
        body = await response.aread()
        request = response.request
        media = response.headers.get("content-type", "")
        content: dict[str, Any] = {"mimeType": media, "text": body.decode("utf-8")}
        if not media.startswith(("application/json", "application/a2a+json", "text/")):
            content = {
                "mimeType": media,
                "encoding": "base64",
                "text": base64.b64encode(body).decode(),
            }
        entry: dict[str, Any] = {
            "startedDateTime": self._started.pop(id(request)),
            "request": {"method": request.method, "url": str(request.url)},
            "response": {"status": response.status_code, "content": content},
        }
        if request.content:
            entry["request"]["postData"] = {
                "mimeType": request.headers.get("content-type", ""),
                "text": request.content.decode("utf-8"),
            }
        self.entries.append(entry)

    def har(self) -> dict[str, Any]:
        return {
            "log": {
                "version": "1.2",
                "creator": {"name": "tests", "version": "1"},
                "entries": self.entries,
            }
        }
