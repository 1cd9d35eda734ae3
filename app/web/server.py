"""uvicorn's HTTP protocol with a header-read timeout, for ``handoff-trace serve``.

uvicorn closes a connection that stays idle between requests (``timeout_keep_alive``), but
not one that sends a request's line and headers slowly: a client trickling one octet a
second holds its connection, and a worker's file descriptors, for ever (slowloris). Here a
timer starts with the connection, and again with the first octet of each following request;
when the headers are not all in after ``HANDOFF_TRACE_HEADER_SECONDS``, the connection is
closed. The body has no such limit here: the guard middleware counts it against the size
limit as it arrives (``app.web.guard``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_ENV = "HANDOFF_TRACE_HEADER_SECONDS"
DEFAULT_SECONDS = 10.0


class HeaderTimeoutProtocol(H11Protocol):
    """h11 with a header-read deadline (uvicorn's ``http`` option takes the class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_seconds = float(os.environ.get(HEADER_ENV) or DEFAULT_SECONDS)
        self.header_timer: asyncio.TimerHandle | None = None

    def _waiting_for_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _start(self) -> None:
        if self.header_timer is None:
            self.header_timer = self.loop.call_later(self.header_seconds, self._expired)

    def _stop(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _expired(self) -> None:
        self.header_timer = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start()

    def data_received(self, data: bytes) -> None:
        if self._waiting_for_headers():
            self._start()  # a new request begins (a no-op while its timer runs)
        super().data_received(data)
        if not self._waiting_for_headers():
            self._stop()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        super().connection_lost(exc)
