"""The SDK integrations' per-message overhead on an agent (issue 19, "Memory"): what the
handoff side adds to each message, p50 and p99, beside the reporter's own
(``bench/reporter_overhead.py``).

Cases, each the integration's own work for one message, with the agent's replay memory a
real ``FileState`` (SQLite, WAL) on disk:

- *receive an offer*: ``Agent.check_offer`` on a handoff object with a chain of one (two
  signature checks, the replay memory written) - what ``HandoffRequestHandler`` and
  ``HandoffMiddleware`` do before the executor or tool runs;
- *answer a hop*: the signed ``accepted`` and ``completed`` of one task, each recorded as
  the offer's last answer;
- *delegate*: signing the offer of a delegation that continues the task's handoff;
- *check a status*: one status that came back for a delegation.

And end to end, with the real a2a-sdk in process (``httpx.ASGITransport``, no network): one
non-streaming ``SendMessage`` that the executor completes at once, through a plain
``DefaultRequestHandler`` and client, and through ``HandoffRequestHandler`` and
``HandoffClient``; the difference of their medians is the integration's cost per exchange.

Every figure is also a ratio to one raw ES256 verification with ``cryptography``, measured
interleaved in the same run.

    .venv/bin/python bench/integration_overhead.py [--n 2000] [--exchanges 300] [--rounds 3]

Prints a table and writes bench/results/integration_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _support import raw_verify_us
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from a2a.types import a2a_pb2 as pb
from handoff_context import (
    Agent,
    FileState,
    Signer,
    StatusState,
    TrustStore,
    make_status,
    status_object,
    trust_document,
)
from handoff_context.a2a import HandoffClient, HandoffRequestHandler
from handoff_context.agent import enter, leave
from reporter_overhead import _quantile, _times
from starlette.applications import Starlette

RESULTS = Path(__file__).parent / "results"
ORIGIN = Signer.generate("spiffe://a.example/agent/client", "ES256", kid="a1")
PLANNER = Signer.generate("spiffe://b.example/agent/planner", "ES256", kid="b1")
CODER = Signer.generate("spiffe://c.example/agent/coder", "ES256", kid="c1")
TRUST = TrustStore.from_mapping(trust_document([ORIGIN, PLANNER, CODER]))


def _card() -> AgentCard:
    return AgentCard(
        name="coder",
        description="bench",
        version="1",
        default_input_modes=["text"],
        default_output_modes=["text"],
        capabilities=AgentCapabilities(streaming=True),
        skills=[AgentSkill(id="w", name="w", description="w", tags=["w"])],
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url="http://coder/", protocol_version="1.0")
        ],
    )


class _Done(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await event_queue.enqueue_event(
            context.current_task or new_task_from_user_message(context.message)
        )
        await updater.start_work()
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def _unit_cases(work: Path) -> tuple[dict[str, Callable[[], None]], list[Any]]:
    """The integration's own steps, each on fresh elements every call (a replayed element
    would take the cheaper duplicate path)."""
    origin = Agent(ORIGIN, TRUST, state=FileState(work / "origin.state"))
    planner = Agent(PLANNER, TRUST, state=FileState(work / "planner.state"))
    coder = Agent(CODER, TRUST, state=FileState(work / "coder.state"))

    pool: dict[str, list[Any]] = {"offers": [], "received": [], "statuses": []}

    def prepare(n: int) -> None:
        pool["offers"].clear()
        pool["received"].clear()
        pool["statuses"].clear()
        for i in range(n):
            first = origin.delegate(PLANNER.iss, dialog=f"d-{i}-{time.monotonic_ns()}")
            decision = planner.check_offer(first.handoff, dialog=first.dialog)
            assert decision.received is not None
            token = enter(decision.received)
            try:
                second = planner.delegate(CODER.iss, dialog=None)
            finally:
                leave(token)
            pool["offers"].append(second)
            status = make_status(
                CODER, offer_octets=second.offer, state=StatusState.ACCEPTED, iat=int(time.time())
            )
            pool["statuses"].append((second, status_object(status)))

    def check_offer() -> None:
        delegation = pool["offers"].pop()
        decision = coder.check_offer(delegation.handoff, dialog=delegation.dialog)
        assert decision.run, decision.verdict.detail
        pool["received"].append(decision.received)

    def answer() -> None:
        received = pool["received"].pop()
        coder.answer(received, StatusState.ACCEPTED)
        coder.answer(received, StatusState.COMPLETED)

    def delegate() -> None:
        received = pool["received"][-1]
        token = enter(received)
        try:
            coder.delegate(PLANNER.iss, dialog=None)
        finally:
            leave(token)

    def check_status() -> None:
        delegation, value = pool["statuses"].pop()
        verdict = planner.check_reply(delegation, value)
        assert verdict.outcome.value == "accept", verdict.detail

    cases = {
        "receive an offer (chain of 1)": check_offer,
        "delegate (continue the handoff)": delegate,
        "answer a hop (accepted + completed)": answer,
        "check a status": check_status,
    }
    return {"prepare": prepare, **cases}, [origin, planner, coder]  # type: ignore[dict-item]


async def _exchanges(n: int, work: Path) -> dict[str, list[float]]:
    """Whole non-streaming exchanges, plain and integrated, interleaved."""
    card = _card()
    coder = Agent(CODER, TRUST, state=FileState(work / "coder-e2e.state"))
    planner = Agent(PLANNER, TRUST, state=FileState(work / "planner-e2e.state"))
    apps = {
        "plain": DefaultRequestHandler(_Done(), InMemoryTaskStore(), card),
        "integrated": HandoffRequestHandler(coder, _Done(), InMemoryTaskStore(), card),
    }
    out: dict[str, list[float]] = {name: [] for name in apps}
    clients = {}
    https = []
    for name, handler in apps.items():
        routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
        app = Starlette(routes=routes)
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://coder")
        https.append(http)
        sdk = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        clients[name] = sdk if name == "plain" else HandoffClient(planner, sdk, to=CODER.iss)
    try:
        for i in range(n):
            for name, client in clients.items():
                message = pb.Message(
                    message_id=f"m-{name}-{i}",
                    context_id=f"ctx-{name}-{i}",
                    role=pb.Role.ROLE_USER,
                    parts=[pb.Part(text="go")],
                )
                start = time.perf_counter_ns()
                async for _ in client.send_message(pb.SendMessageRequest(message=message)):
                    pass
                out[name].append((time.perf_counter_ns() - start) / 1000)
    finally:
        for http in https:
            await http.aclose()
        coder.state.close()
        planner.state.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="calls per step case and round")
    parser.add_argument("--exchanges", type=int, default=300, help="A2A exchanges per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {}
    raw: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cases, agents = _unit_cases(work)
        prepare = cases.pop("prepare")
        for _ in range(args.rounds):
            raw.append(raw_verify_us(2000))
            prepare(args.n)
            for name, call in cases.items():
                samples.setdefault(name, []).extend(_times(call, args.n))
            for name, values in asyncio.run(_exchanges(args.exchanges, work)).items():
                samples.setdefault(f"A2A exchange, {name}", []).extend(values)
        for agent in agents:
            agent.state.close()
    verify_us = statistics.median(raw)
    rows = []
    for name, values in samples.items():
        p50, p99 = _quantile(values, 0.5), _quantile(values, 0.99)
        rows.append(
            {
                "case": name,
                "p50_us": round(p50, 1),
                "p99_us": round(p99, 1),
                "p50_x_raw_verify": round(p50 / verify_us, 2),
                "p99_x_raw_verify": round(p99 / verify_us, 2),
            }
        )
    plain = statistics.median(samples["A2A exchange, plain"])
    integrated = statistics.median(samples["A2A exchange, integrated"])
    print(f"raw ES256 verify: {verify_us:.1f} us (median of {args.rounds} rounds)")
    print(f"{'case':38} {'p50 us':>9} {'p99 us':>9} {'p50/raw':>8} {'p99/raw':>8}")
    for r in rows:
        print(
            f"{r['case']:38} {r['p50_us']:9.1f} {r['p99_us']:9.1f} "
            f"{r['p50_x_raw_verify']:8.2f} {r['p99_x_raw_verify']:8.2f}"
        )
    added = integrated - plain
    print(f"an integrated exchange adds {added:.0f} us at the median", end=" ")
    print(f"({added / verify_us:.1f} x raw)")
    RESULTS.mkdir(exist_ok=True)
    result = {
        "python": platform.python_version(),
        "n": args.n,
        "exchanges": args.exchanges,
        "rounds": args.rounds,
        "raw_verify_us": round(verify_us, 2),
        "cases": rows,
        "exchange_added_p50_us": round(added, 1),
        "exchange_added_p50_x_raw_verify": round(added / verify_us, 2),
    }
    (RESULTS / "integration_overhead.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
