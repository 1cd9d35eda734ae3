"""Hops as OTLP spans (docs/otlp.md has the attribute table), built with
``opentelemetry-proto``'s messages.

One span per hop, in the trace of its dialog (``app.otlp.ids``): named ``invoke_agent
{delegate}`` (the GenAI conventions' agent span), kind CLIENT (the delegator invokes the
delegate), its parent the hop its offer's ``prev`` names. A ``prev`` in another dialog
becomes a link instead (a parent must share the trace). Each verified status is a link to a
span id derived from the status's digest, with the state as an attribute; flags are span
events. The span starts at the offer's ``iat`` and ends at the hop's last state change
(terminal, accepted, or ``exp`` for an expired hop), so equal store contents give equal
spans: exporting twice changes nothing.

The status is ERROR for failed and rejected hops and for hops with a flag (the flag kinds
are the message); otherwise UNSET, as the conventions ask of instrumentation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from handoff_context import digest_text
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from app import __version__
from app.otlp.ids import span_id, trace_id
from app.store.otlp import HopTrace

NANOS = 1_000_000_000
SERVICE_NAME = "handoff-trace"
SCOPE_NAME = "handoff-trace.otlp"
# Profile §8's mapping of hop states to A2A 1.0 task states (expired has none).
A2A_STATES = {
    "offered": "TASK_STATE_SUBMITTED",
    "accepted": "TASK_STATE_WORKING",
    "completed": "TASK_STATE_COMPLETED",
    "failed": "TASK_STATE_FAILED",
    "rejected": "TASK_STATE_REJECTED",
    "canceled": "TASK_STATE_CANCELED",
}
ERROR_STATES = frozenset({"failed", "rejected"})
# The method that carries an offer, by carrier (profile §9).
_METHODS = {
    "a2a-1.0": ("a2a.method.name", "SendMessage"),
    "a2a-0.3": ("a2a.method.name", "message/send"),
    "mcp": ("mcp.method.name", "tools/call"),
}


Value = str | int | bool | Sequence[str]


def _value(value: Value) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    return AnyValue(array_value=ArrayValue(values=[AnyValue(string_value=v) for v in value]))


def _attributes(
    pairs: Iterable[tuple[str, str | int | bool | Sequence[str] | None]],
) -> list[KeyValue]:
    return [KeyValue(key=k, value=_value(v)) for k, v in pairs if v is not None]


def _end(t: HopTrace) -> int:
    h = t.hop
    last = t.statuses[-1].iat if t.statuses else None
    candidates = [h.iat, h.terminal_at, h.accepted_at, last]
    if h.state == "expired":
        candidates.append(h.exp)
    return max(c for c in candidates if c is not None)


def hop_span(t: HopTrace) -> Span:
    """The span of one hop."""
    h = t.hop
    trace = trace_id(h.dialog)
    kinds = sorted({f.kind for f in t.flags})
    decisive = next(
        (s for s in reversed(t.statuses) if s.state in ("failed", "rejected", "completed")), None
    )
    method = _METHODS.get(t.carrier or "")
    attributes = _attributes(
        [
            ("gen_ai.operation.name", "invoke_agent"),
            ("gen_ai.agent.id", h.aud),
            ("gen_ai.caller.name", h.iss),
            ("gen_ai.conversation.id", h.dialog),
            ("a2a.task.id", h.task),
            ("a2a.task.state", A2A_STATES.get(h.state)),
            method if method is not None else ("mcp.method.name", None),
            ("handoff.hop.id", h.hop),
            ("handoff.hop.state", h.state),
            ("handoff.offer.digest", digest_text(h.offer)),
            ("handoff.prev.digest", None if t.prev is None else digest_text(t.prev)),
            ("handoff.carrier", t.carrier),
            ("handoff.verdict", "accept" if t.valid else "reject"),
            ("handoff.verdict.reason", None if t.valid else t.fault),
            ("handoff.reason", None if decisive is None else decisive.reason),
            ("handoff.chain.length", t.chain_length),
            ("handoff.flag.kinds", kinds or None),
        ]
    )
    links = [
        Span.Link(
            trace_id=trace,
            span_id=span_id(s.digest),
            attributes=_attributes(
                [
                    ("handoff.link", "status"),
                    ("handoff.status.state", s.state),
                    ("handoff.status.digest", digest_text(s.digest)),
                    ("handoff.status.reason", s.reason),
                ]
            ),
        )
        for s in t.statuses
    ]
    parent = b""
    if t.prev is not None:
        if t.prev_dialog is None or t.prev_dialog == h.dialog:
            parent = span_id(t.prev)
        else:
            links.insert(
                0,
                Span.Link(
                    trace_id=trace_id(t.prev_dialog),
                    span_id=span_id(t.prev),
                    attributes=_attributes([("handoff.link", "prev")]),
                ),
            )
    events = [
        Span.Event(
            time_unix_nano=f.opened_at * NANOS,
            name="handoff.flag",
            attributes=_attributes(
                [
                    ("handoff.flag.id", f.id),
                    ("handoff.flag.kind", f.kind),
                    ("handoff.flag.variant", f.variant),
                    ("handoff.flag.severity", f.severity),
                    ("handoff.flag.detail", f.detail or None),
                ]
            ),
        )
        for f in t.flags
    ]
    if h.state in ERROR_STATES or kinds:
        why = [h.state] if h.state in ERROR_STATES else []
        status = Status(code=Status.STATUS_CODE_ERROR, message=", ".join(why + kinds))
    else:
        status = Status(code=Status.STATUS_CODE_UNSET)
    return Span(
        trace_id=trace,
        span_id=span_id(h.offer),
        parent_span_id=parent,
        name=f"invoke_agent {h.aud}",
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=h.iat * NANOS,
        end_time_unix_nano=_end(t) * NANOS,
        attributes=attributes,
        events=events,
        links=links,
        status=status,
    )


def export_request(spans: Iterable[Span]) -> ExportTraceServiceRequest:
    """One OTLP request holding ``spans`` (``hop_span``)."""
    resource = Resource(
        attributes=_attributes([("service.name", SERVICE_NAME), ("service.version", __version__)])
    )
    scope = InstrumentationScope(name=SCOPE_NAME, version=__version__)
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=resource, scope_spans=[ScopeSpans(scope=scope, spans=list(spans))]
            )
        ]
    )
