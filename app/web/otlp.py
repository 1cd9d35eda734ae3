"""``POST /v1/traces``: OTLP/HTTP in (docs/otlp.md, "Receive").

An OpenTelemetry exporter posts its spans here (``OTEL_EXPORTER_OTLP_ENDPOINT`` set to the
service, ``OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer TOKEN"`` with an ``ingest``
token); the handoff elements its spans carry (``app.otlp.receive``) go through the one
ingest pipeline, as from any other carrier. The query parameters are those of ``POST
/api/v1/ingest`` (profile §12). The answer is an ``ExportTraceServiceResponse`` in the
request's encoding: elements that were judged and refused are counted in its
``partial_success`` (they were kept as evidence all the same). Errors have the service's
one error shape.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)
from starlette.concurrency import run_in_threadpool

from app.ingest.pipeline import ingest_carried
from app.otlp.receive import (
    JSON,
    MEDIA_TYPES,
    PROTOBUF,
    OtlpError,
    decode_body,
    found_in,
    parse_request,
)
from app.web import metrics
from app.web.auth import Ingester
from app.web.errors import ApiError, PayloadTooLarge, documented
from app.web.observe import observe_ingest
from app.web.params import VerifyQuery, reject_unknown_query
from app.web.service import ServiceDep

router = APIRouter(dependencies=[Depends(reject_unknown_query)])
ROUTE = "otlp"

OTLP_BODY = {
    "requestBody": {
        "required": True,
        "description": "An OTLP ExportTraceServiceRequest (gzip allowed).",
        "content": {
            PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
            JSON: {"schema": {"type": "object"}},
        },
    }
}


@router.post(
    "/v1/traces",
    response_class=Response,
    responses={
        200: {
            "description": "An ExportTraceServiceResponse, in the request's encoding",
            "content": {
                PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                JSON: {"schema": {"type": "object"}},
            },
        },
        **documented(401, 403, 413, 415, 422, 503),
    },
    openapi_extra=OTLP_BODY,
    summary="Receive OTLP spans carrying handoff elements",
    tags=["ingest"],
)
async def post_traces(
    request: Request, who: Ingester, service: ServiceDep, params: VerifyQuery
) -> Response:
    """Every ``handoff.element`` on the spans (docs/otlp.md) is verified and stored as by
    ``POST /api/v1/ingest``; spans without one are skipped. A request that cannot be read
    at all is refused (400, 413, 415) and nothing of it is judged; a span whose handoff
    attribute is unusable makes the answer 400 naming it, after the request's other spans
    were judged and stored."""
    limit = service.settings.max_request_bytes
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    try:
        if media not in MEDIA_TYPES:  # before reading the body
            decode_body(b"", media=media, encoding=None, limit=limit)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(limit)
            chunks.append(chunk)
        encoding = request.headers.get("content-encoding")
        body = decode_body(b"".join(chunks), media=media, encoding=encoding, limit=limit)
        received = found_in(parse_request(body, media=media))
    except OtlpError as exc:
        metrics.count_ingest(ROUTE, exc.status)
        raise ApiError(exc.status, exc.detail, code=exc.reason) from None
    except ApiError as exc:
        metrics.count_ingest(ROUTE, exc.status)
        raise
    now = service.clock()
    pipeline = service.pipeline(params.options(service.settings, now=now))
    report = await run_in_threadpool(ingest_carried, pipeline, received.found, now=now)
    observe_ingest(ROUTE, report)
    if received.problems:
        named = "; ".join(f"{p.source}: {p.detail}" for p in received.problems[:5])
        more = len(received.problems) - 5
        raise ApiError(
            400,
            f"{len(received.problems)} span(s) carry an unusable handoff attribute "
            f"({named}{f'; and {more} more' if more > 0 else ''}); the request's other "
            f"{len(received.found) - len(received.problems)} element(s) were judged and stored",
            code="bad-otlp-span",
        )
    refused = [v for v in report.verdicts if v.outcome.value == "reject"]
    answer = ExportTraceServiceResponse()
    if refused:
        reasons = sorted({str(v.reason.value if v.reason else "") for v in refused})
        answer.partial_success.CopyFrom(
            ExportTracePartialSuccess(
                rejected_spans=len(refused),
                error_message=f"{len(refused)} handoff element(s) refused: {', '.join(reasons)}"
                " (kept as evidence)",
            )
        )
    if media == JSON:
        return Response(json_format.MessageToJson(answer), media_type=JSON)
    return Response(answer.SerializeToString(), media_type=PROTOBUF)
