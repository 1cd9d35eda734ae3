"""Every HTTP request, observed once: its request id, its metrics and its log line.

The request id is the client's ``X-Request-ID`` when it sends a usable one (1 to 128
visible ASCII characters), else a new random one; it is echoed in the response's
``X-Request-ID`` and in every error body (``app.web.errors``), so a client's report and the
log line meet. The route is the matched template (``/api/v1/hops/{iss}/{hop}``), never the
raw path, so metrics keep a bounded set of series; a request no route matched is
``unmatched``. A request that raised is counted and logged as the 500 it becomes.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from typing import Any

from handoff_context import Outcome
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.web import metrics
from app.web.errors import REQUEST_ID

log = logging.getLogger("handoff_trace.request")
ingest_log = logging.getLogger("handoff_trace.ingest")
_USABLE_ID = re.compile(r"[\x21-\x7e]{1,128}")


def observe_ingest(route: str, report: Any, status: int = 200) -> None:
    """One stored ingest (``POST /api/v1/ingest`` or an upload stored from the page): its
    item counters and its one log line (``app.web.logs``). ``report`` is the pipeline's
    ``IngestReport`` (its counts cover every verdict, also those handed to a sink)."""
    counts = report.counts
    outcomes = {o.value: counts[o.value] for o in Outcome if counts[o.value]}
    if report.errors:
        outcomes["error"] = len(report.errors)
    metrics.count_ingest(route, status, outcomes)
    ingest_log.info(
        "%s: %d verdicts, %d stored, %d errors",
        route,
        counts["verdicts"],
        report.stored,
        len(report.errors),
        extra={"route": route, "request_id": REQUEST_ID.get(), "counts": counts},
    )


def request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            text = value.decode("latin-1")
            if _USABLE_ID.fullmatch(text):
                return text
            break
    return secrets.token_hex(8)


def route_of(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    return str(path) if path else "unmatched"


def principal_of(scope: Scope) -> str | None:
    state: dict[str, Any] = scope.get("state") or {}
    principal = state.get("principal")
    if principal is not None:
        return f"token:{principal.name}"
    user = state.get("user_name")
    return None if user is None else f"user:{user}"


class Observe:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(scope)
        scope.setdefault("state", {})["request_id"] = rid
        token = REQUEST_ID.set(rid)
        started = time.perf_counter()
        status = 500

        async def answer(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)["X-Request-ID"] = rid
            await send(message)

        try:
            await self.app(scope, receive, answer)
        finally:
            REQUEST_ID.reset(token)
            seconds = time.perf_counter() - started
            route = route_of(scope)
            metrics.count_request(route, scope["method"], status, seconds)
            log.info(
                "%s %s %d",
                scope["method"],
                route,
                status,
                extra={
                    "request_id": rid,
                    "method": scope["method"],
                    "route": route,
                    "path": scope.get("path", ""),
                    "status": status,
                    "duration_ms": round(seconds * 1000, 3),
                    "principal": principal_of(scope),
                },
            )
