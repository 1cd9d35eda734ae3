"""The fuzz targets: one function per parser or endpoint, and the property each must keep.

Shared by the atheris harnesses (``fuzz/fuzz_*.py``, run by ``make fuzz``) and the bounded
hypothesis tests (``tests/test_fuzz.py``, ``tests/web/test_fuzz_http.py``), so both tools
hold the code to the same rule:

- a protocol parser (``jws.parse``, ``cose.parse``, ``parse_object``, ``verify_element``)
  returns or raises one of its declared errors (``handoff_context.errors``);
- the capture readers and carrier extraction (``app.capture.formats``, ``app.capture.carriers``)
and the
  verifier behind them (``verify_inputs``) never raise on bad input at all;
- the HTTP endpoints (``POST /api/v1/ingest``, ``POST /api/v1/verify``) never answer 5xx;
- the OTLP receiver's reading of a ``POST /v1/traces`` body (``app.otlp.receive``) raises
  only its documented refusal (``OtlpError``: 400, 413 or 415 with a detail), and reports a
  span it cannot use as an item of its own.

Any other exception escapes the target, which is how both fuzzers see a crash. Each target
also checks what a success promises (the element's octets and digest are the input's).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import tempfile
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from handoff_context import Context, Element, TrustStore, Verdict, Verifier, parse_object
from handoff_context import _cose as cose
from handoff_context import _jws as jws
from handoff_context._signature import verify_element
from handoff_context.carry import A2A_EXTENSION_URI, MCP_META_KEY
from handoff_context.errors import CheckFailed, EmbeddedKeyError, MalformedError
from handoff_context.vectors import DIRECTORY

from app.capture.carriers import Carried, extract, read_capture
from app.capture.formats import CaptureFormat, CaptureItem, CarrierError, detect_format, read_items
from app.ingest.verifying import VerifyOptions, verify_inputs
from app.otlp.receive import MAX_SPANS, OtlpError, decode_body, found_in, parse_request

# The library's published vectors, and the service's own fuzz regression vectors.
VECTORS = DIRECTORY
FUZZ_VECTORS = Path(__file__).resolve().parents[1] / "tests" / "vectors" / "fuzz"
# The vectors' clock and receiver (handoff_context/vectors/README.md), so that seeds from the
# vectors get past freshness and audience and the fuzzer reaches the checks behind them.
AT = 1_793_000_030
RECEIVER = "spiffe://c.example/agent/tester"
WATCH = (A2A_EXTENSION_URI.encode(), MCP_META_KEY.encode())
# The content types a capture may be sent with (app/web/params.py), and none.
CONTENT_TYPES = (
    None,
    "application/json",
    "application/x-ndjson",
    "application/har+json",
    "application/cbor",
    "application/cbor-seq",
)


@cache
def trust() -> TrustStore:
    """The vectors' trust store: every seed from the vectors is signed by its keys."""
    return TrustStore.from_mapping(json.loads((VECTORS / "trust.json").read_bytes()))


def _check_element(element: Element, data: bytes) -> None:
    assert element.octets == data, "a parsed element must keep the octets as received"
    assert element.digest == hashlib.sha256(data).digest(), "the handoff digest is SHA-256"


def _parsed_then_verified(parse: Any, data: bytes) -> None:
    try:
        element = parse(data)
    except (MalformedError, EmbeddedKeyError):
        return
    _check_element(element, data)
    with contextlib.suppress(CheckFailed):
        verify_element(element, trust())


# --- protocol parsers: declared errors only ----------------------------------------------


def jws_element(data: bytes) -> None:
    """``jws.parse`` then the signature check: MalformedError, EmbeddedKeyError or, from the
    signature check, CheckFailed; nothing else."""
    _parsed_then_verified(jws.parse, data)


def cose_element(data: bytes) -> None:
    """``cose.parse`` (its own strict CBOR reader) then the signature check: as above."""
    _parsed_then_verified(cose.parse, data)


def handoff_value(value: object) -> Verdict:
    """``parse_object`` raises only MalformedError; the whole check pipeline on the same
    value (``Verifier.verify_value``) never raises and always returns a verdict."""
    with contextlib.suppress(MalformedError):
        parse_object(value)
    verdict = Verifier(trust()).verify_value(
        value, Context(now=AT, receiver=RECEIVER), source="fuzz"
    )
    assert isinstance(verdict, Verdict)
    return verdict


def decoded_values(data: bytes) -> Iterator[object]:
    """The values a fuzzer's bytes decode to, as JSON when they look like it, else as a CBOR
    sequence (a bad document yields nothing)."""
    fmt = CaptureFormat.JSON if data.lstrip()[:1] in (b"{", b"[") else CaptureFormat.CBOR
    for item in read_items(data, name="fuzz", fmt=fmt):
        if isinstance(item, CaptureItem):
            yield item.value


def handoff_bytes(data: bytes) -> None:
    """``handoff_value`` over every value the bytes decode to."""
    for value in decoded_values(data):
        handoff_value(value)


# --- capture files and carriers: never raise ---------------------------------------------


def capture_file(data: bytes, fmt: CaptureFormat) -> None:
    """``detect_format`` and ``read_items`` never raise; each item is a payload, an error
    or None (a HAR body that is no JSON)."""
    detect_format(data)
    for item in read_items(data, name="fuzz", fmt=fmt, watch=WATCH):
        assert item is None or isinstance(item, CaptureItem | CarrierError), item
        if isinstance(item, CarrierError):
            assert isinstance(item.detail, str) and item.detail


def carried_value(value: object) -> None:
    """``extract`` never raises on any decoded payload and answers Carried or CarrierError."""
    for found in extract(value, source="fuzz", received_at=AT):
        assert isinstance(found, Carried | CarrierError), found


def capture_carriers(data: bytes, content_type: str | None) -> None:
    """``read_capture`` never raises; every answer is Carried or CarrierError."""
    for found in read_capture(data, name="fuzz", content_type=content_type):
        assert isinstance(found, Carried | CarrierError), found


def capture_verified(data: bytes, content_type: str | None) -> None:
    """``verify_inputs`` (carriers, then the check pipeline) never raises: every bad item is
    a verdict of its own."""
    options = VerifyOptions(at=AT, receiver=RECEIVER)
    report = verify_inputs(
        [("fuzz", data)], trust=trust(), options=options, content_type=content_type
    )
    assert all(isinstance(v, Verdict) for v in report.verdicts)


# --- the OTLP receiver: its documented 4xx only -------------------------------------------


# The shapes a ``POST /v1/traces`` body arrives in: (content type, content coding, whether
# the fuzzer's bytes are gzipped first so that they reach the parser behind the coding).
OTLP_SHAPES: tuple[tuple[str, str | None, bool], ...] = (
    ("application/x-protobuf", None, False),
    ("application/json", None, False),
    ("application/x-protobuf", "gzip", True),
    ("application/json", "gzip", True),
    ("application/x-protobuf", "gzip", False),  # the bytes as the coding: mostly not gzip
    ("application/x-protobuf", "br", False),
    ("text/plain", None, False),
)
OTLP_LIMIT = 64 * 1024  # a small request limit, so the fuzzer reaches it
OTLP_STATUSES = frozenset({400, 413, 415})


def otlp_body(data: bytes, shape: tuple[str, str | None, bool]) -> None:
    """``decode_body`` then ``parse_request`` then ``found_in`` (what ``POST /v1/traces``
    does before the pipeline) raise nothing but OtlpError with a documented status and a
    detail; every span's handoff attribute is a carried object or a CarrierError naming it."""
    media, coding, compress = shape
    body = gzip.compress(data, mtime=0) if compress else data
    try:
        plain = decode_body(body, media=media, encoding=coding, limit=OTLP_LIMIT)
        received = found_in(parse_request(plain, media=media))
    except OtlpError as exc:
        assert exc.status in OTLP_STATUSES, (exc.status, exc.detail)
        assert isinstance(exc.detail, str) and exc.detail
        return
    assert received.spans <= MAX_SPANS
    for found in received.found:
        assert isinstance(found, Carried | CarrierError), found
        assert found.source.startswith("otlp:")
    assert all(p.detail for p in received.problems)


# (body, headers) -> response of ``POST /v1/traces`` with an ingest token
OtlpPost = Callable[[bytes, dict[str, str]], Any]


def http_otlp(data: bytes, shape: tuple[str, str | None, bool], post: OtlpPost) -> None:
    """``POST /v1/traces`` never answers 5xx: 200 with an ExportTraceServiceResponse in the
    request's encoding, or a documented 4xx in the service's error shape."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    media, coding, compress = shape
    headers = {"Content-Type": media} | ({"Content-Encoding": coding} if coding else {})
    response = post(gzip.compress(data, mtime=0) if compress else data, headers)
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code == 200:
        answer = ExportTraceServiceResponse()
        if media == "application/json":
            json_format.Parse(response.text, answer)
        else:
            answer.ParseFromString(response.content)
    else:
        assert response.status_code in {*OTLP_STATUSES, 401, 403}, response.status_code
        body = response.json()
        assert set(body) == {"error"} and body["error"]["code"], body


# --- the HTTP endpoints: never 5xx -------------------------------------------------------


# (path, body, content type, role) -> response
Post = Callable[[str, bytes, "str | None", str], Any]


class Http:
    """The real app on a throwaway SQLite file, started once, with an ingest token (and an
    operator's, for /verify); the clock is pinned at the vectors' time."""

    def __init__(self) -> None:
        from fastapi.testclient import TestClient

        from app.settings import Settings
        from app.store.db import transaction
        from app.store.tokens import Role, create_token
        from app.web.app import create_app

        self._dir = tempfile.TemporaryDirectory(prefix="handoff-fuzz-")
        url = f"sqlite:///{self._dir.name}/fuzz.db"
        settings = Settings(database_url=url, trust_file=VECTORS / "trust.json")
        app = create_app(settings, clock=lambda: AT)
        self.client = TestClient(app, raise_server_exceptions=False)
        self.client.__enter__()  # the lifespan brings the schema to head
        with transaction(app.state.service.engine) as session:
            self.tokens = {
                role: create_token(session, name=f"fuzz-{role}", role=Role(role), now=AT)
                for role in ("ingest", "operator")
            }

    def post(self, path: str, body: bytes, content_type: str | None, role: str) -> Any:
        headers = {"Authorization": f"Bearer {self.tokens[role]}"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        return self.client.post(path, content=body, headers=headers)


@cache
def http() -> Http:
    return Http()


def http_capture(data: bytes, content_type: str | None, post: Post | None = None) -> None:
    """``POST /api/v1/ingest`` (ingest token) and ``POST /api/v1/verify`` (operator token)
    never answer 5xx, and every answer has the documented shape. ``post`` sends one
    request (``Http.post`` by default, a test's own app otherwise)."""
    send = post or http().post
    for path, role in (("/api/v1/ingest", "ingest"), ("/api/v1/verify", "operator")):
        response = send(path, data, content_type, role)
        assert response.status_code < 500, (path, response.status_code, response.text[:500])
        body = response.json()
        if response.status_code == 200:
            assert isinstance(body["verdicts"], list) and isinstance(body["counts"], dict)
            # An item the database could not store is lost: the pipeline must never hand
            # the store what it cannot keep.
            assert body.get("errors", []) == [], body["errors"]
        else:
            assert set(body) == {"error"} and body["error"]["code"], body


def pick(data: bytes, options: tuple[Any, ...]) -> tuple[Any, bytes]:
    """The first byte chooses one of ``options``; the rest is the input (for atheris, whose
    input is one byte string)."""
    if not data:
        return options[0], b""
    return options[data[0] % len(options)], data[1:]
