"""``handoff-trace tap --enforce`` (issue 22, item 2): a real a2a-sdk planner -> coder
system where the coder has no handoff code at all and sits behind the enforcing tap, which
holds its key. Valid offers are accepted and answered with signed statuses (a plain JSON
answer and an event stream); each hostile offer of issue 19's list (flipped signature
byte, other audience, expired, a second offer for the same hop) is refused with the SDK's
error before the coder runs (its executor counts its runs); a retransmission gets the same
status octets without a second run; the service shows the hops and the refusals as it does
for the in-process integration. The same for a plain mcp tool behind the sidecar, in both
protocol revisions."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from handoff_context import (
    Form,
    InMemoryState,
    StatusState,
    handoff_object,
    make_offer,
    make_status,
    parse_element,
    status_object,
)
from handoff_context.a2a import HandoffClient
from handoff_context.agent import Agent, Delegation
from handoff_context.mcp import HandoffMcpClient
from handoff_context.reporter import Reporter
from mcp.client.client import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from app.capture.carriers import A2A_EXTENSION_URI, MCP_META_KEY

from .agents import Worker, a2a_app, card
from .hostile import hostile_offers, message, refuses_each
from .servers import free_port, serving, wait_until
from .service import Service, service, tap
from .system import CODER, PLANNER, TESTER, TOOL, TRUST, TRUST_STORE, tool_app
from .test_enforce import (
    a2a_sender,
    carried_status,
    check_rejected,
    forged_cancel,
    judged_in,
    mcp_sender,
    send,
    shown,
)


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with service(tmp_path_factory.mktemp("service"), TRUST) as running_service:
        yield running_service


@contextlib.contextmanager
def enforced_coder(svc: Service, work: Path) -> Iterator[tuple[Worker, str]]:
    """The coder (a plain a2a-sdk server, no handoff code) behind ``tap --enforce`` with
    its key; yields the executor and the tap's URL."""
    worker = Worker()
    key = work / "coder.jwk"
    CODER.save(key)
    options = ("--enforce", "--trust", str(svc.trust), "--key-file", str(key))
    with (
        serving(a2a_app(worker, card("http://coder/"))) as upstream,
        tap(
            upstream,
            receiver=CODER.iss,
            svc=svc,
            log=work / "tap.log",
            extra=(*options, "--state-dir", str(work)),
        ) as url,
    ):
        yield worker, url


@contextlib.asynccontextmanager
async def planner_client(url: str, *, streaming: bool) -> AsyncIterator[HandoffClient]:
    """The planner: a real a2a-sdk client with the in-process integration."""
    planner = Agent(PLANNER, TRUST_STORE, state=InMemoryState())
    async with httpx.AsyncClient(timeout=30) as http:
        config = ClientConfig(httpx_client=http, streaming=streaming)
        client = ClientFactory(config).create(card(url + "/"))
        yield HandoffClient(planner, client, to=CODER.iss, first_wait=0.05)


def coder_states(statuses: list[bytes]) -> list[StatusState]:
    """The states of the statuses, each checked to be the coder's."""
    states = []
    for octets in statuses:
        payload = parse_element(octets, Form.JWS).payload
        assert payload.iss == CODER.iss
        states.append(payload.state)
    return states


def test_enforcing_tap_signs_for_a_coder_with_no_handoff_code(svc: Service, tmp_path: Path) -> None:
    now = int(time.time())
    hostile = hostile_offers(CODER, now=now, tag="tap")
    good = make_offer(PLANNER, aud=CODER.iss, dialog="tap-replayed", iat=now)
    twin = make_offer(
        PLANNER,
        aud=CODER.iss,
        dialog="tap-replayed",
        iat=now + 1,
        hop=parse_element(good, Form.JWS).payload.hop,
    )

    async def scenario(url: str, worker: Worker) -> None:
        # Valid delegations, answered with the coder's signed statuses by the sidecar.
        for streaming, script in ((False, "complete"), (True, "complete"), (False, "fail")):
            async with planner_client(url, streaming=streaming) as planner:
                request = pb.SendMessageRequest(
                    message=message(script, f"tap-{script}-{streaming}", None)
                )
                delegation = await planner.delegate(request)
            final = StatusState.COMPLETED if script == "complete" else StatusState.FAILED
            assert delegation.state is final, delegation
            assert all(v.outcome.value == "accept" for v in delegation.verdicts)
            # A stream shows the task working, then done; a plain answer only its end, and
            # the sidecar signs the states it sees.
            seen = [StatusState.ACCEPTED, final] if streaming else [final]
            assert coder_states(delegation.statuses) == seen
        assert worker.runs == ["complete", "complete", "fail"]

        # Hostile offers: refused with the SDK's error, the coder never runs.
        for streaming in (False, True):
            async with a2a_sender(url, streaming=streaming) as client:
                for h in hostile:
                    with pytest.raises(InvalidParamsError) as refused:
                        await send(client, message("complete", h.dialog, h.carried))
                    data = refused.value.data or {}
                    assert data["reason"] == h.reason, (h.name, data)
                    offer = str(h.carried["offer"]).encode("ascii")
                    if h.signed:
                        check_rejected(data["status"], offer=offer, reason=h.reason)
                    else:
                        assert "status" not in data
                with pytest.raises(InvalidParamsError) as refused:
                    await send(client, message("complete", "tap-missing", None))
                assert (refused.value.data or {})["reason"] == "policy"
        assert worker.runs == ["complete", "complete", "fail"]

        async with a2a_sender(url) as client:
            events = await send(client, message("complete", "tap-replayed", handoff_object(good)))
            assert events[-1].task.status.state == pb.TaskState.TASK_STATE_COMPLETED
            first_task = events[-1].task.id
            first = carried_status(events[-1].task.status.message)
            assert first is not None and coder_states([first]) == [StatusState.COMPLETED]
            # The same octets again: the last status, identical, and no second run.
            events = await send(client, message("complete", "tap-replayed", handoff_object(good)))
            assert carried_status(events[-1].message) == first
            # It names the task the first delivery started.
            assert events[-1].message.task_id == first_task
            # A second offer for the same hop: equivocation, no status, no run.
            with pytest.raises(InvalidParamsError) as refused:
                await send(client, message("complete", "tap-replayed", handoff_object(twin)))
            assert (refused.value.data or {})["reason"] == "equivocation"
            assert "status" not in (refused.value.data or {})
        assert worker.runs == ["complete", "complete", "fail", "complete"]

        # A cancel must carry the delegator's signed canceled: a forged one is refused and
        # the coder's cancel never runs; the planner's own goes through.
        waiting = make_offer(PLANNER, aud=CODER.iss, dialog="tap-cancel", iat=now)
        async with a2a_sender(url) as client:
            events = await send(
                client, message("wait", "tap-cancel", handoff_object(waiting)), immediately=True
            )
            task_id = events[-1].task.id
            wait_until(lambda: worker.runs[-1:] == ["wait"], what="the wait task")
            forged = pb.CancelTaskRequest(id=task_id)
            forged.metadata.update(
                {A2A_EXTENSION_URI: status_object(forged_cancel(waiting, by=TOOL, iat=now))}
            )
            with pytest.raises(InvalidParamsError) as refused:
                await client.cancel_task(forged)
            assert (refused.value.data or {})["reason"] == "policy"
            assert task_id not in worker.cancels or not worker.cancels[task_id].is_set()
            real = pb.CancelTaskRequest(id=task_id)
            canceled = make_status(PLANNER, offer_octets=waiting, state="canceled", iat=now)
            real.metadata.update({A2A_EXTENSION_URI: status_object(canceled)})
            task = await client.cancel_task(real)
            assert task.status.state == pb.TaskState.TASK_STATE_CANCELED

        # What the sidecar cannot read is refused, not passed: the coder does not run.
        bad = handoff_object(make_offer(PLANNER, aud=CODER.iss, dialog="tap-unread", iat=now))
        sent = {"message": {"messageId": "m-rest", "role": "ROLE_USER", "parts": [{"text": "x"}]}}
        sent["message"]["metadata"] = {A2A_EXTENSION_URI: bad}
        async with httpx.AsyncClient(timeout=30) as http:
            # The HTTP+JSON binding is checked as JSON-RPC is (tests/live/test_tap_egress.py):
            # a send without an offer is refused as the SDK's REST server refuses it.
            plain = {"message": {k: v for k, v in sent["message"].items() if k != "metadata"}}
            rest = await http.post(url + "/rest/message:send", json=plain)
            assert rest.status_code == 400, rest.text
            assert rest.json()["error"]["details"][0]["metadata"]["reason"] == "policy"
            old = {"jsonrpc": "2.0", "id": 7, "method": "message/send", "params": sent}
            answer = (await http.post(url + "/", json=old)).json()
            assert answer["id"] == 7 and answer["error"]["code"] == -32602, answer
            garbled = await http.post(url + "/", content=b'{"method": "SendMessage",')
            assert garbled.json()["error"]["code"] == -32700
        assert worker.runs == ["complete", "complete", "fail", "complete", "wait"]

    with enforced_coder(svc, tmp_path) as (worker, url):
        asyncio.run(scenario(url, worker))

    # The service shows what the in-process integration shows: the hops settled with the
    # coder's statuses, each refusal judged under its dialog with the same reason.
    assert [h["state"] for h in shown(svc, "tap-complete-False")] == ["completed"]
    assert [h["state"] for h in shown(svc, "tap-complete-True")] == ["completed"]
    assert [h["state"] for h in shown(svc, "tap-fail-False")] == ["failed"]
    assert [h["state"] for h in shown(svc, "tap-replayed")] == ["completed"]
    assert [h["state"] for h in shown(svc, "tap-cancel")] == ["canceled"]
    for h in hostile:
        judged = judged_in(svc, h.dialog, count=2 if h.signed else 1)
        assert ("offer", "reject", h.reason) in judged, (h.name, judged)
    assert ("offer", "reject", "equivocation") in judged_in(svc, "tap-replayed", count=3)


class PlainTool:
    """An mcp server with one tool that counts its runs; no handoff code at all."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        server = MCPServer("builder")

        @server.tool()
        def build(target: str) -> str:
            self.runs.append(target)
            return f"built {target}"

        self.app = server.streamable_http_app()


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_enforcing_tap_guards_a_plain_mcp_tool(svc: Service, tmp_path: Path, mode: str) -> None:
    tool = PlainTool()
    now = int(time.time())
    hostile = hostile_offers(TOOL, now=now, tag=f"tap-mcp-{mode}")
    good = make_offer(PLANNER, aud=TOOL.iss, dialog=f"tap-mcp-{mode}-good", iat=now)
    hop = parse_element(good, Form.JWS).payload.hop
    twin = make_offer(PLANNER, aud=TOOL.iss, dialog=f"tap-mcp-{mode}-good", iat=now + 1, hop=hop)
    key = tmp_path / "tool.jwk"
    TOOL.save(key)
    options = ("--enforce", "--trust", str(svc.trust), "--key-file", str(key))

    async def calls(url: str) -> None:
        async with mcp_sender(url, mode) as client:
            await refuses_each(client, hostile)
            result = await client.call_tool(
                "build", {"target": "good"}, meta={MCP_META_KEY: handoff_object(good)}
            )
            assert not result.is_error
            done = result.meta[MCP_META_KEY]["status"]
            payload = parse_element(done.encode("ascii"), Form.JWS).payload
            assert (payload.iss, payload.state) == (TOOL.iss, StatusState.COMPLETED)
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

    with (
        serving(tool.app, lifespan="on") as upstream,
        tap(
            upstream,
            receiver=TOOL.iss,
            svc=svc,
            log=tmp_path / "tap.log",
            extra=(*options, "--state-dir", str(tmp_path)),
        ) as url,
    ):
        asyncio.run(calls(url))
    assert tool.runs == ["good"]  # the hostile offers never reached the tool
    for h in hostile:
        judged = judged_in(svc, h.dialog, count=2 if h.signed else 1)
        assert ("offer", "reject", h.reason) in judged, (h.name, judged)


def test_an_answer_too_large_to_hold_passes_unsigned_and_whole() -> None:
    """An answer over the enforcer's bound is passed on as it comes, never held whole."""
    from app.cli.enforce import MAX_BODY, Enforcer

    big = b'{"result": "' + b"x" * (MAX_BODY + 10) + b'"}'
    chunks = [big[i : i + 65536] for i in range(0, len(big), 65536)]
    seen: list[int] = []

    async def upstream(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [(b"content-type", b"application/json")]})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def client_send(message: Any) -> None:
        if message["type"] == "http.response.body":
            seen.append(len(message["body"]))

    agent = Agent(None, TRUST_STORE, iss=CODER.iss, state=InMemoryState())
    enforcer = Enforcer(upstream, agent)
    scope = {"type": "http", "method": "POST", "path": "/", "headers": []}

    async def receive() -> Any:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    asyncio.run(enforcer(scope, receive, client_send))
    assert sum(seen) == len(big)
    assert max(seen) <= MAX_BODY + 65536  # passed on once over the bound, not held whole


# --- egress: the sidecar signs the coder's own delegations (issue 22, item 3) -------------


class Relaying(Worker):
    """A coder with no handoff code that works by delegating: it asks the tester (A2A) and
    calls the tool (MCP), passing its task's ``contextId`` along as any A2A agent that
    continues a conversation does, then completes; a refused delegation fails its task.

    Its HTTP clients use ``proxy`` (the sidecar's egress listener; ``HTTP_PROXY`` does the
    same for an agent whose code is not touched at all). With ``agent`` instead, it is the
    in-process integration's coder: the same work through ``HandoffClient`` and
    ``HandoffMcpClient``, for the comparison. Scripts: ``relay`` (the tester and the
    tool), ``elsewhere`` (the tester, in another dialog than its task's), and the
    ``Worker``'s own (``complete``, ``fail``, ...), which delegate nothing."""

    def __init__(self, tester_url: str, tool_url: str) -> None:
        super().__init__()
        self.tester_url, self.tool_url = tester_url, tool_url
        self.proxy: str | None = None
        self.agent: Agent | None = None
        self.outcomes: dict[str, list[Any]] = {}

    async def execute(self, context: Any, event_queue: Any) -> None:
        from a2a.helpers.proto_helpers import new_task_from_user_message
        from a2a.server.tasks import TaskUpdater

        if context.get_user_input().split()[0] not in ("relay", "elsewhere"):
            await super().execute(context, event_queue)
            return
        self.runs.append(context.get_user_input())
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await event_queue.enqueue_event(
            context.current_task or new_task_from_user_message(context.message)
        )
        await updater.start_work()
        script = context.get_user_input().split()[0]
        dialog = context.context_id if script == "relay" else f"{context.context_id}-elsewhere"
        outcomes = self.outcomes.setdefault(context.context_id, [])
        try:
            outcomes.append(await self._ask_tester(dialog))
            if script == "relay":
                outcomes.append(await self._call_tool(context.context_id))
        except (InvalidParamsError, MCPError) as exc:
            outcomes.append(exc)
            await updater.failed()
            return
        await updater.complete()

    async def _ask_tester(self, dialog: str) -> Any:
        async with httpx.AsyncClient(proxy=self.proxy, timeout=30) as http:
            config = ClientConfig(httpx_client=http, streaming=True)
            client: Any = ClientFactory(config).create(card(self.tester_url + "/"))
            if self.agent is not None:
                client = HandoffClient(self.agent, client, to=TESTER.iss)
            request = pb.SendMessageRequest(message=message("complete", dialog, None))
            states = [
                event.status_update.status.state
                if event.HasField("status_update")
                else event.task.status.state
                async for event in client.send_message(request)
            ]
            return states[-1]

    async def _call_tool(self, dialog: str) -> Any:
        # MCP names no dialog: the call names the task's in a header the sidecar reads.
        headers = {"Handoff-Context": dialog} if self.agent is None else {}
        async with httpx2.AsyncClient(proxy=self.proxy, headers=headers, timeout=30) as http:
            transport = streamable_http_client(self.tool_url + "/mcp", http_client=http)
            client: Any = McpClient(transport, mode="legacy")
            if self.agent is not None:
                client = HandoffMcpClient(self.agent, client, to=TOOL.iss)
            async with client:
                return await client.call_tool("build", {"target": "x"})


SIDES = ("sidecar", "in-process")


def test_the_sidecar_signs_the_coders_own_delegations(svc: Service, tmp_path: Path) -> None:
    """planner -> coder -> tester (A2A) and coder -> tool (MCP), the coder with no handoff
    code behind one sidecar for its ingress and egress: the tester and the tool accept the
    offers the sidecar signed, continuing the planner's; the chain verifies at the tester;
    the service shows the dialog's three hops settled with no flag, exactly as for the
    same work by the in-process integration; a call the sidecar cannot tie to the handoff
    it continues is refused (``--egress-untied refuse``) before it reaches the tester."""
    now = int(time.time())
    verdicts: list[Any] = []
    reporters = [
        Reporter(svc.url, svc.token, receiver=who.iss, interval=0.05)
        for who in (TESTER, TOOL, CODER)
    ]
    tester_agent = Agent(
        TESTER,
        TRUST_STORE,
        state=InMemoryState(),
        reporter=reporters[0],
        on_verdict=verdicts.append,
    )
    tester = Worker()
    key = tmp_path / "coder.jwk"
    CODER.save(key)
    egress = f"127.0.0.1:{free_port()}"

    async def ask(url: str, dialog: str, script: str = "relay") -> Delegation:
        async with planner_client(url, streaming=True) as planner:
            request = pb.SendMessageRequest(message=message(script, dialog, None))
            return await planner.delegate(request)

    async def same_script(url: str, how: str) -> Delegation:
        """The script both coders run: a failing task, an expired offer, then the relay."""
        await ask(url, f"egress-{how}-fail", "fail")
        async with a2a_sender(url) as client:
            stale = handoff_object(
                make_offer(PLANNER, aud=CODER.iss, dialog=f"egress-{how}-stale", iat=now - 900)
            )
            with pytest.raises(InvalidParamsError):
                await send(client, message("complete", f"egress-{how}-stale", stale))
        return await ask(url, f"egress-{how}")

    with (
        serving(a2a_app(tester, card("http://tester/"), tester_agent)) as tester_url,
        serving(
            tool_app(Agent(TOOL, TRUST_STORE, state=InMemoryState(), reporter=reporters[1])),
            lifespan="on",
        ) as tool_url,
    ):
        coder = Relaying(tester_url, tool_url)
        # The same work by the in-process integration, for the comparison.
        coder.agent = Agent(CODER, TRUST_STORE, state=InMemoryState(), reporter=reporters[2])
        with serving(a2a_app(coder, card("http://coder/"), coder.agent)) as coder_url:
            in_process = asyncio.run(same_script(coder_url, "in-process"))
        coder.agent, coder.proxy = None, f"http://{egress}"
        options = ("--enforce", "--trust", str(svc.trust), "--key-file", str(key))
        delegates = ("--delegate", TESTER.iss, tester_url, "--delegate", TOOL.iss, tool_url)
        with (
            serving(a2a_app(coder, card("http://coder/"))) as upstream,
            tap(
                upstream,
                receiver=CODER.iss,
                svc=svc,
                log=tmp_path / "tap.log",
                extra=(
                    *options,
                    "--state-dir",
                    str(tmp_path),
                    "--egress-listen",
                    egress,
                    *delegates,
                ),
            ) as url,
        ):
            sidecar = asyncio.run(same_script(url, "sidecar"))
            untied = asyncio.run(ask(url, "egress-untied", "elsewhere"))
    for reporter in reporters:
        assert reporter.close(30), reporter.stats

    # The planner's delegation completed, the coder's statuses signed by its sidecar.
    assert in_process.state is sidecar.state is StatusState.COMPLETED
    assert coder_states(sidecar.statuses) == [StatusState.ACCEPTED, StatusState.COMPLETED]
    # The coder got its delegates' answers, untouched: the tester's task completed, the
    # tool's result carries the tool's signed completed.
    done = coder.outcomes["egress-sidecar"]
    assert done[0] == pb.TaskState.TASK_STATE_COMPLETED and not done[1].is_error
    assert (
        parse_element(done[1].meta[MCP_META_KEY]["status"].encode(), Form.JWS).payload.iss
        == TOOL.iss
    )
    # The tester accepted the offer the sidecar signed: it continues the planner's (prev),
    # carrying the planner's offer as its chain, every link checked (profile §7).
    accepted = [v for v in verdicts if v.element == "offer" and v.iss == CODER.iss]
    assert [v.outcome.value for v in accepted] == ["accept", "accept"]  # in process, sidecar
    chain = accepted[1].chain
    assert chain.carried and not chain.partial
    assert [(e.iss, e.result.value) for e in chain.elements] == [(PLANNER.iss, "pass")]
    assert accepted[1].dialog == "egress-sidecar"
    # A call into another dialog ties to nothing: refused by the sidecar, the tester never
    # asked; the coder's task failed.
    assert untied.state is StatusState.FAILED
    (refusal,) = coder.outcomes["egress-untied"]
    assert isinstance(refusal, InvalidParamsError)
    assert "--egress-untied refuse" in str((refusal.data or {})["detail"])
    assert tester.runs == ["complete", "complete"]

    # The service: one dialog with the planner's hop and the coder's two, settled, no flag,
    # the same as the in-process integration's run of the same work.
    def hops(dialog: str) -> list[tuple[str, str, str, list[str]]]:
        return sorted((h["iss"], h["aud"], h["state"], h["flags"]) for h in shown(svc, dialog))

    assert hops("egress-sidecar") == sorted(
        [
            (PLANNER.iss, CODER.iss, "completed", []),
            (CODER.iss, TESTER.iss, "completed", []),
            (CODER.iss, TOOL.iss, "completed", []),
        ]
    )
    assert hops("egress-in-process") == hops("egress-sidecar")
    assert hops("egress-in-process-fail") == hops("egress-sidecar-fail")
    assert [h[2] for h in hops("egress-sidecar-fail")] == ["failed"]
    # A refused offer makes no hop: the service judged it alike (a stale offer, then the
    # coder's signed rejected), whichever side refused it.
    stale = {how: sorted(judged_in(svc, f"egress-{how}-stale", count=2)) for how in SIDES}
    assert stale["sidecar"] == stale["in-process"]
    assert ("offer", "reject", "stale") in stale["sidecar"]
