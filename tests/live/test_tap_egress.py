"""The sidecar's egress (``handoff-trace tap --egress-listen``, issue 22 item 3) and the MCP
cancel check of ``--enforce``, case by case, with the sidecar's own objects in process
(``Enforcer``, ``Egress``, ``Listeners`` on one uvicorn server with two sockets, as
``cmd_tap`` builds them) between real a2a-sdk and mcp servers and clients. The whole
command, with a real service, is tests/live/test_tap_enforce.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from handoff_context import (
    FileState,
    Form,
    InMemoryState,
    Policy,
    StatusState,
    continue_handoff,
    handoff_object,
    make_offer,
    make_status,
    parse_element,
    status_object,
)
from handoff_context.a2a import HandoffClient
from handoff_context.agent import Agent
from handoff_context.mcp import HandoffMiddleware
from mcp.server.mcpserver import MCPServer

from app.capture.carriers import A2A_EXTENSION_URI, MCP_META_KEY
from app.cli.egress import Delegate, Egress
from app.cli.enforce import Enforcer
from app.cli.tap import Listeners, forwarding_app, upstream_client

from .agents import Worker, a2a_app, card, offer_of
from .hostile import hostile_offers, message
from .servers import free_ports, serving, serving_twice, wait_until
from .system import CLIENT, CODER, PLANNER, TESTER, TOOL, TRUST_STORE
from .test_enforce import (
    MCP_HEADERS,
    a2a_sender,
    check_rejected,
    forged_cancel,
    mcp_session,
    rpc,
    send,
)
from .test_tap_enforce import coder_states, planner_client


@dataclass
class Sidecar:
    """The coder's sidecar: its ingress URL, its egress proxy and what its agent judged."""

    ingress: str
    proxy: str
    verdicts: list[Any] = field(default_factory=list)


class Recording(Worker):
    """The tester's executor: as ``Worker``, and it keeps the offer each run came with."""

    def __init__(self) -> None:
        super().__init__()
        self.offers: list[Any] = []

    async def execute(self, context: Any, event_queue: Any) -> None:
        offer = offer_of(context.message)
        self.offers.append(None if offer is None else parse_element(offer, Form.JWS).payload)
        await super().execute(context, event_queue)


@dataclass
class Downstream:
    """The coder's delegate, with the in-process integration (``HandoffRequestHandler``):
    a chain of at most two offers (planner -> coder -> tester)."""

    url: str
    worker: Recording
    verdicts: list[Any]

    def offers(self) -> list[Any]:
        return [v for v in self.verdicts if v.element == "offer"]


@contextlib.contextmanager
def delegate_tester() -> Iterator[Downstream]:
    verdicts: list[Any] = []
    agent = Agent(
        TESTER,
        TRUST_STORE,
        state=InMemoryState(),
        policy=Policy(max_chain=2),
        on_verdict=verdicts.append,
    )
    worker = Recording()
    with serving(a2a_app(worker, card("http://tester/"), agent)) as url:
        yield Downstream(url, worker, verdicts)


@contextlib.contextmanager
def sidecar(
    upstream_app: Any, *delegates: Delegate, untied: str = "refuse", state: Any = None
) -> Iterator[Sidecar]:
    """The coder (``upstream_app``, no handoff code) behind its sidecar, built as
    ``handoff-trace tap --enforce --key-file --egress-listen`` builds it (``state``: its
    state file; by default a memory of this sidecar's only)."""
    verdicts: list[Any] = []
    state = InMemoryState() if state is None else state
    agent = Agent(CODER, TRUST_STORE, state=state, on_verdict=verdicts.append)
    client = upstream_client(30.0)  # closed by the ingress side's lifespan
    with serving(upstream_app, lifespan="on") as upstream:
        enforcer = Enforcer(forwarding_app(upstream, client), agent)
        egress = Egress(
            enforcer,
            delegates,
            lambda origin: forwarding_app(origin, client),
            untied=untied,
            client=client,
        )
        first, second = free_ports(2)  # distinct: the two listeners of one server
        ports = (first, second)
        app = Listeners(enforcer, egress, ("127.0.0.1", ports[1]))
        with serving_twice(app, ports) as (ingress, proxy):
            yield Sidecar(ingress, proxy, verdicts)


@contextlib.asynccontextmanager
async def through(proxy: str, to: str, *, binding: str = "JSONRPC", **headers: str) -> Any:
    """A plain a2a-sdk client (the coder's, no handoff code) that reaches ``to`` through
    the egress proxy, over ``binding`` (``JSONRPC`` or ``HTTP+JSON``)."""
    from a2a.client import ClientConfig, ClientFactory

    async with httpx.AsyncClient(proxy=proxy, headers=headers, timeout=30) as http:
        config = ClientConfig(
            httpx_client=http, streaming=False, supported_protocol_bindings=[binding]
        )
        yield ClientFactory(config).create(card(to + "/"))


async def working(ingress: str, dialog: str, carried: dict[str, Any] | None = None) -> str:
    """A task the coder takes on (it stops at input-required, its offer still live); with
    ``carried``, that handoff, else the planner's own. Returns the task id."""
    if carried is not None:
        async with a2a_sender(ingress) as client:
            events = await send(client, message("lost", dialog, carried))
        return str(events[-1].task.id)
    async with planner_client(ingress, streaming=False) as planner:
        delegation = await planner.delegate(
            pb.SendMessageRequest(message=message("lost", dialog, None))
        )
    assert delegation.task_id
    return delegation.task_id


def prev_of(payload: Any, offers: dict[str, bytes | None]) -> str | None:
    """Which of ``offers`` (digests, by name) the offer ``payload`` continues (its prev)."""
    return next((n for n, digest in offers.items() if digest == payload.prev), None)


def test_only_the_delegates_are_reached() -> None:
    with (
        delegate_tester() as t,
        sidecar(a2a_app(Worker(), card("http://coder/")), Delegate(TESTER.iss, t.url)) as s,
    ):
        with httpx.Client(proxy=s.proxy, timeout=30) as http:
            # Another host: nothing is fetched for it.
            other = http.get("http://127.0.0.1:1/.well-known/agent-card.json")
            assert other.status_code == 403 and "--delegate" in other.json()["detail"]
            # The delegate itself: passed through unchanged (its agent card).
            assert http.get(t.url + "/.well-known/agent-card.json").json()["name"] == "delegate"
        # A direct request that names no delegate in Host.
        assert httpx.get(s.proxy + "/", timeout=30).status_code == 403
        # A tunnel cannot be read, nor signed: refused.
        with httpx.Client(proxy=s.proxy, timeout=30) as http, pytest.raises(httpx.ProxyError):
            http.get("https://127.0.0.1:1/")
    assert t.worker.runs == []


def test_a_call_continues_the_handoff_it_names_and_no_other() -> None:
    """Two tasks of one dialog are live at the coder: a call naming only the dialog is
    ambiguous and refused; one naming a task (referenceTaskIds, or the Handoff-Context
    header) continues that task's offer; a call in another dialog is refused (untied).
    A cancel of a delegation gets the coder's signed canceled from the sidecar."""
    with (
        delegate_tester() as t,
        sidecar(a2a_app(Worker(), card("http://coder/")), Delegate(TESTER.iss, t.url)) as s,
    ):

        async def scenario() -> None:
            # A turn of the dialog that ended does not count: then two that go on do.
            async with planner_client(s.ingress, streaming=False) as planner:
                await planner.delegate(
                    pb.SendMessageRequest(message=message("complete", "two", None))
                )
            first = await working(s.ingress, "two")
            async with through(s.proxy, t.url) as client:
                events = await send(client, message("complete", "two", None))
                assert events[-1].task.status.state == pb.TaskState.TASK_STATE_COMPLETED
            second = await working(s.ingress, "two")
            async with through(s.proxy, t.url) as client:
                with pytest.raises(InvalidParamsError) as refused:
                    await send(client, message("complete", "two", None))
                assert "holds 2 handoffs" in str((refused.value.data or {})["detail"])
                named = message("complete", "two", None)
                named.reference_task_ids.append(first)
                events = await send(client, named)
                assert events[-1].task.status.state == pb.TaskState.TASK_STATE_COMPLETED
                with pytest.raises(InvalidParamsError) as refused:
                    await send(client, message("complete", "elsewhere", None))
                assert (refused.value.data or {})["reason"] == "policy"
            async with through(s.proxy, t.url, **{"Handoff-Context": second}) as client:
                events = await send(client, message("wait", "two", None), immediately=True)
                task_id = events[-1].task.id
                await asyncio.to_thread(
                    wait_until, lambda: t.worker.runs[-1:] == ["wait"], what="the wait task"
                )
                # The coder cancels as any A2A client does; the sidecar signs the canceled
                # the tester's integration requires.
                task = await client.cancel_task(pb.CancelTaskRequest(id=task_id))
                assert task.status.state == pb.TaskState.TASK_STATE_CANCELED
            return first, second

        asyncio.run(scenario())
    taken = [v for v in s.verdicts if v.element == "offer"]  # the three the coder took on
    assert [v.outcome.value for v in taken] == ["accept"] * 3
    by_name = {"ended": taken[0].digest, "first": taken[1].digest, "second": taken[2].digest}
    assert [v.outcome.value for v in t.offers()] == ["accept"] * 3
    # Each continues the offer of the task its call named (or the one going on), in the
    # dialog of all.
    assert [(prev_of(o, by_name), o.iss, o.dialog) for o in t.worker.offers] == [
        ("first", CODER.iss, "two"),
        ("first", CODER.iss, "two"),
        ("second", CODER.iss, "two"),
    ]
    assert t.worker.runs == ["complete", "complete", "wait"]
    cancel = [v for v in t.verdicts if v.source == "cancel"]
    assert [(v.outcome.value, v.iss) for v in cancel] == [("accept", CODER.iss)]


def test_an_untied_call_starts_a_new_dialog_with_the_flag() -> None:
    with (
        delegate_tester() as t,
        sidecar(
            a2a_app(Worker(), card("http://coder/")),
            Delegate(TESTER.iss, t.url),
            untied="new-dialog",
        ) as s,
    ):

        async def scenario() -> None:
            async with through(s.proxy, t.url) as client:
                events = await send(client, message("complete", "fresh", None))
                assert events[-1].task.status.state == pb.TaskState.TASK_STATE_COMPLETED

        asyncio.run(scenario())
    (judged,) = t.offers()
    assert judged.outcome.value == "accept"
    (offer,) = t.worker.offers
    assert (offer.iss, offer.dialog, offer.prev) == (CODER.iss, "fresh", None)


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
def test_a_chain_too_deep_for_the_delegate_is_refused_there_and_checked(binding: str) -> None:
    """The coder took on a handoff with a chain (client -> planner -> coder); its
    delegation would make the chain three offers long, one more than the tester takes:
    the tester refuses it (too-deep) with a signed rejected, which the sidecar checks.
    Before it, a delegation of the coder's other task is accepted. Both A2A bindings."""
    now = int(time.time())
    root = make_offer(CLIENT, aud=PLANNER.iss, dialog="deep", iat=now)
    carried = continue_handoff(PLANNER, handoff_object(root), aud=CODER.iss, iat=now)
    with (
        delegate_tester() as t,
        sidecar(a2a_app(Worker(), card("http://coder/")), Delegate(TESTER.iss, t.url)) as s,
    ):

        async def scenario() -> Any:
            await working(s.ingress, "shallow")
            await working(s.ingress, "deep", carried)
            async with through(s.proxy, t.url, binding=binding) as client:
                events = await send(client, message("complete", "shallow", None))
                assert events[-1].task.status.state == pb.TaskState.TASK_STATE_COMPLETED
                with pytest.raises(InvalidParamsError) as refused:
                    await send(client, message("complete", "deep", None))
            return refused.value.data

        data = asyncio.run(scenario())
    assert data["reason"] == "too-deep"
    rejected = parse_element(data["status"].encode("ascii"), Form.JWS).payload
    assert (rejected.iss, rejected.state) == (TESTER.iss, StatusState.REJECTED)
    # The tester's completed for the shallow one, then its rejected: both checked.
    statuses = [(v.outcome.value, v.iss, v.state) for v in s.verdicts if v.element == "status"]
    assert statuses == [
        ("accept", TESTER.iss, StatusState.COMPLETED),
        ("accept", TESTER.iss, StatusState.REJECTED),
    ]
    assert t.worker.runs == ["complete"]
    assert [(o.iss, o.dialog) for o in t.worker.offers] == [(CODER.iss, "shallow")]


# --- the MCP cancel through --enforce (issue 22, item 2 leftover) -------------------------


class HoldingTool:
    """An mcp tool that works until it is cancelled; ``cancels`` counts the cancel
    notifications that reach it. No handoff code, or (``agent``) the mcp integration."""

    def __init__(self, agent: Agent | None = None) -> None:
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.cancels = 0
        middleware = [] if agent is None else [HandoffMiddleware(agent)]
        server = MCPServer("holder", middleware=middleware)

        @server.tool()
        async def hold(target: str) -> str:
            self.started.append(target)
            try:
                await anyio.sleep(60)
            except anyio.get_cancelled_exc_class():
                self.cancelled.append(target)
                raise
            return "done"

        inner = server.streamable_http_app()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return
            body = b""

            async def counting() -> Any:
                nonlocal body
                message = await receive()
                body += message.get("body", b"")
                if b"notifications/cancelled" in body and not message.get("more_body"):
                    self.cancels += 1
                return message

            await inner(scope, counting, send)

        self.app = app


def test_a_forged_mcp_cancel_never_reaches_the_tool() -> None:
    tool = HoldingTool()
    now = int(time.time())
    offer = make_offer(PLANNER, aud=TOOL.iss, dialog="tap-mcp-cancel", iat=now)
    forged = forged_cancel(offer, by=CODER, iat=now)
    real = make_status(PLANNER, offer_octets=offer, state="canceled", iat=now)
    agent = Agent(TOOL, TRUST_STORE, state=InMemoryState())
    client = upstream_client(30.0)

    async def session(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            headers = await mcp_session(http, "planner")
            params = {"name": "hold", "arguments": {"target": "1"}}
            params["_meta"] = {MCP_META_KEY: handoff_object(offer)}
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
            pending = asyncio.create_task(rpc(http, headers, call))
            await asyncio.to_thread(wait_until, lambda: tool.started == ["1"], what="the tool")

            def cancel(status: bytes | None) -> dict[str, Any]:
                note: dict[str, Any] = {"requestId": 1}
                if status is not None:
                    note["_meta"] = {MCP_META_KEY: status_object(status)}
                return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": note}

            for bad in (forged, None):
                refused = await rpc(http, headers, cancel(bad))
                assert refused.status_code == 400, refused.text
                assert refused.json()["error"]["data"]["reason"] == "policy"
            assert (await rpc(http, headers, cancel(real))).status_code == 202
            await pending

    with (
        serving(tool.app, lifespan="on") as upstream,
        serving(Enforcer(forwarding_app(upstream, client), agent), lifespan="on") as url,
    ):
        asyncio.run(session(url))
    assert tool.cancels == 1  # only the delegator's own cancel reached the tool
    assert tool.cancelled == ["1"]


# --- the HTTP+JSON binding through --enforce (issue 22, item 2 leftover) --------------------


@contextlib.asynccontextmanager
async def rest_client(url: str) -> Any:
    """A plain a2a-sdk client speaking the HTTP+JSON binding (the card's second interface)."""
    from a2a.client import ClientConfig, ClientFactory

    async with httpx.AsyncClient(timeout=30) as http:
        config = ClientConfig(
            httpx_client=http, streaming=False, supported_protocol_bindings=["HTTP+JSON"]
        )
        yield ClientFactory(config).create(card(url + "/"))


def test_http_json_sends_and_cancels_are_checked_like_json_rpc() -> None:
    worker = Worker()
    now = int(time.time())
    hostile = hostile_offers(CODER, now=now, tag="rest")
    waiting = make_offer(PLANNER, aud=CODER.iss, dialog="rest-cancel", iat=now)

    async def scenario(url: str) -> None:
        async with rest_client(url) as client:
            for h in hostile:
                with pytest.raises(InvalidParamsError) as refused:
                    await send(client, message("complete", h.dialog, h.carried))
                data = refused.value.data or {}
                assert data["reason"] == h.reason, (h.name, data)
                if h.signed:
                    check_rejected(
                        data["status"], offer=str(h.carried["offer"]).encode(), reason=h.reason
                    )
            planner = HandoffClient(
                Agent(PLANNER, TRUST_STORE, state=InMemoryState()), client, to=CODER.iss
            )
            delegation = await planner.delegate(
                pb.SendMessageRequest(message=message("complete", "rest-good", None))
            )
            assert delegation.state is StatusState.COMPLETED
            assert coder_states(delegation.statuses) == [StatusState.COMPLETED]
            # A cancel needs the delegator's signed canceled here too.
            events = await send(
                client, message("wait", "rest-cancel", handoff_object(waiting)), immediately=True
            )
            task_id = events[-1].task.id
            await asyncio.to_thread(
                wait_until, lambda: worker.runs[-1:] == ["wait"], what="the wait task"
            )
            forged = pb.CancelTaskRequest(id=task_id)
            forged.metadata.update(
                {A2A_EXTENSION_URI: status_object(forged_cancel(waiting, by=TOOL, iat=now))}
            )
            with pytest.raises(InvalidParamsError) as refused:
                await client.cancel_task(forged)
            assert (refused.value.data or {})["reason"] == "policy"
            assert not worker.cancels[task_id].is_set()
            real = pb.CancelTaskRequest(id=task_id)
            canceled = make_status(PLANNER, offer_octets=waiting, state="canceled", iat=now)
            real.metadata.update({A2A_EXTENSION_URI: status_object(canceled)})
            task = await client.cancel_task(real)
            assert task.status.state == pb.TaskState.TASK_STATE_CANCELED

    with sidecar(a2a_app(worker, card("http://coder/"))) as s:
        asyncio.run(scenario(s.ingress))
    assert worker.runs == ["complete", "wait"]  # the hostile offers never reached the coder


def test_the_sidecar_signs_the_cancel_of_its_mcp_call() -> None:
    """A tool call the sidecar signed (tied by the Handoff-Context header), cancelled by
    the coder as any MCP client cancels (``notifications/cancelled``, no handoff code): the
    sidecar puts the coder's signed canceled in, which the tool's integration accepts."""
    verdicts: list[Any] = []
    tool = HoldingTool(Agent(TOOL, TRUST_STORE, state=InMemoryState(), on_verdict=verdicts.append))

    async def scenario(ingress: str, proxy: str, tool_url: str) -> None:
        task_id = await working(ingress, "mcp-out")
        headers = {**MCP_HEADERS, "Handoff-Context": task_id}
        async with httpx.AsyncClient(proxy=proxy, base_url=tool_url, timeout=30) as http:
            hello = {"protocolVersion": "2025-11-25", "capabilities": {}}
            hello["clientInfo"] = {"name": "coder", "version": "1"}
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
            answer = await rpc(http, headers, init)
            headers["mcp-session-id"] = answer.headers["mcp-session-id"]
            headers["mcp-protocol-version"] = "2025-11-25"
            await rpc(http, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            params = {"name": "hold", "arguments": {"target": "1"}}
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
            pending = asyncio.create_task(rpc(http, headers, call))
            await asyncio.to_thread(wait_until, lambda: tool.started == ["1"], what="the tool")
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
            cancel["params"] = {"requestId": 1}
            assert (await rpc(http, headers, cancel)).status_code == 202
            await pending

    with (
        serving(tool.app, lifespan="on") as tool_url,
        sidecar(a2a_app(Worker(), card("http://coder/")), Delegate(TOOL.iss, tool_url)) as s,
    ):
        asyncio.run(scenario(s.ingress, s.proxy, tool_url))
    judged = [(v.source, v.element, v.outcome.value, v.iss) for v in verdicts]
    assert judged == [
        ("mcp", "offer", "accept", CODER.iss),
        ("cancel", "status", "accept", CODER.iss),
    ]
    assert tool.cancelled == ["1"]


def test_a_cancel_of_the_coders_task_reaches_what_it_delegated() -> None:
    """The planner cancels the coder's task (its signed canceled): the sidecar cancels
    what the task delegated through it first, with the coder's signed canceled (profile §8
    propagation, as the in-process integration does), then the task. The coder's own
    cancel of the same delegation after it carries the same canceled, not a second one."""
    now = int(time.time())
    offer = make_offer(PLANNER, aud=CODER.iss, dialog="propagate", iat=now)
    canceled = make_status(PLANNER, offer_octets=offer, state="canceled", iat=now)
    coder = Worker()
    with (
        delegate_tester() as t,
        sidecar(a2a_app(coder, card("http://coder/")), Delegate(TESTER.iss, t.url)) as s,
    ):

        async def scenario() -> Any:
            async with a2a_sender(s.ingress) as planner:
                events = await send(
                    planner, message("wait", "propagate", handoff_object(offer)), immediately=True
                )
                task_id = events[-1].task.id
                async with through(s.proxy, t.url) as client:
                    events = await send(
                        client, message("wait", "propagate", None), immediately=True
                    )
                    below = events[-1].task.id
                    await asyncio.to_thread(
                        wait_until, lambda: below in t.worker.cancels, what="the tester's task"
                    )
                    cancel = pb.CancelTaskRequest(id=task_id)
                    cancel.metadata.update({A2A_EXTENSION_URI: status_object(canceled)})
                    task = await planner.cancel_task(cancel)
                    assert task.status.state == pb.TaskState.TASK_STATE_CANCELED
                    assert t.worker.cancels[below].is_set()
                    # The coder cancels its delegation too, as a careful agent does.
                    with contextlib.suppress(Exception):  # the task is canceled already
                        await client.cancel_task(pb.CancelTaskRequest(id=below))

        asyncio.run(scenario())
    cancels = [(v.outcome.value, v.iss, v.digest) for v in t.verdicts if v.source == "cancel"]
    assert [c[:2] for c in cancels] == [("accept", CODER.iss), ("duplicate", CODER.iss)]
    assert cancels[0][2] == cancels[1][2]  # one canceled, carried twice


def test_garbled_calls_through_either_side_get_no_5xx() -> None:
    """Odd JSON-RPC (ids, params and fields of the wrong types, batches, not JSON) through
    the ingress and the egress side: a clear answer from the sidecar or the peer, never
    a server error of the sidecar's."""
    bodies: list[Any] = [
        b"{not json",
        [{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}],
        {"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/call", "params": {"name": "x"}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [1]}},
        {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": []},
        {"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {"message": 7}},
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "SendMessage",
            "params": {"message": {"contextId": 5, "referenceTaskIds": [{"x": 1}], "parts": []}},
        },
        {"jsonrpc": "2.0", "id": 5, "method": "CancelTask", "params": {"id": ["t"]}},
        {"jsonrpc": "2.0", "id": 6, "method": "message/send", "params": {}},
    ]
    with (
        delegate_tester() as t,
        sidecar(a2a_app(Worker(), card("http://coder/")), Delegate(TESTER.iss, t.url)) as s,
        httpx.Client(proxy=s.proxy, timeout=30) as out,
        httpx.Client(timeout=30) as into,
    ):
        for body in bodies:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers = {"content-type": "application/json", "Handoff-Context": "{}"}
            for http, url in ((out, t.url + "/"), (into, s.ingress + "/")):
                answer = http.post(url, content=content, headers=headers)
                assert answer.status_code < 500, (url, body, answer.text)
                if answer.status_code == 200:
                    assert "error" in answer.json(), (url, body, answer.text)
    assert t.worker.runs == []


def test_a_restarted_sidecar_ties_calls_from_its_state_file(tmp_path: Path) -> None:
    """The offers taken on are kept in the agent's state file by task and dialog: after a
    restart of the sidecar, a call of a task that arrived before it still continues it."""
    path = tmp_path / "coder.state"
    with delegate_tester() as t:
        with (
            FileState(path) as state,
            sidecar(
                a2a_app(Worker(), card("http://coder/")), Delegate(TESTER.iss, t.url), state=state
            ) as s,
        ):
            first = asyncio.run(working(s.ingress, "restart"))
            second = asyncio.run(working(s.ingress, "restart-by-task"))
            taken = [v.digest for v in s.verdicts if v.element == "offer"]

        async def calls(proxy: str) -> None:
            async with through(proxy, t.url) as client:
                await send(client, message("complete", "restart", None))
            async with through(proxy, t.url, **{"Handoff-Context": second}) as client:
                await send(client, message("complete", "", None))

        with (
            FileState(path) as state,
            sidecar(
                a2a_app(Worker(), card("http://coder/")), Delegate(TESTER.iss, t.url), state=state
            ) as s,
        ):
            asyncio.run(calls(s.proxy))
    assert first != second
    by_name = {"first": taken[0], "second": taken[1]}
    assert [(prev_of(o, by_name), o.dialog) for o in t.worker.offers] == [
        ("first", "restart"),
        ("second", "restart-by-task"),
    ]
