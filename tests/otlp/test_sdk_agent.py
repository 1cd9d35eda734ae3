"""A real OpenTelemetry agent sends to us (issue 23): agents instrumented with the
OpenTelemetry SDK and ``opentelemetry-exporter-otlp-proto-http`` put their handoff elements
on spans with ``handoff_context.otel.put_on_span``; ingested through ``POST /v1/traces``,
the hop states and flags equal those the reporter path (``handoff_context.reporter``
posting A2A messages to ``/api/v1/ingest``) gives for the same traffic.

Both services run under uvicorn on loopback, each on a store of its own; the elements are
signed at the wall clock, since both the reporter and the SDK stamp receive times with it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
from handoff_context import Signer, carry
from handoff_context.otel import put_on_span
from handoff_context.reporter import Reporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from app.settings import Settings
from app.web.app import create_app
from tests.conftest import World
from tests.live.servers import serving
from tests.store.builders import bundle, digest, offer, st, status, twin
from tests.web.conftest import make_tokens, write_trust


@contextmanager
def service(url: str, trust: Path) -> Iterator[tuple[str, dict[str, str], Any]]:
    app = create_app(Settings(database_url=url, trust_file=trust))
    with serving(app, lifespan="on") as base:
        yield base, make_tokens(app.state.service.engine), app


def traffic(w: World) -> list[tuple[Signer, dict[str, Any], str]]:
    """(the agent that received it, the handoff or status object, the dialog), in order:
    a chain that completes and then fails below, a rejection, an untrusted sender, an
    equivocating delegator and a status conflict."""
    t = int(time.time())
    p = offer(w.planner, w.coder, iat=t, dialog="d-chain")
    q = offer(w.coder, w.tester, iat=t, prev=digest(p), dialog="d-chain")
    r = offer(w.planner, w.tester, iat=t, dialog="d-reject")
    m = offer(w.mallory, w.coder, iat=t, dialog="d-mallory")
    x1 = offer(w.planner, w.coder, iat=t, dialog="d-split")
    x2 = twin(w.planner, x1, aud=w.tester.iss)
    y = offer(w.planner, w.coder, iat=t, dialog="d-conflict")
    return [
        (w.coder, bundle(p), "d-chain"),
        (w.planner, st(status(w.coder, p, "accepted", iat=t)), "d-chain"),
        (w.tester, bundle(q, p), "d-chain"),
        (w.coder, st(status(w.tester, q, "failed", iat=t, reason="policy")), "d-chain"),
        (w.planner, st(status(w.coder, p, "completed", iat=t)), "d-chain"),
        (w.tester, bundle(r), "d-reject"),
        (w.planner, st(status(w.tester, r, "rejected", iat=t, reason="policy")), "d-reject"),
        (w.coder, bundle(m), "d-mallory"),
        (w.coder, bundle(x1), "d-split"),
        (w.tester, bundle(x2), "d-split"),
        (w.coder, bundle(y), "d-conflict"),
        (w.planner, st(status(w.coder, y, "completed", iat=t)), "d-conflict"),
        (w.planner, st(status(w.coder, y, "failed", iat=t, reason="policy")), "d-conflict"),
    ]


def a2a_message(obj: dict[str, Any], dialog: str) -> dict[str, Any]:
    role = "ROLE_USER" if "offer" in obj else "ROLE_AGENT"
    host = {"messageId": uuid.uuid4().hex, "contextId": dialog, "role": role, "parts": []}
    return carry.put_a2a(host, obj)


def by_reporter(base: str, token: str, sent: list[tuple[Signer, dict[str, Any], str]]) -> None:
    reporters: dict[str, Reporter] = {}
    try:
        for agent, obj, dialog in sent:
            if agent.iss not in reporters:
                reporters[agent.iss] = Reporter(base, token, receiver=agent.iss, interval=0.05)
            reporters[agent.iss].observe_received(a2a_message(obj, dialog))
        for reporter in reporters.values():
            assert reporter.flush(timeout=30), reporter.stats
            assert reporter.stats.refused == 0 and reporter.stats.dropped == 0
    finally:
        for reporter in reporters.values():
            reporter.close()


def by_otel_sdk(base: str, token: str, sent: list[tuple[Signer, dict[str, Any], str]]) -> None:
    """Each agent as an OpenTelemetry-instrumented process of its own: its own provider,
    batch processor and OTLP/HTTP exporter, one span per handoff it takes part in."""
    providers: dict[str, TracerProvider] = {}
    with ExitStack() as stack:
        for agent, obj, dialog in sent:
            provider = providers.get(agent.iss)
            if provider is None:
                provider = TracerProvider(resource=Resource.create({"service.name": agent.iss}))
                exporter = OTLPSpanExporter(
                    endpoint=f"{base}/v1/traces", headers={"Authorization": f"Bearer {token}"}
                )
                provider.add_span_processor(BatchSpanProcessor(exporter))
                stack.callback(provider.shutdown)
                providers[agent.iss] = provider
            tracer = provider.get_tracer("agent")
            with tracer.start_as_current_span("invoke_agent"):
                put_on_span(obj, received_by=agent.iss, dialog=dialog)
        for provider in providers.values():
            assert provider.force_flush(timeout_millis=30_000)


def outcome(base: str, token: str) -> tuple[dict[tuple[str, str], str], set[tuple[str, ...]]]:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=headers) as client:
        hops = client.get("/api/v1/hops").json()["hops"]
        flags = client.get("/api/v1/flags").json()["flags"]
    return (
        {(h["iss"], h["hop"]): h["state"] for h in hops},
        {(f["kind"], f["iss"], f["hop"], f["variant"] or "") for f in flags},
    )


def test_otel_sdk_agents_give_the_reporter_paths_hops_and_flags(
    world: World, databases: Any, tmp_path: Path
) -> None:
    trust = write_trust(world, tmp_path / "trust.json")
    sent = traffic(world)
    with service(databases.new("sqlite"), trust) as (base, tokens, _):
        by_reporter(base, tokens["ingest"], sent)
        reported = outcome(base, tokens["read"])
    with service(databases.new("sqlite"), trust) as (base, tokens, _):
        by_otel_sdk(base, tokens["ingest"], sent)
        traced = outcome(base, tokens["read"])
    hops, flags = reported
    # The traffic did what it was built to do, so the comparison compares something.
    conflict = {(iss, hop) for kind, iss, hop, _ in flags if kind == "status-conflict"}
    others = sorted(state for key, state in hops.items() if key not in conflict)
    assert others == ["completed", "failed", "offered", "rejected"]
    # Which of completed and failed a complete-fail conflict leaves is the lifecycle's rule.
    assert [hops[key] for key in conflict] in (["completed"], ["failed"])
    assert {(kind, variant) for kind, _, _, variant in flags} == {
        ("equivocation", "content"),
        ("status-conflict", "complete-fail"),
        ("rejected-element", "untrusted-key"),
    }
    assert traced == reported
