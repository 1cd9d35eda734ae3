"""httpx event hooks that report what an A2A or MCP client sends and receives.

```python
from handoff_context.taps.httpx import async_hooks

client = httpx.AsyncClient(event_hooks=async_hooks(reporter))  # or sync_hooks for Client
```

The a2a-sdk client takes an ``httpx.AsyncClient``, the mcp 2.x client an
``httpx2.AsyncClient`` (its fork with the same API): the hooks serve both. Each request body
is reported (``observe_sent``, with ``to`` as its receiver when given) and each response
(``observe_received``): a JSON body once read, an event stream event by event as the client
reads it. The response's byte stream is wrapped, not read ahead: the client gets every
chunk unchanged and as soon as httpx has it. httpx is the agent's dependency, not the
library's: the wrapper's base class is taken from the package of the response it wraps.
"""

from __future__ import annotations

import functools
import importlib
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
        encoding = request.headers.get("content-encoding")
        found = request_message(request.url.path, body, encoding)
        if found is not None:
            reporter.observe_sent(found, to=to)
    except Exception:  # the hook must never break the request it watches
        log.debug("handoff tap: could not read a request", exc_info=True)


def _reader(reporter: Reporter, response: Any) -> ResponseReader:
    headers = response.headers
    return ResponseReader(
        headers.get("content-type"), reporter.observe_received, headers.get("content-encoding")
    )


def _safely(step: Callable[[], None]) -> None:
    try:
        step()
    except Exception:
        log.debug("handoff tap: could not read a response", exc_info=True)


@functools.cache
def _async_tee(package: str) -> type:
    base = importlib.import_module(package).AsyncByteStream

    class Tee(base):  # type: ignore[misc,valid-type]
        def __init__(self, inner: Any, reader: ResponseReader) -> None:
            self.inner, self.reader = inner, reader

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self.inner:
                _safely(functools.partial(self.reader.feed, chunk))
                yield chunk
            _safely(self.reader.close)

        async def aclose(self) -> None:
            await self.inner.aclose()

    return Tee


@functools.cache
def _sync_tee(package: str) -> type:
    base = importlib.import_module(package).SyncByteStream

    class Tee(base):  # type: ignore[misc,valid-type]
        def __init__(self, inner: Any, reader: ResponseReader) -> None:
            self.inner, self.reader = inner, reader

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self.inner:
                _safely(functools.partial(self.reader.feed, chunk))
                yield chunk
            _safely(self.reader.close)

        def close(self) -> None:
            self.inner.close()

    return Tee


def _package(response: Any) -> str:
    return type(response).__module__.split(".", 1)[0]  # "httpx" or "httpx2"


def async_hooks(reporter: Reporter, *, to: str | None = None) -> dict[str, list[Any]]:
    """Event hooks for ``httpx.AsyncClient(event_hooks=...)`` (or httpx2's)."""

    async def on_request(request: Any) -> None:
        _report_request(reporter, request, to)

    async def on_response(response: Any) -> None:
        response.stream = _async_tee(_package(response))(
            response.stream, _reader(reporter, response)
        )

    return {"request": [on_request], "response": [on_response]}


def sync_hooks(reporter: Reporter, *, to: str | None = None) -> dict[str, list[Any]]:
    """Event hooks for ``httpx.Client(event_hooks=...)`` (or httpx2's)."""

    def on_request(request: Any) -> None:
        _report_request(reporter, request, to)

    def on_response(response: Any) -> None:
        response.stream = _sync_tee(_package(response))(
            response.stream, _reader(reporter, response)
        )

    return {"request": [on_request], "response": [on_response]}
