"""Seed inputs for every fuzz target, taken from the library's published vectors (valid and
invalid) and the fuzz regression vectors (tests/vectors/fuzz), so a fuzzer starts from well-formed
elements, objects and captures in every format and every carrier rather than from nothing.

    python -m fuzz.seeds OUT_DIR      # writes OUT_DIR/<target>/<n>, one seed per file

``seeds(target)`` gives the same inputs to the hypothesis tests.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import cbor2
from google.protobuf import json_format
from handoff_context.carry import A2A_EXTENSION_URI, MCP_META_KEY
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from app.capture.formats import CaptureFormat, detect_format

from .targets import AT, CONTENT_TYPES, FUZZ_VECTORS, OTLP_SHAPES, VECTORS

TARGETS = ("jws", "cose", "handoff", "capture", "carriers", "verify", "http", "otlp")


def _b64u_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@cache
def _documents() -> tuple[dict[str, Any], ...]:
    paths = sorted([*VECTORS.glob("valid/*.json"), *VECTORS.glob("invalid/*.json")])
    return tuple(json.loads(p.read_bytes()) for p in paths)


def payloads() -> Iterator[Any]:
    """Every profile §10 payload of the vectors: JSON handoff/status objects and decoded CBOR
    objects (COSE elements as byte strings)."""
    for doc in _documents():
        if "input" not in doc:
            continue
        for item in doc["input"]:
            if doc.get("input_format") == "cbor":
                yield cbor2.loads(_b64u_decode(item))
            else:
                yield item


def elements() -> Iterator[bytes]:
    """Every element the vectors carry (offer, status, chain), JWS and COSE alike."""
    for payload in payloads():
        if not isinstance(payload, dict):
            continue
        for key in ("offer", "status"):
            if isinstance(payload.get(key), str | bytes):
                yield _octets(payload[key])
        for item in payload.get("chain") or ():
            if isinstance(item, str | bytes):
                yield _octets(item)


def _octets(value: str | bytes) -> bytes:
    return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value


def _wrapped(payload: Any) -> Iterator[Any]:
    """The payload as found raw, in a capture record, and in each carrier of profile §9."""
    yield payload
    yield {"received_at": AT, "received_by": "spiffe://c.example/agent/tester", "payload": payload}
    message = {"messageId": "m-1", "contextId": "dlg-vectors", "role": "ROLE_USER"}
    yield {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {**message, "metadata": {A2A_EXTENSION_URI: payload}}},
    }
    yield {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "kind": "task",
            "id": "t-1",
            "contextId": "dlg-vectors",
            "status": {
                "state": "completed",
                "message": {
                    "kind": "message",
                    "role": "agent",
                    "messageId": "m-2",
                    "metadata": {A2A_EXTENSION_URI: payload},
                },
            },
        },
    }
    yield {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "t", "arguments": {}, "_meta": {MCP_META_KEY: payload}},
    }
    yield {"jsonrpc": "2.0", "id": 2, "result": {"content": [], "_meta": {MCP_META_KEY: payload}}}
    yield {
        "jsonrpc": "2.0",
        "method": "tasks/cancel",
        "params": {"id": "t-1", "metadata": {A2A_EXTENSION_URI: payload}},
    }


def _har(payloads: list[Any]) -> bytes:
    started = datetime.fromtimestamp(AT, UTC).isoformat()
    entries = [
        {
            "startedDateTime": started,
            "request": {"method": "POST", "postData": {"text": json.dumps(p)}},
            "response": {"status": 200, "content": {"text": "{}"}},
        }
        for p in payloads
    ]
    return json.dumps({"log": {"version": "1.2", "entries": entries}}).encode()


def captures() -> Iterator[tuple[str | None, bytes]]:
    """(content type, capture file) pairs: each vector's input as JSON Lines, as a JSON
    array, as HAR, in carriers, and the CBOR ones as CBOR sequences."""
    for doc in _documents():
        if "input" not in doc:
            continue
        if doc.get("input_format") == "cbor":
            items = [_b64u_decode(i) for i in doc["input"]]
            yield "application/cbor", b"".join(items)
            yield None, b"".join(cbor2.dumps(w) for i in items for w in _wrapped(cbor2.loads(i)))
            continue
        inputs = doc["input"]
        yield "application/x-ndjson", "".join(json.dumps(p) + "\n" for p in inputs).encode()
        yield "application/json", json.dumps(inputs).encode()
        yield "application/har+json", _har(inputs)
        yield None, "".join(json.dumps(w) + "\n" for p in inputs for w in _wrapped(p)).encode()


def otlp_requests() -> Iterator[tuple[str, bytes]]:
    """(content type, body) pairs: ``POST /v1/traces`` requests whose spans carry the
    vectors' handoff objects where ``handoff_context.otel`` puts them (an offer and its chain
    as span attributes, a status as a span event), as protobuf and as OTLP/JSON."""
    for index, payload in enumerate(payloads()):
        if not isinstance(payload, dict):
            continue
        request = ExportTraceServiceRequest()
        span = request.resource_spans.add().scope_spans.add().spans.add()
        span.trace_id = hashlib.sha256(b"trace %d" % index).digest()[:16]
        span.span_id = hashlib.sha256(b"span %d" % index).digest()[:8]
        span.name = "invoke_agent"
        span.start_time_unix_nano = AT * 1_000_000_000
        hints = {"gen_ai.conversation.id": "dlg-vectors"}
        if isinstance(payload.get("offer"), str | bytes):
            _put(span.attributes, "handoff.element", payload["offer"])
            chain = [c for c in payload.get("chain") or () if isinstance(c, str | bytes)]
            if chain:
                kv = span.attributes.add()
                kv.key = "handoff.chain"
                for c in chain:
                    _value(kv.value.array_value.values.add(), c)
        if isinstance(payload.get("status"), str | bytes):
            event = span.events.add()
            event.name = "handoff.status"
            event.time_unix_nano = AT * 1_000_000_000
            _put(event.attributes, "handoff.element", payload["status"])
        for key, value in hints.items():
            _put(span.attributes, key, value)
        _put(span.attributes, "handoff.received_by", "spiffe://c.example/agent/tester")
        yield "application/x-protobuf", request.SerializeToString()
        document = json_format.MessageToDict(request)
        for resource in document.get("resourceSpans", []):
            for scope in resource.get("scopeSpans", []):
                for s in scope.get("spans", []):
                    # OTLP/JSON writes ids as hex (protobuf's JSON mapping: base64).
                    for key in ("traceId", "spanId"):
                        s[key] = base64.b64decode(s[key]).hex()
        yield "application/json", json.dumps(document).encode()


def _put(attributes: Any, key: str, value: str | bytes) -> None:
    kv = attributes.add()
    kv.key = key
    _value(kv.value, value)


def _value(target: Any, value: str | bytes) -> None:
    if isinstance(value, bytes):
        target.bytes_value = value
    else:
        target.string_value = value


def regressions(target: str) -> Iterator[bytes]:
    """The fuzz regression vectors for ``target`` (tests/vectors/fuzz/index.json), as its
    harness reads them."""
    for entry in json.loads((FUZZ_VECTORS / "index.json").read_bytes()):
        if entry["target"] == target:
            data = (FUZZ_VECTORS / f"{entry['name']}.bin").read_bytes()
            yield _with_type(entry["content_type"], data) if target == "http" else data


def _with_type(content_type: str | None, body: bytes) -> bytes:
    # The harnesses read the content type from the first byte (targets.pick).
    return bytes([CONTENT_TYPES.index(content_type)]) + body


def seeds(target: str) -> list[bytes]:
    """The seed inputs of ``target``, as its harness reads them."""
    found: list[bytes]
    if target == "jws":
        found = [e for e in elements() if e[:1] != b"\xd2"]
    elif target == "cose":
        found = [e for e in elements() if e[:1] == b"\xd2"]
    elif target == "handoff":
        found = [
            json.dumps(p).encode() if not _has_bytes(p) else cbor2.dumps(p) for p in payloads()
        ]
    elif target == "capture":
        formats = list(CaptureFormat)
        found = [
            bytes([formats.index(detect_format(body, content_type=ct))]) + body
            for ct, body in captures()
        ]
    elif target in ("carriers", "verify", "http"):
        found = [_with_type(ct, body) for ct, body in captures()]
    elif target == "otlp":
        # The first byte picks the shape (targets.pick): plain, and gzipped by the harness.
        found = [
            bytes([i]) + body
            for media, body in otlp_requests()
            for i, (shape_media, _, _) in enumerate(OTLP_SHAPES)
            if shape_media == media
        ]
    else:
        raise ValueError(f"no fuzz target {target!r}; known: {', '.join(TARGETS)}")
    return sorted(set(found) | set(regressions(target)))


def _has_bytes(value: Any) -> bool:
    if isinstance(value, bytes):
        return True
    if isinstance(value, dict):
        return any(_has_bytes(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_bytes(v) for v in value)
    return False


def write(out: Path) -> dict[str, int]:
    counts = {}
    for target in TARGETS:
        folder = out / target
        folder.mkdir(parents=True, exist_ok=True)
        found = seeds(target)
        for data in found:
            (folder / f"seed-{hashlib.sha256(data).hexdigest()[:16]}").write_bytes(data)
        counts[target] = len(found)
    return counts


if __name__ == "__main__":
    for name, count in write(Path(sys.argv[1])).items():
        print(f"{name}: {count} seeds")
