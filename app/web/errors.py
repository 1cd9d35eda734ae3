"""How every error looks on the wire:
``{"error": {"code", "message", "request_id"[, "details"]}}``.

One handler (``handle``) owns the shape for every exception the app lets out: the service's
own errors (``app.errors.HandoffTraceError``: an ``ApiError`` answers its status, with its
``reason`` as the code and its ``detail`` as the message; any other is a route's bug and
answers 500), Starlette's HTTP errors (404 for an unknown route, 405, 413), request
validation (422, with one ``details`` entry per problem), and a database that does not
answer (503). Pages answer ``PageError`` and ``LoginRequired`` in HTML
(``app.web.sessions``). Anything else is caught by ``app.web.guard`` and answered 500
through ``error_response`` too, logged, and never with a traceback. tests/web/test_errors.py pins
the shape.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextvars import ContextVar
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlmodel import SQLModel
from starlette.exceptions import HTTPException

from app.errors import HandoffTraceError
from app.store.db import unavailable

log = logging.getLogger("handoff_trace.web")
# The id of the request being answered (set by ``app.web.observe``), for every error body.
REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)

# Machine codes by HTTP status, for errors raised without a code of their own.
_CODES = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    409: "conflict",
    413: "payload-too-large",
    415: "unsupported-media-type",
    422: "invalid-request",
    500: "internal-error",
    503: "unavailable",
}


class ErrorDetail(SQLModel):
    """One problem with a request: where (``loc``, e.g. ``["query", "limit"]``) and what."""

    loc: list[str | int]
    message: str


class ErrorBody(SQLModel):
    code: str
    message: str
    details: list[ErrorDetail] | None = None


class ErrorResponse(SQLModel):
    """The body of every error response."""

    error: ErrorBody


def http_code(status: int) -> str:
    """The machine code of an HTTP status, for errors raised without a code of their own."""
    return _CODES.get(status, "error")


class ApiError(HandoffTraceError):
    """An error the API answers on purpose: HTTP ``status``, machine ``code`` (the
    ``reason``), ``message`` for people (the ``detail``)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message, reason=code or http_code(status))
        self.status = status
        # Typed as Starlette types an HTTPException's headers (PayloadTooLarge is both).
        self.headers: Mapping[str, str] | None = dict(headers or {})

    @property
    def code(self) -> str:
        return self.reason

    @property
    def message(self) -> str:
        return self.detail


class PayloadTooLarge(ApiError, HTTPException):
    """A request body over the limit. Also an HTTPException, so FastAPI's own body reading
    lets it through unchanged instead of turning it into a 400."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} octets")
        self.status_code = 413  # what Starlette reads of an HTTPException


# Seconds a client is asked to wait (``Retry-After``) when the database cannot be written.
RETRY_AFTER = 5


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
    details: list[dict[str, Any]] | None = None,
) -> JSONResponse:
    """The one error shape."""
    body: dict[str, Any] = {"code": code or http_code(status), "message": message}
    if details is not None:
        body["details"] = details
    answer_headers = dict(headers or {})
    rid = REQUEST_ID.get()
    if rid is not None:
        body["request_id"] = rid
        answer_headers["X-Request-ID"] = rid
    return JSONResponse({"error": body}, status_code=status, headers=answer_headers)


async def handle(request: Request, exc: Exception) -> JSONResponse:
    """Every exception the app answers, in the one shape."""
    return _answer(request, exc)


def _answer(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, ApiError):
        return error_response(exc.status, exc.detail, code=exc.reason, headers=exc.headers)
    if isinstance(exc, RequestValidationError):
        details = [_detail(e) for e in exc.errors()]
        first = details[0] if details else {"loc": [], "message": "invalid request"}
        where = ".".join(str(part) for part in first["loc"])
        message = f"{where}: {first['message']}" if where else first["message"]
        return error_response(422, message, details=details)
    if isinstance(exc, HTTPException):
        message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = _allowed_methods(request, headers.get("Allow", ""))
        return error_response(exc.status_code, message, headers=headers)
    if isinstance(exc, DBAPIError) and unavailable(exc):
        # The database is down, unreachable, full or read-only: the client may try again;
        # the log says why.
        log.warning("database unavailable: %s", str(exc.orig or exc).strip().splitlines()[0])
        return error_response(
            503,
            "the database is unavailable; try again later",
            headers={"Retry-After": str(RETRY_AFTER)},
        )
    # Anything else, a HandoffTraceError that no route turned into an ApiError among them, is
    # a bug: logged with its traceback, answered without one.
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal error (logged)")


def _allowed_methods(request: Request, fallback: str) -> str:
    """Every method the resource serves (RFC 9110 section 10.2.1), from the app's OpenAPI
    document: Starlette's own 405 names only the methods of the first route matched."""
    route = request.scope.get("route")
    paths = request.app.openapi().get("paths", {})
    operations = paths.get(getattr(route, "path_format", None), {})
    methods = {m.upper() for m in operations if m != "parameters"}
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods)) or fallback


def _detail(error: Mapping[str, Any]) -> dict[str, Any]:
    # ``input`` is left out on purpose: echoing request data back helps no one and can be big.
    loc = [part if isinstance(part, int) else str(part) for part in error.get("loc", ())]
    return {"loc": loc, "message": str(error.get("msg", "invalid"))}


def install(app: FastAPI) -> None:
    """Route every error the app can raise through ``handle``."""
    for kind in (
        HandoffTraceError,
        RequestValidationError,
        HTTPException,
        DBAPIError,
    ):
        app.add_exception_handler(kind, handle)


# For the OpenAPI document: every route lists the errors it may answer with this model.
def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error answers of an operation for OpenAPI: ``statuses``, and always 400, since
    the guard refuses a URL holding NUL before any route sees it (``app.web.guard``)."""
    return {
        status: {"model": ErrorResponse, "description": HTTPStatus(status).phrase}
        for status in sorted({400, *statuses})
    }
