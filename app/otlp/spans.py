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

import base64
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

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


def _put(target: Any, pairs: Iterable[tuple[str, Value | None]]) -> None:
    """Append attributes to a repeated KeyValue field in place (``add()``: about a third of
    the CPU of building each KeyValue and AnyValue and handing over the list)."""
    for key, value in pairs:
        if value is None:
            continue
        kv = target.add()
        kv.key = key
        if isinstance(value, str):  # first: most values are text
            kv.value.string_value = value
        elif isinstance(value, bool):  # before int: a bool is an int
            kv.value.bool_value = value
        elif isinstance(value, int):
            kv.value.int_value = value
        else:
            values = kv.value.array_value.values
            for item in value:
                values.add().string_value = item


def _end(t: HopTrace) -> int:
    end = t.iat
    for c in (t.terminal_at, t.accepted_at, t.statuses[-1].iat if t.statuses else None):
        if c is not None and c > end:
            end = c
    if t.state == "expired" and t.exp > end:
        end = t.exp
    return int(end)


def _text(digest: bytes) -> str:
    """A digest in base64url without padding (profile §1.3), as ``digest_text`` writes it."""
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


_DECISIVE = frozenset({"failed", "rejected", "completed"})


def _put_text(add: Callable[[], Any], key: str, value: str) -> None:
    """One text attribute, through the repeated field's ``add``."""
    kv = add()
    kv.key = key
    kv.value.string_value = value


def hop_span(t: HopTrace, span: Span | None = None) -> Span:
    """The span of one hop, written into ``span`` (e.g. ``scope.spans.add()``) or a new one.

    Each attribute is written where it goes, in the order of the table in docs/otlp.md (the
    order is part of the octets: a re-export sends the same ones); a span has about 18
    attributes and this is most of the export's CPU after the store's reads."""
    span = Span() if span is None else span
    trace = trace_id(t.dialog)
    span.trace_id = trace
    span.span_id = span_id(t.offer)
    span.name = "invoke_agent " + t.aud
    span.kind = Span.SPAN_KIND_CLIENT
    span.start_time_unix_nano = t.iat * NANOS
    span.end_time_unix_nano = _end(t) * NANOS
    add = span.attributes.add
    _put_text(add, "gen_ai.operation.name", "invoke_agent")
    _put_text(add, "gen_ai.agent.id", t.aud)
    _put_text(add, "gen_ai.caller.name", t.iss)
    _put_text(add, "gen_ai.conversation.id", t.dialog)
    if t.task is not None:
        _put_text(add, "a2a.task.id", t.task)
    a2a_state = A2A_STATES.get(t.state)
    if a2a_state is not None:
        _put_text(add, "a2a.task.state", a2a_state)
    method = _METHODS.get(t.carrier) if t.carrier is not None else None
    if method is not None:
        _put_text(add, *method)
    _put_text(add, "handoff.hop.id", t.hop)
    _put_text(add, "handoff.hop.state", t.state)
    _put_text(add, "handoff.offer.digest", _text(t.offer))
    if t.prev is not None:
        _put_text(add, "handoff.prev.digest", _text(t.prev))
    if t.carrier is not None:
        _put_text(add, "handoff.carrier", t.carrier)
    if t.valid:
        _put_text(add, "handoff.verdict", "accept")
    else:
        _put_text(add, "handoff.verdict", "reject")
        if t.fault is not None:
            _put_text(add, "handoff.verdict.reason", t.fault)
    for s in reversed(t.statuses):
        if s.state in _DECISIVE:
            if s.reason is not None:
                _put_text(add, "handoff.reason", s.reason)
            break
    if t.chain_length is not None:
        kv = add()
        kv.key = "handoff.chain.length"
        kv.value.int_value = t.chain_length
    kinds = sorted({f.kind for f in t.flags}) if t.flags else []
    if kinds:
        kv = add()
        kv.key = "handoff.flag.kinds"
        values = kv.value.array_value.values
        for kind in kinds:
            values.add().string_value = kind
    if t.prev is not None:
        if t.prev_dialog is None or t.prev_dialog == t.dialog:
            span.parent_span_id = span_id(t.prev)
        else:
            link = span.links.add()
            link.trace_id = trace_id(t.prev_dialog)
            link.span_id = span_id(t.prev)
            _put(link.attributes, [("handoff.link", "prev")])
    for s in t.statuses:
        link = span.links.add()
        link.trace_id = trace
        link.span_id = span_id(s.digest)
        add = link.attributes.add  # the link's own
        _put_text(add, "handoff.link", "status")
        _put_text(add, "handoff.status.state", s.state)
        _put_text(add, "handoff.status.digest", _text(s.digest))
        if s.reason is not None:
            _put_text(add, "handoff.status.reason", s.reason)
    for f in t.flags:
        event = span.events.add()
        event.time_unix_nano = f.opened_at * NANOS
        event.name = "handoff.flag"
        _put(
            event.attributes,
            [
                ("handoff.flag.id", f.id),
                ("handoff.flag.kind", f.kind),
                ("handoff.flag.variant", f.variant),
                ("handoff.flag.severity", f.severity),
                ("handoff.flag.detail", f.detail or None),
            ],
        )
    if t.state in ERROR_STATES or kinds:
        why = [t.state] if t.state in ERROR_STATES else []
        span.status.code = Status.STATUS_CODE_ERROR
        span.status.message = ", ".join(why + kinds)
    return span


def new_request() -> tuple[ExportTraceServiceRequest, Any]:
    """An OTLP request with its resource and scope, and the scope's repeated ``spans``
    field to write spans into (``hop_span(t, spans.add())``)."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    _put(
        resource.resource.attributes,
        [("service.name", SERVICE_NAME), ("service.version", __version__)],
    )
    scope = resource.scope_spans.add()
    scope.scope.name = SCOPE_NAME
    scope.scope.version = __version__
    return request, scope.spans


def export_request(spans: Iterable[Span]) -> ExportTraceServiceRequest:
    """One OTLP request holding ``spans``."""
    request, into = new_request()
    into.extend(spans)
    return request
