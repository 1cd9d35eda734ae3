"""Hops out as OTLP spans (issue 23): the spans' ids, parents, links, attributes, status and
events; the background exporter's retries and its memory of what it sent; the
``export-otlp`` command; the settings. A real OTLP/HTTP receiver on loopback takes the
requests (a small ASGI app under uvicorn); Phoenix is in ``test_phoenix.py``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from handoff_context import digest_text
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, select

from app.cli.root import main
from app.otlp.export import Exporter, Sender, export_since
from app.otlp.ids import span_id, trace_id
from app.settings import Settings, SettingsError
from app.store.models import HopRow
from tests.conftest import World
from tests.live.servers import serving
from tests.store.builders import (
    DIALOG,
    T0,
    bundle,
    digest,
    hop_of,
    offer,
    rec,
    run,
    st,
    status,
    twin,
)
from tests.web.conftest import start


@dataclass
class Sink:
    """An OTLP/HTTP receiver: answers ``fail`` statuses first, then 200, and keeps what it
    took."""

    fail: list[int] = field(default_factory=list)
    taken: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        code = self.fail.pop(0) if self.fail else 200
        if code == 200:
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            self.taken.append((scope["path"], headers, body))
        await send({"type": "http.response.start", "status": code, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def spans(self) -> list[Span]:
        out = []
        for _, _, body in self.taken:
            request = ExportTraceServiceRequest.FromString(body)
            out += [s for r in request.resource_spans for ss in r.scope_spans for s in ss.spans]
        return out


@pytest.fixture
def sink() -> Iterator[tuple[Sink, str]]:
    receiver = Sink()
    with serving(receiver) as base:
        yield receiver, base


@dataclass(frozen=True)
class Chain:
    p: bytes
    q: bytes
    x1: bytes
    accepted_p: bytes  # the verified statuses
    failed_q: bytes
    completed_p: bytes


def load_chain(engine: Engine, w: World, *, now: int = T0 + 30) -> Chain:
    """planner -> coder (completed) -> tester (failed), and a planner that split one hop
    between coder and tester in another dialog (an equivocation flag)."""
    p = offer(w.planner, w.coder, iat=T0)
    q = offer(w.coder, w.tester, iat=T0 + 2, prev=digest(p))
    x1 = offer(w.planner, w.coder, iat=T0 + 3, dialog="ctx-split")
    x2 = twin(w.planner, x1, aud=w.tester.iss)
    accepted_p = status(w.coder, p, "accepted", iat=T0 + 1)
    failed_q = status(w.tester, q, "failed", iat=T0 + 5, reason="policy")
    completed_p = status(w.coder, p, "completed", iat=T0 + 8)
    records = [
        rec(bundle(p), T0 + 1, w.coder.iss),
        rec(st(accepted_p), T0 + 2),
        rec(bundle(q, p), T0 + 3, w.tester.iss),
        rec(st(failed_q), T0 + 6),
        rec(st(completed_p), T0 + 9),
        rec(bundle(x1), T0 + 4, w.coder.iss),
        rec(bundle(x2), T0 + 5, w.tester.iss),
    ]
    report = run(engine, w.trust, records, now=now)
    assert not report.errors
    return Chain(p, q, x1, accepted_p, failed_q, completed_p)


def attrs(s: Span | Span.Link | Span.Event) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in s.attributes:
        kind = kv.value.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = [v.string_value for v in kv.value.array_value.values]
        else:
            out[kv.key] = getattr(kv.value, kind)
    return out


def test_one_span_per_hop_with_derived_ids_parents_links_and_status(
    engine: Engine, world: World, sink: tuple[Sink, str]
) -> None:
    receiver, base = sink
    c = load_chain(engine, world)
    sender = Sender(base, {"Authorization": "Bearer secret-token"})
    try:
        progress: list[tuple[int, int]] = []
        assert export_since(engine, sender, since=0, progress=lambda *a: progress.append(a)) == 3
        assert progress == [(3, 3)]
        first = [body for _, _, body in receiver.taken]
        assert export_since(engine, sender, since=0) == 3
    finally:
        sender.close()
    path, headers, _ = receiver.taken[0]
    assert path == "/v1/traces"
    assert headers["content-type"] == "application/x-protobuf"
    assert headers["authorization"] == "Bearer secret-token"
    # Exporting again sends the very same octets: ids and times derive from the store.
    assert [body for _, _, body in receiver.taken[1:]] == first
    spans = {s.span_id: s for s in receiver.spans()[:3]}
    p, q, x = (spans[span_id(digest(o))] for o in (c.p, c.q, c.x1))
    assert p.trace_id == q.trace_id == trace_id(DIALOG)
    assert x.trace_id == trace_id("ctx-split")
    assert p.parent_span_id == b"" and q.parent_span_id == span_id(digest(c.p))
    assert p.name == f"invoke_agent {world.coder.iss}" and p.kind == Span.SPAN_KIND_CLIENT
    assert (p.start_time_unix_nano, p.end_time_unix_nano) == (T0 * 10**9, (T0 + 9) * 10**9)
    assert attrs(p) | {"handoff.hop.id": None} == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.id": world.coder.iss,
        "gen_ai.caller.name": world.planner.iss,
        "gen_ai.conversation.id": DIALOG,
        "a2a.task.state": "TASK_STATE_COMPLETED",
        "handoff.hop.id": None,
        "handoff.hop.state": "completed",
        "handoff.offer.digest": digest_text(digest(c.p)),
        "handoff.carrier": "raw",
        "handoff.verdict": "accept",
    }
    assert [attrs(link)["handoff.status.state"] for link in p.links] == ["accepted", "completed"]
    assert p.status.code == Status.STATUS_CODE_UNSET and not p.events
    q_attrs = attrs(q)
    assert q_attrs["handoff.prev.digest"] == digest_text(digest(c.p))
    assert q_attrs["handoff.chain.length"] == 2
    assert q_attrs["handoff.reason"] == "policy"
    assert (q.status.code, q.status.message) == (Status.STATUS_CODE_ERROR, "failed")
    # A flagged hop: error status, and the flag as a span event.
    assert x.status.code == Status.STATUS_CODE_ERROR and x.status.message == "equivocation"
    assert attrs(x)["handoff.flag.kinds"] == ["equivocation"]
    assert [(e.name, attrs(e)["handoff.flag.kind"]) for e in x.events] == [
        ("handoff.flag", "equivocation")
    ]


@dataclass
class Clock:
    now: int

    def __call__(self) -> int:
        return self.now


def test_the_background_exporter_retries_and_sends_only_what_changed(
    engine: Engine, world: World, sink: tuple[Sink, str]
) -> None:
    receiver, base = sink
    clock = Clock(T0 + 20)
    exporter = Exporter(engine, Sender(base), clock=clock)
    try:
        assert exporter.run_once() == 0  # nothing derived since it started
        receiver.fail = [503, 503]
        c = load_chain(engine, world, now=T0 + 30)
        assert exporter.backlog() == 3
        # A change waits one round (a hop that changes again meanwhile is sent once).
        assert exporter.run_once() == 0 and receiver.taken == [] and exporter.stats.failures == 0
        clock.now = T0 + 30
        assert exporter.run_once() == 0 and exporter.stats.failures == 1
        assert exporter.run_once() == 0 and exporter.stats.failures == 1  # backing off
        clock.now = int(exporter.retry_at) + 1
        assert exporter.run_once() == 0 and exporter.stats.failures == 2
        assert exporter.stats.last_success == 0 and exporter.backlog() == 3
        clock.now = int(exporter.retry_at) + 1
        assert exporter.run_once() == 3
        assert exporter.stats.last_success == clock.now and exporter.backlog() == 0
        assert {s.span_id for s in receiver.spans()} == {
            span_id(digest(o)) for o in (c.p, c.q, c.x1)
        }
        # Nothing changed: the next round reads no hop at all (no overlap to re-read).
        clock.now += 1
        assert exporter.run_once() == 0
        assert exporter.stats.unchanged == 0 and len(receiver.taken) == 1
        # A retransmission derives its hop again to the same row: read, not built or sent.
        run(engine, world.trust, [rec(bundle(c.x1), T0 + 31, world.coder.iss)], now=T0 + 31)
        assert exporter.backlog() == 1
        assert exporter.run_once() == 0 and exporter.stats.unchanged == 0
        assert exporter.run_once() == 0 and exporter.stats.unchanged == 1
        # A new hop: only its span goes out.
        y = offer(world.planner, world.coder, iat=T0 + 40, dialog="ctx-new")
        clock.now = T0 + 50
        run(engine, world.trust, [rec(bundle(y), T0 + 41, world.coder.iss)], now=T0 + 50)
        assert exporter.run_once() == 0
        assert exporter.run_once() == 1
        assert receiver.spans()[-1].span_id == span_id(digest(y))
        assert exporter.stats.spans == 4 and exporter.backlog() == 0
    finally:
        exporter.close()


def _hop(n: int, *, state: str = "offered") -> dict[str, Any]:
    """The values of a hop row as derivation writes them (``derive_hops``)."""
    return {
        "iss": "spiffe://a.example/agent/planner",
        "hop": f"hop{n:019d}",
        "offer": bytes([n]) * 32,
        "aud": "spiffe://b.example/agent/coder",
        "dialog": "ctx-order",
        "task": None,
        "iat": T0,
        "exp": T0 + 300,
        "state": state,
        "a2a_state": None,
        "accepted_at": None,
        "terminal_at": None,
        "deadline": None,
        "derived_at": T0,
    }


def _write_hop(session: Any, n: int) -> None:
    """What ``derive_hops`` does with a derived hop: stamp it, then upsert it."""
    from app.store.db import upsert_many
    from app.store.models import HopRow
    from app.store.otlp import stamp_changes

    upsert_many(session, HopRow, stamp_changes(session, [_hop(n)]), ["iss", "hop"])


def test_a_change_committed_after_a_later_one_is_not_passed_over(
    engine: Engine, sink: tuple[Sink, str]
) -> None:
    """The change sequence's one hard case: transaction A takes its mark, B takes a higher
    one and commits first. An exporter that moved past B's mark would never see A's hop; the
    horizon keeps it below A's mark until A ends (SQLite: B cannot start until A ends)."""
    from app.store.db import transaction

    receiver, base = sink
    exporter = Exporter(engine, Sender(base), clock=Clock(T0))
    postgresql = engine.dialect.name == "postgresql"
    try:
        with transaction(engine) as a:
            _write_hop(a, 1)  # A's mark is taken, A is not committed
            if postgresql:
                with transaction(engine) as b:
                    _write_hop(b, 2)
                    assert (
                        b.execute(select(HopRow.change)).scalar_one()
                        > a.execute(
                            select(HopRow.change).where(HopRow.hop == _hop(1)["hop"])
                        ).scalar_one()
                    )
            # B (committed on PostgreSQL) waits behind A's mark: nothing is exported yet,
            # however many rounds pass (the second would send what the first settled).
            assert exporter.run_once() == 0 and exporter.run_once() == 0
            assert receiver.taken == [] and exporter.backlog() == (1 if postgresql else 0)
        assert exporter.run_once() == 0  # A's change settles for a round
        assert exporter.run_once() == (2 if postgresql else 1)
        assert {s.span_id for s in receiver.spans()} == {
            span_id(bytes([n]) * 32) for n in ((1, 2) if postgresql else (1,))
        }
        assert exporter.run_once() == 0 and exporter.backlog() == 0
    finally:
        exporter.close()


def _metrics(api: Any) -> dict[str, float]:
    text = api.get("/api/v1/metrics").text
    return {
        sample.name: float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("handoff_trace_otlp_")
    }


def test_the_exporter_metrics_after_a_real_export(
    databases: Any, world: World, trust_file: Path, sink: tuple[Sink, str]
) -> None:
    """``/api/v1/metrics`` tells what this process's exporter did: read after its rounds
    against a real receiver (whichever round exported, the lifespan's first one at start or
    the ones called here, the totals are the same)."""
    receiver, base = sink
    for api in start(databases.new("sqlite"), trust_file, otlp_endpoint=base, otlp_seconds=3600):
        exporter = api.app.state.otlp_exporter
        load_chain(api.engine, world)
        exporter.run_once()  # the changes settle for a round
        exporter.run_once()
        assert _metrics(api) == {
            "handoff_trace_otlp_spans_exported_total": 3,
            "handoff_trace_otlp_export_failures_total": 0,
            "handoff_trace_otlp_last_success_timestamp_seconds": api.clock.now,
            "handoff_trace_otlp_backlog": 0,
        }
        # The receiver fails: the new hop waits in the backlog, the failure is counted.
        receiver.fail = [503]
        y = offer(world.planner, world.coder, iat=T0 + 40, dialog="ctx-new")
        run(api.engine, world.trust, [rec(bundle(y), T0 + 41, world.coder.iss)], now=T0 + 50)
        exporter.run_once()
        exporter.run_once()
        after = _metrics(api)
        assert after["handoff_trace_otlp_export_failures_total"] == 1
        assert after["handoff_trace_otlp_backlog"] == 1
        assert after["handoff_trace_otlp_spans_exported_total"] == 3
    assert len(receiver.spans()) == 3


def test_no_exporter_no_exporter_metrics(sqlite_api: Any) -> None:
    assert _metrics(sqlite_api) == {}


def test_a_receiver_that_refuses_is_skipped_not_retried(
    databases: Any, world: World, sink: tuple[Sink, str]
) -> None:
    from app.store.db import make_engine

    receiver, base = sink
    engine = make_engine(databases.new("sqlite"))
    clock = Clock(T0 + 20)
    exporter = Exporter(engine, Sender(base), clock=clock)
    try:
        load_chain(engine, world, now=T0 + 30)
        receiver.fail = [400]
        clock.now = T0 + 30
        assert exporter.run_once() == 0 and exporter.stats.failures == 0  # settling
        assert exporter.run_once() == 0 and exporter.stats.failures == 1
        assert exporter.backlog() == 0  # skipped, not retried
        assert exporter.retry_at == 0.0 and receiver.taken == []
    finally:
        exporter.close()
        engine.dispose()


def test_export_otlp_command(
    databases: Any,
    world: World,
    sink: tuple[Sink, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.store.db import make_engine

    receiver, base = sink
    url = databases.new("sqlite")
    engine = make_engine(url)
    try:
        load_chain(engine, world)
    finally:
        engine.dispose()
    monkeypatch.setenv("HANDOFF_TRACE_OTLP_HEADERS", "Authorization=Bearer%20tok")
    argv = ["export-otlp", "--db", url, "--endpoint", base, "--since", str(T0 + 3)]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out == f"1 spans exported to {base}/v1/traces\n"
    assert "exported 1 of 1 hops" in err
    assert receiver.taken[0][1]["authorization"] == "Bearer tok"
    receiver.fail = [400]
    assert main(argv) == 1
    _, err = capsys.readouterr()
    assert "answered HTTP 400" in err and "tok" not in err
    monkeypatch.delenv("HANDOFF_TRACE_OTLP_HEADERS")
    assert main(["export-otlp", "--db", url]) == 2
    assert "--endpoint" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HANDOFF_TRACE_OTLP_ENDPOINT": "ftp://x"}, "http:// or https://"),
        ({"HANDOFF_TRACE_OTLP_ENDPOINT": "http://u:secret@x"}, "must not hold credentials"),
        ({"HANDOFF_TRACE_TRACE_URL": "http://jaeger/trace"}, "{trace_id}"),
        (
            {"HANDOFF_TRACE_OTLP_ENDPOINT": "http://x", "HANDOFF_TRACE_OTLP_HEADERS": "tok3n"},
            "name=value pairs",
        ),
        ({"HANDOFF_TRACE_OTLP_SECONDS": "0"}, "at least 1"),
    ],
)
def test_otlp_settings_refuse_unsafe_values(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    assert message in str(caught.value)
    assert "secret" not in str(caught.value) and "tok3n" not in str(caught.value)


def test_otlp_settings_read_headers() -> None:
    settings = Settings.from_env(
        {
            "HANDOFF_TRACE_OTLP_ENDPOINT": "https://otel.example:4318",
            "HANDOFF_TRACE_OTLP_HEADERS": "Authorization=Bearer%20a%2Cb, x-team = blue",
            "HANDOFF_TRACE_TRACE_URL": "http://jaeger:16686/trace/{trace_id}",
        }
    )
    assert settings.otlp_headers == (("Authorization", "Bearer a,b"), ("x-team", "blue"))


def pairs(attributes: Any) -> list[tuple[str, Any]]:
    """Attributes in their order, with their value's kind: the order is part of the octets."""
    out = []
    for kv in attributes:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind)
        if kind == "array_value":
            value = [v.string_value for v in value.values]
        out.append((kv.key, kind, value))
    return out


def shape(s: Span) -> dict[str, Any]:
    """Every field a span has set (a field not listed here fails the test)."""
    assert {f.name for f, _ in s.ListFields()} <= {
        "trace_id",
        "span_id",
        "parent_span_id",
        "name",
        "kind",
        "start_time_unix_nano",
        "end_time_unix_nano",
        "attributes",
        "links",
        "events",
        "status",
    }
    return {
        "ids": (s.trace_id, s.span_id, s.parent_span_id),
        "name": s.name,
        "kind": s.kind,
        "times": (s.start_time_unix_nano, s.end_time_unix_nano),
        "attributes": pairs(s.attributes),
        "links": [(k.trace_id, k.span_id, pairs(k.attributes)) for k in s.links],
        "events": [(e.time_unix_nano, e.name, pairs(e.attributes)) for e in s.events],
        "status": (s.status.code, s.status.message),
    }


def test_the_spans_field_by_field_from_both_paths(
    engine: Engine, world: World, sink: tuple[Sink, str]
) -> None:
    """Pins what the spans say, every field and every attribute in its order, as the
    background exporter and ``export-otlp`` send them (the same octets from both), in
    small pages so that both walks go on from where a page ended."""
    from app import __version__
    from app.store.db import transaction
    from app.store.models import FlagRow

    receiver, base = sink
    w = world
    exporter = Exporter(engine, Sender(base), clock=Clock(T0 + 20), page=3)
    try:
        c = load_chain(engine, w)
        # A hop with a task that expired unanswered.
        z_hop = "hop-z-" + "z" * 20
        z = offer(w.tester, w.planner, iat=T0 + 10, lifetime=5, task="task-9", hop=z_hop)
        records = [rec(bundle(z), T0 + 11, w.planner.iss)]
        assert not run(engine, w.trust, records, now=T0 + 300, at=T0 + 12).errors
        assert exporter.run_once() == 0  # the changes settle for a round
        assert exporter.run_once() == 4
    finally:
        exporter.close()
    sender = Sender(base)
    try:
        assert export_since(engine, sender, since=0, page=2) == 4
    finally:
        sender.close()
    requests = [ExportTraceServiceRequest.FromString(body) for _, _, body in receiver.taken]
    assert [len(r.resource_spans[0].scope_spans[0].spans) for r in requests] == [3, 1, 2, 2]
    for request in requests:
        (resource,) = request.resource_spans
        assert pairs(resource.resource.attributes) == [
            ("service.name", "string_value", "handoff-trace"),
            ("service.version", "string_value", __version__),
        ]
        (scope,) = resource.scope_spans
        assert (scope.scope.name, scope.scope.version) == ("handoff-trace.otlp", __version__)
    sent = [[s for s in r.resource_spans[0].scope_spans[0].spans] for r in requests]
    spans = {s.span_id: s for s in sent[0] + sent[1]}
    again = {s.span_id: s for s in sent[2] + sent[3]}
    assert len(spans) == len(again) == 4
    assert {k: s.SerializeToString() for k, s in spans.items()} == {
        k: s.SerializeToString() for k, s in again.items()
    }
    with transaction(engine) as session:
        (flag,) = session.execute(select(FlagRow)).scalars()
    p, q, x, y = (span_id(digest(o)) for o in (c.p, c.q, c.x1, z))
    dialog = trace_id(DIALOG)
    S = "string_value"

    def link(status: bytes, state: str, reason: str | None = None) -> tuple[Any, ...]:
        extra = [] if reason is None else [("handoff.status.reason", S, reason)]
        return (
            dialog,
            span_id(digest(status)),
            [
                ("handoff.link", S, "status"),
                ("handoff.status.state", S, state),
                ("handoff.status.digest", S, digest_text(digest(status))),
                *extra,
            ],
        )

    def head(delegate: str, delegator: str, conversation: str) -> list[Any]:
        return [
            ("gen_ai.operation.name", S, "invoke_agent"),
            ("gen_ai.agent.id", S, delegate),
            ("gen_ai.caller.name", S, delegator),
            ("gen_ai.conversation.id", S, conversation),
        ]

    assert shape(spans[p]) == {
        "ids": (dialog, p, b""),
        "name": f"invoke_agent {w.coder.iss}",
        "kind": Span.SPAN_KIND_CLIENT,
        "times": (T0 * 10**9, (T0 + 9) * 10**9),
        "attributes": [
            *head(w.coder.iss, w.planner.iss, DIALOG),
            ("a2a.task.state", S, "TASK_STATE_COMPLETED"),
            ("handoff.hop.id", S, hop_of(c.p)[1]),
            ("handoff.hop.state", S, "completed"),
            ("handoff.offer.digest", S, digest_text(digest(c.p))),
            ("handoff.carrier", S, "raw"),
            ("handoff.verdict", S, "accept"),
        ],
        "links": [link(c.accepted_p, "accepted"), link(c.completed_p, "completed")],
        "events": [],
        "status": (Status.STATUS_CODE_UNSET, ""),
    }
    assert shape(spans[q]) == {
        "ids": (dialog, q, p),
        "name": f"invoke_agent {w.tester.iss}",
        "kind": Span.SPAN_KIND_CLIENT,
        "times": ((T0 + 2) * 10**9, (T0 + 6) * 10**9),
        "attributes": [
            *head(w.tester.iss, w.coder.iss, DIALOG),
            ("a2a.task.state", S, "TASK_STATE_FAILED"),
            ("handoff.hop.id", S, hop_of(c.q)[1]),
            ("handoff.hop.state", S, "failed"),
            ("handoff.offer.digest", S, digest_text(digest(c.q))),
            ("handoff.prev.digest", S, digest_text(digest(c.p))),
            ("handoff.carrier", S, "raw"),
            ("handoff.verdict", S, "accept"),
            ("handoff.reason", S, "policy"),
            ("handoff.chain.length", "int_value", 2),
        ],
        "links": [link(c.failed_q, "failed", "policy")],
        "events": [],
        "status": (Status.STATUS_CODE_ERROR, "failed"),
    }
    assert shape(spans[x]) == {
        "ids": (trace_id("ctx-split"), x, b""),
        "name": f"invoke_agent {w.coder.iss}",
        "kind": Span.SPAN_KIND_CLIENT,
        "times": ((T0 + 3) * 10**9, (T0 + 3) * 10**9),
        "attributes": [
            *head(w.coder.iss, w.planner.iss, "ctx-split"),
            ("a2a.task.state", S, "TASK_STATE_SUBMITTED"),
            ("handoff.hop.id", S, hop_of(c.x1)[1]),
            ("handoff.hop.state", S, "offered"),
            ("handoff.offer.digest", S, digest_text(digest(c.x1))),
            ("handoff.carrier", S, "raw"),
            ("handoff.verdict", S, "accept"),
            ("handoff.flag.kinds", "array_value", ["equivocation"]),
        ],
        "links": [],
        "events": [
            (
                flag.opened_at * 10**9,
                "handoff.flag",
                [
                    ("handoff.flag.id", "int_value", flag.id),
                    ("handoff.flag.kind", S, "equivocation"),
                    ("handoff.flag.variant", S, flag.variant),
                    ("handoff.flag.severity", S, flag.severity),
                    ("handoff.flag.detail", S, flag.detail),
                ],
            )
        ],
        "status": (Status.STATUS_CODE_ERROR, "equivocation"),
    }
    assert shape(spans[y]) == {
        "ids": (dialog, y, b""),
        "name": f"invoke_agent {w.planner.iss}",
        "kind": Span.SPAN_KIND_CLIENT,
        "times": ((T0 + 10) * 10**9, (T0 + 15) * 10**9),  # ends at its exp
        "attributes": [
            *head(w.planner.iss, w.tester.iss, DIALOG),
            ("a2a.task.id", S, "task-9"),
            ("handoff.hop.id", S, z_hop),
            ("handoff.hop.state", S, "expired"),
            ("handoff.offer.digest", S, digest_text(digest(z))),
            ("handoff.carrier", S, "raw"),
            ("handoff.verdict", S, "accept"),
        ],
        "links": [],
        "events": [],
        "status": (Status.STATUS_CODE_UNSET, ""),
    }
