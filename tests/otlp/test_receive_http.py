"""``POST /v1/traces`` against bad input (issue 23): every malformed request gets a clear
4xx in the one error shape, never a 5xx, and a good span in a bad request is still judged."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from google.protobuf import json_format
from handoff_context import digest_text
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from app.otlp.receive import MAX_SPANS
from tests.conftest import World
from tests.store.builders import T0, bundle, digest, offer, st, status
from tests.web.conftest import Api
from tests.web.test_errors import assert_error

PROTOBUF = "application/x-protobuf"
NANOS = 1_000_000_000


def kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bytes):
        return KeyValue(key=key, value=AnyValue(bytes_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, list):
        items = [AnyValue(string_value=v) for v in value]
        return KeyValue(key=key, value=AnyValue(array_value=ArrayValue(values=items)))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def span(
    n: int,
    *,
    attributes: dict[str, Any] | None = None,
    events: list[tuple[float, dict[str, Any]]] = (),  # type: ignore[assignment]
    at: float = T0 + 1,
) -> Span:
    return Span(
        trace_id=(n + 1).to_bytes(16, "big"),
        span_id=(n + 1).to_bytes(8, "big"),
        name="invoke_agent",
        start_time_unix_nano=int(at * NANOS),
        end_time_unix_nano=int((at + 1) * NANOS),
        attributes=[kv(k, v) for k, v in (attributes or {}).items()],
        events=[
            Span.Event(
                name="handoff.status",
                time_unix_nano=int(t * NANOS),
                attributes=[kv(k, v) for k, v in a.items()],
            )
            for t, a in events
        ],
    )


def request_of(spans: list[Span]) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    )


def offer_span(w: World, n: int = 0, **kw: Any) -> tuple[bytes, Span]:
    octets = offer(w.planner, w.coder, iat=T0)
    attributes = {
        "handoff.element": bundle(octets)["offer"],
        "handoff.received_by": w.coder.iss,
        "gen_ai.conversation.id": "ctx-7c1e",
        **kw,
    }
    return octets, span(n, attributes=attributes)


def post(api: Api, body: bytes, *, content_type: str = PROTOBUF, **kw: Any) -> Any:
    response = api.post("/v1/traces", body, content_type=content_type, role="ingest", **kw)
    assert response.status_code < 500, response.text
    return response


def hop_states(api: Api) -> dict[str, str]:
    hops = api.get("/api/v1/hops").json()["hops"]
    return {h["offer"]: h["state"] for h in hops}


def test_a_good_span_is_judged_and_its_status_events_too(sqlite_api: Api, world: World) -> None:
    octets, good = offer_span(world)
    accepted = status(world.coder, octets, "accepted", iat=T0 + 2)
    good.events.append(
        Span.Event(
            name="handoff.status",
            time_unix_nano=(T0 + 3) * NANOS,
            attributes=[
                kv("handoff.element", st(accepted)["status"]),
                kv("handoff.received_by", world.planner.iss),
            ],
        )
    )
    plain = span(1, attributes={"gen_ai.operation.name": "chat"})  # no handoff: skipped
    response = post(sqlite_api, request_of([plain, good]).SerializeToString())
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == PROTOBUF
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_spans == 0
    assert hop_states(sqlite_api) == {digest_text(digest(octets)): "accepted"}
    verdicts = sqlite_api.get(f"/api/v1/hops/{digest_text(digest(octets))}").json()
    assert verdicts["state"] == "accepted"


def test_otlp_json_with_hex_ids_and_gzip(sqlite_api: Api, world: World) -> None:
    octets, good = offer_span(world)
    document = json_format.MessageToDict(request_of([good]))
    one = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    one["traceId"], one["spanId"] = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
    body = gzip.compress(json.dumps(document).encode())
    response = post(
        sqlite_api, body, content_type="application/json", headers={"Content-Encoding": "gzip"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert hop_states(sqlite_api) == {digest_text(digest(octets)): "offered"}


def test_a_refused_element_is_counted_in_partial_success(sqlite_api: Api, world: World) -> None:
    octets = offer(world.mallory, world.coder, iat=T0)  # not in the trust store
    attributes = {
        "handoff.element": bundle(octets)["offer"],
        "handoff.received_by": world.coder.iss,
    }
    response = post(sqlite_api, request_of([span(0, attributes=attributes)]).SerializeToString())
    assert response.status_code == 200, response.text
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_spans == 1
    assert "untrusted-key" in answer.partial_success.error_message


@pytest.mark.parametrize(
    ("body", "content_type", "headers", "status", "code"),
    [
        (b"\x0a\xff\xff\xff\xff\x0f", PROTOBUF, {}, 400, "bad-otlp"),  # truncated field
        (b"\xff" * 64, PROTOBUF, {}, 400, "bad-otlp"),
        (b"{not json", "application/json", {}, 400, "bad-otlp"),
        (b"[1, 2]", "application/json", {}, 400, "bad-otlp"),
        (b'{"resourceSpans": 7}', "application/json", {}, 400, "bad-otlp"),
        (b"spans", "text/plain", {}, 415, "bad-otlp"),
        (b"", "", {}, 415, "bad-otlp"),
        (b"\x1f\x8b broken", PROTOBUF, {"Content-Encoding": "gzip"}, 400, "bad-otlp"),
        (b"x", PROTOBUF, {"Content-Encoding": "br"}, 415, "bad-otlp"),
    ],
)
def test_malformed_requests_get_a_clear_4xx(
    sqlite_api: Api,
    body: bytes,
    content_type: str,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    response = post(sqlite_api, body, content_type=content_type, headers=headers)
    assert_error(response, status, code)
    assert hop_states(sqlite_api) == {}


def test_a_gzip_bomb_is_refused_past_the_request_limit(sqlite_api: Api) -> None:
    limit = sqlite_api.app.state.service.settings.max_request_bytes
    bomb = gzip.compress(b"\x00" * (limit + 1))
    response = post(sqlite_api, bomb, headers={"Content-Encoding": "gzip"})
    error = assert_error(response, 413, "bad-otlp")
    assert "decompressed" in error["message"]


def test_ten_thousand_spans_are_refused_whole(sqlite_api: Api, world: World) -> None:
    _, good = offer_span(world)
    spans = [good] + [span(n) for n in range(1, 10_000)]
    response = post(sqlite_api, request_of(spans).SerializeToString())
    error = assert_error(response, 413, "bad-otlp")
    assert str(MAX_SPANS) in error["message"]
    assert hop_states(sqlite_api) == {}  # refused before anything was judged


def test_huge_and_mistyped_attributes_spoil_only_their_span(sqlite_api: Api, world: World) -> None:
    octets, good = offer_span(world)
    huge = span(1, attributes={"handoff.element": "e" * 200_000})
    typed = span(2, attributes={"handoff.element": 7})
    chained = span(3, attributes={"handoff.element": "x.y.z", "handoff.chain": "not-a-list"})
    noise = span(4, attributes={"gen_ai.input.messages": "m" * 300_000})  # not ours: ignored
    body = request_of([huge, good, typed, chained, noise]).SerializeToString()
    response = post(sqlite_api, body)
    error = assert_error(response, 400, "bad-otlp-span")
    assert "3 span(s)" in error["message"]
    assert "65536-octet element limit" in error["message"]
    assert "spans[2]" in error["message"] and "int_value" in error["message"]
    # The good span in the bad request was judged and stored all the same.
    assert hop_states(sqlite_api) == {digest_text(digest(octets)): "offered"}


def test_the_ingest_token_is_required(sqlite_api: Api, world: World) -> None:
    _, good = offer_span(world)
    body = request_of([good]).SerializeToString()
    for role, status_code in ((None, 401), ("read", 403)):
        response = sqlite_api.post("/v1/traces", body, content_type=PROTOBUF, role=role)
        assert response.status_code == status_code, response.text
    assert hop_states(sqlite_api) == {}
