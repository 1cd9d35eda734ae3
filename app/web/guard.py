"""The outermost layer of the app (pure ASGI): request size limit and the last-resort 500.

- A body over the limit is refused with 413 before anything parses it: at once when
  ``Content-Length`` says so, and, for a chunked body, as soon as the octets received pass
  the limit (``PayloadTooLarge`` is raised from ``receive`` and answered by the error
  handler, since no response has started yet).
- Anything the app lets escape is logged once and answered 500 in the one error shape,
  never with a traceback.
- A NUL anywhere in the URL is refused with 400 (no parameter of this service can hold
  one, and PostgreSQL would fail on it deep in a query).
- Every response says ``X-Content-Type-Options: nosniff``: element octets and agent-chosen
  strings must never be sniffed into something a browser runs.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.web.errors import PayloadTooLarge, error_response

log = logging.getLogger("handoff_trace.web")


class Guard:
    def __init__(self, app: ASGIApp, *, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _has_nul(scope):
            # No identifier, digest or search text of this service contains NUL, and
            # PostgreSQL's text type cannot hold one: refused here for every route at once.
            await error_response(400, "the URL contains a NUL character")(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared == -1:
            await error_response(400, "Content-Length is not a number")(scope, receive, send)
            return
        if declared is not None and declared > self.max_body:
            too_large = PayloadTooLarge(self.max_body)
            await error_response(413, too_large.detail)(scope, receive, send)
            return

        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:
                    raise PayloadTooLarge(self.max_body)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                headers.append((b"x-content-type-options", b"nosniff"))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except PayloadTooLarge as exc:
            if not started:
                await error_response(413, exc.detail)(scope, receive, guarded_send)
        except Exception as exc:
            log.error(
                "unexpected error on %s %s", scope.get("method"), scope.get("path"), exc_info=exc
            )
            if not started:
                response = error_response(500, "internal error (logged)")
                await response(scope, receive, guarded_send)


def _has_nul(scope: Scope) -> bool:
    """A NUL in the (decoded) path or, percent-encoded or not, in the query string."""
    query: bytes = scope.get("query_string", b"")
    return "\x00" in scope.get("path", "") or b"\x00" in query or b"%00" in query


def _content_length(scope: Scope) -> int | None:
    """The declared body length, None when absent, -1 when not a number."""
    headers: Any = scope.get("headers", [])
    for name, value in headers:
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) < 20 else -1
    return None
