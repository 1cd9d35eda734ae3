"""httpx event hooks that report what an A2A or MCP client sends and receives.

```python
from handoff_context.taps.httpx import async_hooks

client = httpx.AsyncClient(event_hooks=async_hooks(reporter))  # or sync_hooks for Client
```

The a2a-sdk and mcp clients take an ``httpx.AsyncClient``. Each request body is reported
(``observe_sent``, with ``to`` as its receiver when given) and each response
(``observe_received``): a JSON body once read, an event stream event by event as the
client reads it. The response's byte stream is wrapped, not read ahead: the client gets
every chunk unchanged and as soon as httpx has it. httpx is the agent's dependency, not
the library's; it is imported only when these hooks are made.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from handoff_context.reporter import Reporter
from handoff_context.taps._feed import ResponseReader, request_message

log = logging.getLogger("handoff_context.taps")


def _report_request(reporter: Reporter, request: Any, to: str | None) -> None:
    try:
        body = request.content  # raises when the body is a stream not read yet
    except Exception:
        return
    try:
        found = request_message(request.url.path, body)
        if found is not None:
            reporter.observe_sent(found, to=to)
    except Exception:  # the hook must never break the request it watches
        log.debug("handoff tap: could not read a request", exc_info=True)


def _reader(reporter: Reporter, response: Any) -> ResponseReader:
    return ResponseReader(response.headers.get("content-type"), reporter.observe_received)


def _safely(step: Callable[[], None]) -> None:
    try:
        step()
    except Exception:
        log.debug("handoff tap: could not read a response", exc_info=True)


def async_hooks(reporter: Reporter, *, to: str | None = None) -> dict[str, list[Any]]:
    """Event hooks for ``httpx.AsyncClient(event_hooks=...)``."""
    import httpx

    class Tee(httpx.AsyncByteStream):
        def __init__(self, inner: Any, reader: ResponseReader) -> None:
            self.inner, self.reader = inner, reader

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self.inner:
                _safely(functools.partial(self.reader.feed, chunk))
                yield chunk
            _safely(self.reader.close)

        async def aclose(self) -> None:
            await self.inner.aclose()

    async def on_request(request: httpx.Request) -> None:
        _report_request(reporter, request, to)

    async def on_response(response: httpx.Response) -> None:
        response.stream = Tee(response.stream, _reader(reporter, response))

    return {"request": [on_request], "response": [on_response]}


def sync_hooks(reporter: Reporter, *, to: str | None = None) -> dict[str, list[Any]]:
    """Event hooks for ``httpx.Client(event_hooks=...)``."""
    import httpx

    class Tee(httpx.SyncByteStream):
        def __init__(self, inner: Any, reader: ResponseReader) -> None:
            self.inner, self.reader = inner, reader

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self.inner:
                _safely(functools.partial(self.reader.feed, chunk))
                yield chunk
            _safely(self.reader.close)

        def close(self) -> None:
            self.inner.close()

    def on_request(request: httpx.Request) -> None:
        _report_request(reporter, request, to)

    def on_response(response: httpx.Response) -> None:
        response.stream = Tee(response.stream, _reader(reporter, response))

    return {"request": [on_request], "response": [on_response]}
