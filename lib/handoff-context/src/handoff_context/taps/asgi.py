"""An ASGI middleware that reports what an A2A or MCP server receives and answers.

```python
from handoff_context.taps.asgi import HandoffTap

app = HandoffTap(a2a_or_mcp_asgi_app, reporter)
```

Every HTTP request body is reported (``observe_received``) once it has arrived whole, and
every response (``observe_sent``): a JSON body once complete, an event stream event by event
as each event is sent. A compressed body (``Content-Encoding: gzip`` or ``deflate``) is
read decompressed; it passes on as it is. Messages go through unchanged and at once: the tap
only looks at the ASGI messages as they pass, never holds one back, and a failure inside it
is swallowed (the reporter never raises either).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from handoff_context.reporter import Reporter
from handoff_context.taps._feed import MAX_BODY, ResponseReader, request_message

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("handoff_context.taps")


class HandoffTap:
    """Wraps an ASGI app; reports its HTTP traffic to ``reporter``."""

    def __init__(self, app: ASGIApp, reporter: Reporter) -> None:
        self.app = app
        self.reporter = reporter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        # The raw path: a task id may hold an escaped "/" (the cancel's path names it).
        raw = scope.get("raw_path")
        path = raw.decode("latin-1") if isinstance(raw, bytes) else str(scope.get("path", ""))
        encoding = _header(scope.get("headers"), b"content-encoding")
        exchange = _Exchange(self.reporter, path.split("?", 1)[0], encoding)

        async def tapped_receive() -> Message:
            message = await receive()
            exchange.guard(exchange.request, message)
            return message

        async def tapped_send(message: Message) -> None:
            exchange.guard(exchange.response, message)
            await send(message)

        await self.app(scope, tapped_receive, tapped_send)


class _Exchange:
    def __init__(self, reporter: Reporter, path: str, encoding: str | None) -> None:
        self.reporter = reporter
        self.path = path
        self.encoding = encoding
        self.body = bytearray()
        self.reader: ResponseReader | None = None

    def guard(self, step: Callable[[Message], None], message: Message) -> None:
        try:
            step(message)
        except Exception:  # the tap must never break the traffic it watches
            log.debug("handoff tap: could not read a message", exc_info=True)

    def request(self, message: Message) -> None:
        if message.get("type") != "http.request":
            return
        if len(self.body) <= MAX_BODY:
            self.body += message.get("body", b"")
        if not message.get("more_body", False):
            found = request_message(self.path, bytes(self.body), self.encoding)
            self.body = bytearray()
            if found is not None:
                self.reporter.observe_received(found)

    def response(self, message: Message) -> None:
        kind = message.get("type")
        if kind == "http.response.start":
            headers = message.get("headers")
            media = _header(headers, b"content-type")
            encoding = _header(headers, b"content-encoding")
            self.reader = ResponseReader(media, self.reporter.observe_sent, encoding)
        elif kind == "http.response.body" and self.reader is not None:
            self.reader.feed(message.get("body", b""))
            if not message.get("more_body", False):
                self.reader.close()
                self.reader = None


def _header(headers: Any, name: bytes) -> str | None:
    """One header's value (several joined by commas), or None."""
    values = [v for k, v in headers or () if bytes(k).lower() == name]
    return b", ".join(values).decode("latin-1") if values else None
