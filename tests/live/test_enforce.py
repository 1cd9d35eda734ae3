"""The integrations in ``enforce`` (issue 19, "the real system test"): hostile inputs are
refused before the executor or tool runs, with the SDK's error, the profile reason and a
signed ``rejected`` where the profile allows one, and the service shows each under its
dialog; a late delegation fails at the delegating agent; a dropped reply is recovered by
retransmission. In ``audit`` the same inputs all run and are all reported.

Real a2a-sdk servers and clients, a real mcp Streamable HTTP tool, a real ``handoff-trace
serve``; a real restart of the receiving agent (a new server on the same state file)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from handoff_context import (
    FileState,
    Form,
    Signer,
    StatusState,
    handoff_digest,
    handoff_object,
    make_offer,
    make_status,
    parse_element,
    sign_payload,
    status_object,
    status_payload,
)
from handoff_context.a2a import HandoffClient
from handoff_context.agent import Agent, Mode
from handoff_context.errors import ChainWindowError
from handoff_context.mcp import HandoffMcpClient, HandoffMiddleware
from handoff_context.reporter import Reporter
from mcp.client.client import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from sqlalchemy import or_, select

from app.capture.carriers import A2A_EXTENSION_URI, MCP_META_KEY
from app.store.db import make_engine, transaction
from app.store.models import ElementRow, ObservationRow, VerdictRow

from .agents import Worker, a2a_app, card
from .hostile import Clock, DroppingProxy, hostile_offers, message, refuses_each
from .servers import serving, wait_until
from .service import Service, service
from .system import CLIENT, CODER, PLANNER, TOOL, TRUST, TRUST_STORE


@dataclass
class Run:
    """One agent behind its integration, with its reporter and what it judged."""

    svc: Service
    work: Path
    clock: Clock = field(default_factory=Clock)
    reporters: list[Reporter] = field(default_factory=list)
    states: list[FileState] = field(default_factory=list)
    verdicts: list[Any] = field(default_factory=list)

    def agent(self, who: Signer, mode: Mode = Mode.ENFORCE, *, name: str = "") -> Agent:
        reporter = Reporter(self.svc.url, self.svc.token, receiver=who.iss, interval=0.05)
        state = FileState(self.work / f"{name or who.iss.rsplit('/', 1)[-1]}.state")
        self.reporters.append(reporter)
        self.states.append(state)
        return Agent(
            who,
            TRUST_STORE,
            state=state,
            mode=mode,
            reporter=reporter,
            clock=self.clock,
            on_verdict=self.verdicts.append,
        )

    def close(self) -> None:
        for reporter in self.reporters:
            assert reporter.close(30), reporter.stats
        for state in self.states:
            state.close()


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One real service for the module: every test works in dialogs of its own."""
    with service(tmp_path_factory.mktemp("service"), TRUST) as running_service:
        yield running_service


@contextlib.contextmanager
def running(svc: Service, tmp_path: Path) -> Iterator[Run]:
    run = Run(svc, tmp_path)
    try:
        yield run
    finally:
        run.close()


@contextlib.asynccontextmanager
async def a2a_sender(url: str, *, streaming: bool = False) -> AsyncIterator[Any]:
    """A plain SDK client (no integration): the hostile side."""
    async with httpx.AsyncClient(timeout=30) as http:
        config = ClientConfig(httpx_client=http, streaming=streaming)
        yield ClientFactory(config).create(card(url + "/"))


async def send(client: Any, msg: pb.Message, *, immediately: bool = False) -> list[Any]:
    request = pb.SendMessageRequest(message=msg)
    request.configuration.return_immediately = immediately
    return [event async for event in client.send_message(request)]


def carried_status(msg: pb.Message) -> bytes | None:
    from google.protobuf import json_format

    if A2A_EXTENSION_URI not in msg.metadata:
        return None
    value = json_format.MessageToDict(msg.metadata)[A2A_EXTENSION_URI]
    return str(value["status"]).encode("ascii")


def check_rejected(status: str, *, offer: bytes, reason: str) -> None:
    """A signed rejected from the coder, for this very offer, with the reason."""
    payload = parse_element(status.encode("ascii"), Form.JWS).payload
    assert (payload.state, payload.reason) == (StatusState.REJECTED, reason)
    assert payload.offer == handoff_digest(offer) and payload.iss == CODER.iss


def forged_cancel(offer: bytes, *, by: Signer, iat: int) -> bytes:
    """A canceled for ``offer`` signed by ``by``, who is not its delegator (the reply helpers
    refuse to sign it, so it is built from its payload)."""
    p = parse_element(offer, Form.JWS).payload
    fields = {"iss": p.iss, "aud": p.aud, "hop": p.hop}
    payload = status_payload(
        offer=fields, offer_octets=offer, state="canceled", iat=iat, iss=by.iss
    )
    return sign_payload(payload, by)


def judged_in(svc: Service, dialog: str, *, count: int) -> list[tuple[str, str, str | None]]:
    """What the service stored under ``dialog`` (the carrier's, or the element's own: MCP
    names no dialog): (element, outcome, reason) of each observation, once there are
    ``count`` of them (the reporters deliver in the background).
    The hops API lists hops only, so the store is read the way the dashboard's pages do."""
    found: list[tuple[str, str, str | None]] = []

    def stored() -> bool:
        nonlocal found
        engine = make_engine(svc.db)
        try:
            with transaction(engine) as session:
                rows = session.execute(
                    select(VerdictRow.element, VerdictRow.outcome, VerdictRow.reason)
                    .join(ObservationRow, ObservationRow.id == VerdictRow.observation_id)
                    .join(ElementRow, ElementRow.digest == ObservationRow.digest)
                    .where(or_(ObservationRow.dialog == dialog, ElementRow.dialog == dialog))
                ).all()
        finally:
            engine.dispose()
        found = [tuple(r) for r in rows]  # type: ignore[misc]
        return len(found) >= count

    wait_until(stored, what=lambda: f"{count} observations in {dialog} ({found})", timeout=30)
    return found


def shown(svc: Service, dialog: str) -> list[dict[str, Any]]:
    """The hops the service shows under ``dialog``, once it shows them all settled (every
    hop of these tests ends; the reporters deliver in the background)."""
    hops: list[dict[str, Any]] = []

    def seen() -> bool:
        nonlocal hops
        hops = list(svc.get("/hops", dialog=dialog)["hops"])
        return bool(hops) and all(h["state"] not in ("offered", "accepted") for h in hops)

    wait_until(seen, what=lambda: f"dialog {dialog} settled ({hops})", timeout=30, interval=0.1)
    return hops


# --- A2A ------------------------------------------------------------------------------------


def test_hostile_a2a_inputs_are_refused_before_the_executor_runs(
    svc: Service, tmp_path: Path
) -> None:
    with running(svc, tmp_path) as run:
        worker = Worker()
        coder = run.agent(CODER)
        now = int(time.time())
        hostile = hostile_offers(CODER, now=now, tag="a2a")
        good = make_offer(PLANNER, aud=CODER.iss, dialog="a2a-replayed", iat=now)
        twin = make_offer(
            PLANNER,
            aud=CODER.iss,
            dialog="a2a-replayed",
            iat=now + 1,
            hop=parse_element(good, Form.JWS).payload.hop,
        )
        wait_offer = make_offer(PLANNER, aud=CODER.iss, dialog="a2a-forged-cancel", iat=now)

        async def hostile_round(url: str) -> None:
            for streaming in (False, True):  # the same refusal on either kind of request
                async with a2a_sender(url, streaming=streaming) as client:
                    for h in hostile:
                        with pytest.raises(InvalidParamsError) as refused:
                            await send(client, message("complete", h.dialog, h.carried))
                        data = refused.value.data or {}
                        assert data["reason"] == h.reason, data
                        offer = str(h.carried["offer"]).encode("ascii")
                        if h.signed:
                            check_rejected(data["status"], offer=offer, reason=h.reason)
                        else:
                            assert "status" not in data
            async with a2a_sender(url) as client:
                # The good offer runs once; its answer is remembered in the state file.
                events = await send(
                    client, message("complete", "a2a-replayed", handoff_object(good))
                )
                assert events[-1].task.status.state == pb.TaskState.TASK_STATE_COMPLETED
                answered["first"] = carried_status(events[-1].task.status.message)

        async def after_restart(url: str) -> None:
            async with a2a_sender(url) as client:
                # The same octets again after the restart: a retransmission (profile §6.4),
                # answered with the last status's identical octets, the work not run again.
                events = await send(
                    client, message("complete", "a2a-replayed", handoff_object(good))
                )
                assert carried_status(events[-1].message) == answered["first"] is not None
                # A second offer for the same hop: equivocation, no status at all.
                with pytest.raises(InvalidParamsError) as refused:
                    await send(client, message("complete", "a2a-replayed", handoff_object(twin)))
                assert refused.value.data == {
                    "reason": "equivocation",
                    "detail": refused.value.data["detail"],
                }
                # A cancel signed by someone other than the delegator is refused; the task
                # keeps working and the executor's cancel is never called.
                events = await send(
                    client,
                    message("wait", "a2a-forged-cancel", handoff_object(wait_offer)),
                    immediately=True,
                )
                task_id = events[-1].task.id
                wait_until(lambda: worker.runs[-1:] == ["wait"], what="the wait task")
                forged = forged_cancel(wait_offer, by=TOOL, iat=now)
                cancel = pb.CancelTaskRequest(id=task_id)
                cancel.metadata.update({A2A_EXTENSION_URI: status_object(forged)})
                with pytest.raises(InvalidParamsError) as refused:
                    await client.cancel_task(cancel)
                assert refused.value.data["reason"] == "policy"
                assert task_id not in worker.cancels or not worker.cancels[task_id].is_set()
                task = await client.get_task(pb.GetTaskRequest(id=task_id))
                assert task.status.state == pb.TaskState.TASK_STATE_WORKING
                # The delegator's own cancel goes through.
                real = make_status(PLANNER, offer_octets=wait_offer, state="canceled", iat=now)
                cancel = pb.CancelTaskRequest(id=task_id)
                cancel.metadata.update({A2A_EXTENSION_URI: status_object(real)})
                task = await client.cancel_task(cancel)
                assert task.status.state == pb.TaskState.TASK_STATE_CANCELED

        answered: dict[str, bytes | None] = {}
        with serving(a2a_app(worker, card("http://coder/"), coder)) as url:
            asyncio.run(hostile_round(url))
        assert worker.runs == ["complete"]  # the hostile offers never reached the executor
        coder.state.close()
        restarted = run.agent(CODER)  # the same state file, a new process's memory
        with serving(a2a_app(worker, card("http://coder/"), restarted)) as url:
            asyncio.run(after_restart(url))
        assert worker.runs == ["complete", "wait"]

        for h in hostile:
            # Stored and judged by the service under the dialog, with the same reason; the
            # signed rejected beside the offer where there is one.
            judged = judged_in(run.svc, h.dialog, count=2 if h.signed else 1)
            assert ("offer", "reject", h.reason) in judged, (h.name, judged)
        hops = shown(run.svc, "a2a-replayed")
        assert [h["state"] for h in hops] == ["completed"]
        assert [h["state"] for h in shown(run.svc, "a2a-forged-cancel")] == ["canceled"]
        # The forged cancel reached the service too, which refuses it for the same reason.
        forged_seen = judged_in(run.svc, "a2a-forged-cancel", count=4)
        assert ("status", "reject", "policy") in forged_seen, forged_seen
        assert ("offer", "reject", "equivocation") in judged_in(run.svc, "a2a-replayed", count=5)


# --- MCP ------------------------------------------------------------------------------------


class CountingTool:
    """An mcp server with one tool that counts its runs; no handoff code in the tool."""

    def __init__(self, agent: Agent) -> None:
        self.runs: list[str] = []
        server = MCPServer("builder", middleware=[HandoffMiddleware(agent)])

        @server.tool()
        def build(target: str) -> str:
            self.runs.append(target)
            return f"built {target}"

        self.app = server.streamable_http_app()


@contextlib.asynccontextmanager
async def mcp_sender(url: str, mode: str) -> AsyncIterator[Any]:
    async with httpx2.AsyncClient(timeout=30) as http:
        options = {"mode": mode} if mode == "legacy" else {}
        transport = streamable_http_client(url + "/mcp", http_client=http)
        async with McpClient(transport, **options) as client:
            yield client


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_hostile_mcp_calls_are_refused_before_the_tool_runs(
    svc: Service, tmp_path: Path, mode: str
) -> None:
    with running(svc, tmp_path) as run:
        tool = CountingTool(run.agent(TOOL))
        now = int(time.time())
        hostile = hostile_offers(TOOL, now=now, tag=f"mcp-{mode}")
        good = make_offer(PLANNER, aud=TOOL.iss, dialog=f"mcp-{mode}-good", iat=now)
        hop = parse_element(good, Form.JWS).payload.hop
        twin = make_offer(PLANNER, aud=TOOL.iss, dialog=f"mcp-{mode}-good", iat=now + 1, hop=hop)

        async def calls(url: str) -> None:
            async with mcp_sender(url, mode) as client:
                await refuses_each(client, hostile)
                result = await client.call_tool(
                    "build", {"target": "good"}, meta={MCP_META_KEY: handoff_object(good)}
                )
                done = result.meta[MCP_META_KEY]["status"]
                # The same octets again: the same status, the tool not run again.
                again = await client.call_tool(
                    "build", {"target": "again"}, meta={MCP_META_KEY: handoff_object(good)}
                )
                assert again.meta[MCP_META_KEY]["status"] == done
                with pytest.raises(MCPError) as refused:
                    await client.call_tool(
                        "build", {"target": "twin"}, meta={MCP_META_KEY: handoff_object(twin)}
                    )
                assert refused.value.data["reason"] == "equivocation"
                assert "status" not in refused.value.data

        with serving(tool.app, lifespan="on") as url:
            asyncio.run(calls(url))
        assert tool.runs == ["good"]
        for h in hostile:
            judged = judged_in(run.svc, h.dialog, count=2 if h.signed else 1)
            assert ("offer", "reject", h.reason) in judged, (h.name, judged)


class HoldingTool:
    """An mcp server whose one tool works until it is cancelled."""

    def __init__(self, agent: Agent) -> None:
        self.started: list[str] = []
        server = MCPServer("holder", middleware=[HandoffMiddleware(agent)])

        @server.tool()
        async def hold(target: str) -> str:
            self.started.append(target)
            await anyio.sleep(60)
            return "done"

        self.app = server.streamable_http_app()


MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def rpc(http: httpx.AsyncClient, headers: dict[str, str], body: dict[str, Any]) -> Any:
    return await http.post("/mcp", headers=headers, json=body)


async def mcp_session(http: httpx.AsyncClient, client: str) -> dict[str, str]:
    """Initialise an MCP session over raw JSON-RPC; the headers of its further requests."""
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}}
    hello["clientInfo"] = {"name": client, "version": "1"}
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
    answer = await rpc(http, MCP_HEADERS, init)
    headers = {
        **MCP_HEADERS,
        "mcp-session-id": answer.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    await rpc(http, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return headers


def test_mcp_cancels_are_checked(svc: Service, tmp_path: Path) -> None:
    """notifications/cancelled with a canceled signed by another agent is judged a policy
    rejection and reported; the delegator's own is accepted. (The mcp SDK ends the call on
    any cancel before middleware sees it, so neither can be refused: profile.md §13.) The
    sender is raw JSON-RPC over Streamable HTTP, as a hostile client would write it."""
    with running(svc, tmp_path) as run:
        tool = HoldingTool(run.agent(TOOL))
        now = int(time.time())
        offers = {
            n: make_offer(PLANNER, aud=TOOL.iss, dialog="mcp-cancel", iat=now) for n in (1, 2)
        }
        cancels = {
            1: forged_cancel(offers[1], by=CODER, iat=now),
            2: make_status(PLANNER, offer_octets=offers[2], state="canceled", iat=now),
        }

        async def session(url: str) -> None:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                headers = await mcp_session(http, "hostile")
                for n, offer in offers.items():
                    params = {"name": "hold", "arguments": {"target": str(n)}}
                    params["_meta"] = {MCP_META_KEY: handoff_object(offer)}
                    call = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
                    pending = asyncio.create_task(rpc(http, headers, call))
                    await asyncio.to_thread(
                        wait_until, lambda n=n: str(n) in tool.started, what="the tool"
                    )
                    meta = {MCP_META_KEY: status_object(cancels[n])}
                    cancel = {"requestId": n, "_meta": meta}
                    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
                    assert (await rpc(http, headers, note)).status_code == 202
                    await pending

        with serving(tool.app, lifespan="on") as url:
            asyncio.run(session(url))
        judged = [(v.element, v.outcome.value, v.reason) for v in run.verdicts]
        assert judged == [
            ("offer", "accept", None),
            ("status", "reject", "policy"),
            ("offer", "accept", None),
            ("status", "accept", None),
        ]
        seen = judged_in(run.svc, "mcp-cancel", count=4)
        assert ("status", "reject", "policy") in seen, seen


# --- the delegating side: a late delegation, a dropped reply ----------------------------------


class Relay(Worker):
    """A planner with no handoff code: delegates the text to the coder through the wrapped
    client, after the clock moved ``late`` seconds (the long LLM step, injected)."""

    def __init__(self, run: Run, agent: Agent) -> None:
        super().__init__()
        self.run, self.agent = run, agent
        self.coder_url = ""
        self.late = 0
        self.errors: list[BaseException] = []

    async def execute(self, context: Any, event_queue: Any) -> None:
        from a2a.server.tasks import TaskUpdater

        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await event_queue.enqueue_event(
            context.current_task or new_task_from_user_message(context.message)
        )
        await updater.start_work()
        self.run.clock.offset += self.late
        try:
            async with a2a_sender(self.coder_url) as sdk_client:
                coder = HandoffClient(self.agent, sdk_client, to=CODER.iss)
                await coder.delegate(
                    pb.SendMessageRequest(message=message("complete", context.context_id, None))
                )
        except ChainWindowError as exc:
            self.errors.append(exc)
            await updater.failed()
            return
        finally:
            self.run.clock.offset -= self.late
        await updater.complete()


def test_a_late_delegation_fails_at_the_delegating_agent(svc: Service, tmp_path: Path) -> None:
    with running(svc, tmp_path) as run:
        worker = Worker()
        relay = Relay(run, run.agent(PLANNER))
        relay.late = 600  # ten minutes after the offer arrived
        client_agent = run.agent(CLIENT)

        async def ask(url: str) -> Any:
            async with a2a_sender(url) as sdk_client:
                planner = HandoffClient(client_agent, sdk_client, to=PLANNER.iss)
                return await planner.delegate(
                    pb.SendMessageRequest(message=message("go", "late", None))
                )

        with (
            serving(a2a_app(worker, card("http://coder/"), run.agent(CODER))) as coder_url,
            serving(a2a_app(relay, card("http://planner/"), relay.agent)) as planner_url,
        ):
            relay.coder_url = coder_url
            delegation = asyncio.run(ask(planner_url))
        assert [type(e) for e in relay.errors] == [ChainWindowError]
        assert "partial" in str(relay.errors[0])  # it names the options the profile leaves
        assert worker.runs == []  # nothing reached the next hop, so no broken-chain there
        assert delegation.state is StatusState.FAILED
        hops = shown(run.svc, "late")
        assert [(h["aud"], h["state"], h["flags"]) for h in hops] == [(PLANNER.iss, "failed", [])]


def test_a_dropped_reply_is_recovered_by_retransmission(svc: Service, tmp_path: Path) -> None:
    with running(svc, tmp_path) as run:
        worker = Worker()
        coder = run.agent(CODER)
        client_agent = run.agent(CLIENT)

        async def ask(port: int) -> Any:
            proxy = DroppingProxy(port, marker=b"drop-me")
            async with proxy.serving() as url, a2a_sender(url) as sdk_client:
                client = HandoffClient(client_agent, sdk_client, to=CODER.iss, first_wait=0.05)
                request = pb.SendMessageRequest(
                    message=message("complete drop-me", "dropped", None)
                )
                delegation = await client.delegate(request)
            assert proxy.dropped == 1
            return delegation

        with serving(a2a_app(worker, card("http://coder/"), coder)) as url:
            delegation = asyncio.run(ask(int(url.rsplit(":", 1)[1])))
        assert worker.runs == ["complete drop-me"]  # the work ran once
        # The retransmission's answer is the status the coder signed, octet for octet.
        assert delegation.statuses == [coder.state.last_answer(handoff_digest(delegation.offer))]
        assert delegation.state is StatusState.COMPLETED
        hops = shown(run.svc, "dropped")
        assert [(h["state"], h["flags"]) for h in hops] == [("completed", [])]


def test_work_that_crashes_is_answered_with_a_signed_failed(svc: Service, tmp_path: Path) -> None:
    """An executor that raises: the SDK fails the task as always, and the integration signs
    the failed, so the delegator's hop ends failed instead of an unresolved lost outcome."""
    with running(svc, tmp_path) as run:
        worker = Worker()
        client_agent = run.agent(CLIENT)

        async def ask(url: str) -> Any:
            async with a2a_sender(url, streaming=True) as sdk_client:
                client = HandoffClient(client_agent, sdk_client, to=CODER.iss)
                request = pb.SendMessageRequest(message=message("crash", "crashed", None))
                with contextlib.suppress(Exception):  # how the SDK reports the crash itself
                    await client.delegate(request)
                return client.last

        with serving(a2a_app(worker, card("http://coder/"), run.agent(CODER))) as url:
            delegation = asyncio.run(ask(url))
        assert worker.runs == ["crash"]
        assert delegation.state is StatusState.FAILED
        hops = shown(run.svc, "crashed")
        assert [(h["state"], h["flags"]) for h in hops] == [("failed", [])]


def test_a_dropped_mcp_reply_is_asked_again_on_a_new_session(svc: Service, tmp_path: Path) -> None:
    """The mcp client's session ends when a reply is lost; a new session sends the identical
    offer again and gets the tool's status octet for octet, the tool not run twice."""
    with running(svc, tmp_path) as run:
        tool_agent = run.agent(TOOL)
        tool = CountingTool(tool_agent)
        client_agent = run.agent(CLIENT)

        async def call(port: int) -> Any:
            proxy = DroppingProxy(port, marker=b"drop-me")
            async with proxy.serving() as url:
                first: list[HandoffMcpClient] = []
                # How the session ends is the SDK's business (a closed connection, raised
                # from its task group): only that it ends matters here.
                with pytest.raises(BaseException):  # noqa: B017
                    async with mcp_sender(url, "legacy") as sdk:
                        first.append(HandoffMcpClient(client_agent, sdk, to=TOOL.iss))
                        await asyncio.wait_for(
                            first[0].call_tool(
                                "build", {"target": "drop-me"}, dialog="mcp-dropped"
                            ),
                            20,
                        )
                lost = first[0].last
                assert lost is not None and lost.statuses == [] and proxy.dropped == 1
                async with mcp_sender(url, "legacy") as sdk:
                    again = HandoffMcpClient(client_agent, sdk, to=TOOL.iss)
                    await again.call_tool("build", {"target": "drop-me"}, again=lost)
            return lost

        with serving(tool.app, lifespan="on") as url:
            delegation = asyncio.run(call(int(url.rsplit(":", 1)[1])))
        assert tool.runs == ["drop-me"]  # the work ran once
        answered = tool_agent.state.last_answer(handoff_digest(delegation.offer))
        assert delegation.statuses == [answered] and delegation.state is StatusState.COMPLETED
        hops = shown(run.svc, "mcp-dropped")
        assert [(h["state"], h["flags"]) for h in hops] == [("completed", [])]


# --- audit ----------------------------------------------------------------------------------


def test_audit_mode_runs_every_input_and_reports_its_verdict(svc: Service, tmp_path: Path) -> None:
    with running(svc, tmp_path) as run:
        worker = Worker()
        coder = run.agent(CODER, Mode.AUDIT)
        now = int(time.time())
        hostile = hostile_offers(CODER, now=now, tag="audit")
        good = make_offer(PLANNER, aud=CODER.iss, dialog="audit-good", iat=now)
        hop = parse_element(good, Form.JWS).payload.hop
        twin = make_offer(PLANNER, aud=CODER.iss, dialog="audit-good", iat=now + 1, hop=hop)
        inputs = [
            *(h.carried for h in hostile),
            handoff_object(good),
            handoff_object(good),
            handoff_object(twin),
        ]
        dialogs = [*(h.dialog for h in hostile), "audit-good", "audit-good", "audit-good"]

        async def send_all(url: str) -> None:
            async with a2a_sender(url) as client:
                for carried, dialog in zip(inputs, dialogs, strict=True):
                    await send(client, message("complete", dialog, carried))

        with serving(a2a_app(worker, card("http://coder/"), coder)) as url:
            asyncio.run(send_all(url))
        assert len(worker.runs) == len(inputs)  # nothing refused
        outcomes = [(v.outcome.value, v.reason and v.reason.value) for v in run.verdicts]
        assert outcomes == [
            ("reject", "bad-signature"),
            ("reject", "wrong-audience"),
            ("reject", "stale"),
            ("accept", None),
            ("duplicate", None),
            ("reject", "equivocation"),
        ]
        for h in hostile:
            assert ("offer", "reject", h.reason) in judged_in(run.svc, h.dialog, count=1)
        judged = judged_in(run.svc, "audit-good", count=5)
        assert ("offer", "reject", "equivocation") in judged
