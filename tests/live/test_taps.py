"""The zero-code taps: what passes is reported event by event, and passes unchanged."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
from handoff_context.taps.asgi import HandoffTap
from handoff_context.taps.httpx import async_hooks, sync_hooks
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from app.capture.carriers import A2A_EXTENSION_URI

from .servers import serving

STATUS = {"metadata": {A2A_EXTENSION_URI: {"status": "s"}}, "messageId": "m", "role": "ROLE_AGENT"}


def event(state: str) -> dict[str, Any]:
    update = {"taskId": "t-1", "contextId": "c-1", "status": {"state": state, "message": STATUS}}
    return {"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": update}}


class Seen:
    """Stands where a Reporter would: keeps what the tap reports, in order."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.received: list[Any] = []
        self.changed = threading.Condition()

    def observe_sent(self, message: Any, *, to: str | None = None) -> None:
        with self.changed:
            self.sent.append(message)
            self.changed.notify_all()

    def observe_received(self, message: Any) -> None:
        with self.changed:
            self.received.append(message)
            self.changed.notify_all()


def streaming_app(release: threading.Event) -> Starlette:
    """Answers a POST with an SSE stream whose second event waits for ``release``."""
    import json

    async def rpc(request: Request) -> StreamingResponse:
        await request.body()

        async def events() -> Any:
            yield f"data: {json.dumps(event('TASK_STATE_WORKING'))}\r\n\r\n".encode()
            await asyncio.to_thread(release.wait, 30)
            yield b": keep-alive\r\n\r\n"
            yield f"data: {json.dumps(event('TASK_STATE_COMPLETED'))}\r\n\r\n".encode()

        return StreamingResponse(events(), media_type="text/event-stream")

    async def plain(request: Request) -> JSONResponse:
        return JSONResponse(event("TASK_STATE_FAILED"))

    async def cancel(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse({"id": request.path_params["name"]}, status_code=202)

    return Starlette(
        routes=[
            Route("/", rpc, methods=["POST"]),
            Route("/plain", plain, methods=["POST"]),
            Route("/rest/v1/tasks/{name:path}", cancel, methods=["POST"]),
        ]
    )


REQUEST = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendStreamingMessage",
    "params": {"message": STATUS},
}


def test_httpx_hooks_report_each_event_before_the_next_is_sent() -> None:
    release = threading.Event()
    seen = Seen()
    with serving(streaming_app(release)) as url:

        async def client() -> bytes:
            hooks = async_hooks(seen, to="spiffe://b")  # type: ignore[arg-type]
            async with (
                httpx.AsyncClient(event_hooks=hooks) as http,
                http.stream("POST", url, json=REQUEST) as response,
            ):
                body = b""
                async for chunk in response.aiter_raw():
                    body += chunk
                    if not release.is_set():
                        # The first event was reported while the server still holds the
                        # second: nothing waited for the stream to end.
                        with seen.changed:
                            assert seen.changed.wait_for(lambda: seen.received, 10)
                        release.set()
                return body

        body = asyncio.run(client())
    assert seen.sent == [REQUEST]
    assert seen.received == [event("TASK_STATE_WORKING"), event("TASK_STATE_COMPLETED")]
    assert body.count(b"data: ") == 2 and b": keep-alive" in body  # every byte arrived


def test_sync_hooks_report_a_json_answer_once_read() -> None:
    seen = Seen()
    hooks = sync_hooks(seen)  # type: ignore[arg-type]
    with serving(streaming_app(threading.Event())) as url, httpx.Client(event_hooks=hooks) as http:
        answer = http.post(url + "/plain", json=REQUEST).json()
    assert seen.sent == [REQUEST] and seen.received == [answer] == [event("TASK_STATE_FAILED")]


def test_asgi_tap_passes_every_byte_and_reports_events_as_sent() -> None:
    release = threading.Event()
    release.set()
    seen = Seen()
    plain_app = streaming_app(release)
    tap = HandoffTap(plain_app, seen)  # type: ignore[arg-type]
    with serving(plain_app) as bare, serving(tap) as tapped, httpx.Client() as http:
        untouched = http.post(bare, json=REQUEST)
        through = http.post(tapped, json=REQUEST)
        cancel = http.post(tapped + "/rest/v1/tasks/t%201:cancel", json={"metadata": {}})
    assert through.content == untouched.content
    assert through.headers["content-type"] == untouched.headers["content-type"]
    assert seen.received[0] == REQUEST
    # An HTTP+JSON cancel names its task in the path only: reported as a CancelTask.
    assert seen.received[1]["method"] == "CancelTask"
    assert seen.received[1]["params"] == {"metadata": {}, "id": "t 1"}
    assert seen.sent[:2] == [event("TASK_STATE_WORKING"), event("TASK_STATE_COMPLETED")]
    assert (cancel.status_code, cancel.json()) == (202, {"id": "t 1:cancel"})  # passed on
