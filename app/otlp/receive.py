"""Handoff elements from OTLP spans (docs/otlp.md, "Receive"): the body of ``POST
/v1/traces`` (OTLP/HTTP, protobuf or JSON, gzip or not) -> carried objects for the one
ingest pipeline.

Where elements ride (``handoff_context.otel`` puts them there):
- span attribute ``handoff.element``: an offer (compact JWS text, or COSE octets), with its
  chain in ``handoff.chain`` (an array, oldest first): one handoff object (profile §1.4);
- span event with attribute ``handoff.element``: a status object (events named
  ``handoff.offer`` hold a handoff object instead, with ``handoff.chain`` beside it);
- ``handoff.received_by`` (span or event) and ``gen_ai.conversation.id`` (span) say what a
  capture record's ``received_by`` and ``dialog`` say (profile §10); the span's start (an
  event's time) is the receive time.

Trace and span ids are hints: they only label the item's source (``otlp trace T span S``)
and never stand in for anything the signatures say. Spans without a handoff attribute are
skipped, whatever else they carry: an agent sends its whole trace.

Refused outright, before anything is judged (``OtlpError``, a 4xx): a content type other
than protobuf or JSON, a content coding other than gzip, a body past the request limit
(after decompression too), a body that is no ``ExportTraceServiceRequest``, more than
``MAX_SPANS`` spans. A span whose handoff attribute is unusable (not text or octets, or
larger than an element may be) is reported as a malformed item, and the request's other
spans are still judged; the answer then is 400 naming the bad spans.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from handoff_context import MAX_ELEMENT_OCTETS
from handoff_context.carry import Carrier, Role
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from app.capture.carriers import Carried, CarrierError, Found
from app.errors import HandoffTraceError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MEDIA_TYPES = (PROTOBUF, JSON)
MAX_SPANS = 4096  # eight of the OpenTelemetry SDK's default batches
ELEMENT = "handoff.element"
CHAIN = "handoff.chain"
RECEIVED_BY = "handoff.received_by"
DIALOG = "gen_ai.conversation.id"
OFFER_EVENT = "handoff.offer"
# An identifier is at most 2048 characters (profile §1.2); a longer hint is dropped.
_MAX_HINT = 2048
NANOS = 1_000_000_000


class OtlpError(HandoffTraceError):
    """The request as a whole cannot be read; ``status`` is the HTTP answer (400, 413,
    415) and ``detail`` says why in one line."""

    reason = "bad-otlp"

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


@dataclass
class Received:
    """What one request held: the carried objects (and per-span problems) in span order."""

    found: list[Found] = field(default_factory=list)
    spans: int = 0
    problems: list[CarrierError] = field(default_factory=list)


def decode_body(body: bytes, *, media: str, encoding: str | None, limit: int) -> bytes:
    """The request body without its content coding. Raises OtlpError."""
    if media not in MEDIA_TYPES:
        raise OtlpError(415, f"content type {media[:100]!r} is not OTLP; send {PROTOBUF} or {JSON}")
    coding = (encoding or "identity").strip().lower()
    if coding == "identity":
        return body
    if coding != "gzip":
        raise OtlpError(415, f"content encoding {coding[:40]!r} is not supported; use gzip")
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        plain = inflate.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpError(400, f"the body is not valid gzip: {exc}") from None
    if len(plain) > limit or inflate.unconsumed_tail:
        raise OtlpError(413, f"the request body is larger than {limit} octets once decompressed")
    if not inflate.eof:
        raise OtlpError(400, "the gzip body is truncated")
    return plain


def parse_request(body: bytes, *, media: str) -> ExportTraceServiceRequest:
    """An ``ExportTraceServiceRequest`` from protobuf or OTLP/JSON. Raises OtlpError."""
    request = ExportTraceServiceRequest()
    if media == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (DecodeError, RecursionError, ValueError) as exc:
            raise OtlpError(
                400, f"the body is not a protobuf ExportTraceServiceRequest ({exc})"
            ) from None
    else:
        try:
            document = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise OtlpError(400, f"the body is not JSON: {str(exc)[:200]}") from None
        if not isinstance(document, dict):
            raise OtlpError(400, "an OTLP/JSON body is an object (ExportTraceServiceRequest)")
        try:
            json_format.ParseDict(_hex_ids(document), request, ignore_unknown_fields=True)
        except (json_format.ParseError, RecursionError, ValueError, TypeError) as exc:
            raise OtlpError(
                400, f"the body is not an OTLP/JSON ExportTraceServiceRequest: {str(exc)[:200]}"
            ) from None
    spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
    if spans > MAX_SPANS:
        raise OtlpError(
            413, f"{spans} spans in one request; send at most {MAX_SPANS} (smaller batches)"
        )
    return request


_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _hex_ids(value: Any) -> Any:
    """OTLP/JSON writes trace and span ids as hex, where protobuf's JSON mapping expects
    base64: convert them (an id that is not hex is dropped; ids are hints only)."""
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key in _ID_KEYS and isinstance(item, str):
            try:
                out[key] = base64.b64encode(bytes.fromhex(item)).decode()
            except ValueError:
                continue
        else:
            out[key] = _hex_ids(item)
    return out


def found_in(request: ExportTraceServiceRequest) -> Received:
    """Every handoff and status object the request's spans carry, in span order."""
    received = Received()
    for r_index, resource in enumerate(request.resource_spans):
        for s_index, scope in enumerate(resource.scope_spans):
            for index, span in enumerate(scope.spans):
                received.spans += 1
                where = f"resource_spans[{r_index}].scope_spans[{s_index}].spans[{index}]"
                for one in _from_span(span, where):
                    received.found.append(one)
                    if isinstance(one, CarrierError):
                        received.problems.append(one)
    return received


def _from_span(span: Span, where: str) -> Iterator[Found]:
    attributes = _map(span.attributes)
    source = _source(span, where)
    dialog = _hint(attributes.get(DIALOG))
    at = span.start_time_unix_nano / NANOS if span.start_time_unix_nano else None
    if ELEMENT in attributes:
        yield _handoff(attributes, source, dialog, at, "offer", Role.OFFER)
    for e_index, event in enumerate(span.events):
        values = _map(event.attributes)
        if ELEMENT not in values:
            continue
        e_source = f"{source} event[{e_index}]"
        e_at = event.time_unix_nano / NANOS if event.time_unix_nano else at
        hints = {**values}
        hints.setdefault(RECEIVED_BY, attributes.get(RECEIVED_BY, AnyValue()))
        if event.name == OFFER_EVENT:
            yield _handoff(hints, e_source, dialog, e_at, "offer", Role.OFFER)
        else:
            yield _handoff(hints, e_source, dialog, e_at, "status", Role.STATUS)


def _handoff(
    values: dict[str, AnyValue],
    source: str,
    dialog: str | None,
    at: float | None,
    member: str,
    role: Role,
) -> Found:
    try:
        obj: dict[str, Any] = {member: _element(values[ELEMENT], ELEMENT)}
        if member == "offer" and CHAIN in values:
            obj["chain"] = _chain(values[CHAIN])
    except _Unusable as exc:
        return CarrierError(source, str(exc))
    return Carried(
        source=source,
        value=obj,
        carrier=Carrier.OTLP,
        dialog=None,
        received_at=at,
        received_by=_hint(values.get(RECEIVED_BY)),
        record_dialog=dialog,
        task_id=None,
        task_state=None,
        role=role,
    )


class _Unusable(HandoffTraceError):
    """A span attribute that cannot hold a handoff element (its span is reported)."""

    reason = "unusable-attribute"


def _element(value: AnyValue, name: str) -> str | bytes:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        element: str | bytes = value.string_value
        size = len(value.string_value.encode())
    elif kind == "bytes_value":
        element = value.bytes_value
        size = len(element)
    else:
        raise _Unusable(f"{name} is {kind or 'empty'}, not JWS text or COSE octets")
    if size > MAX_ELEMENT_OCTETS:
        raise _Unusable(
            f"{name} is {size} octets, over the {MAX_ELEMENT_OCTETS}-octet element limit "
            "(profile §1.2)"
        )
    return element


def _chain(value: AnyValue) -> list[str | bytes]:
    if value.WhichOneof("value") != "array_value":
        raise _Unusable(f"{CHAIN} is not an array of elements")
    return [_element(v, f"{CHAIN}[{i}]") for i, v in enumerate(value.array_value.values)]


def _map(attributes: Iterable[KeyValue]) -> dict[str, AnyValue]:
    return {kv.key: kv.value for kv in attributes}


def _hint(value: AnyValue | None) -> str | None:
    if value is None or value.WhichOneof("value") != "string_value":
        return None
    text = value.string_value
    return text if 0 < len(text) <= _MAX_HINT else None


def _source(span: Span, where: str) -> str:
    """The item's label: where it sat, and the ids it claimed (hints)."""
    trace = binascii.hexlify(span.trace_id).decode()[:32]
    ident = binascii.hexlify(span.span_id).decode()[:16]
    if trace and ident:
        return f"otlp:{where} trace {trace} span {ident}"
    return f"otlp:{where}"
