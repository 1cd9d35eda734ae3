"""``handoff-trace tap``: a reverse proxy in front of an agent whose code cannot change.

It forwards every request to ``--upstream`` and every response back, streamed responses
chunk by chunk as they come, byte for byte; and it reports what passes (requests as
received by ``--receiver``, responses as sent by it) through the library's ``Reporter`` to
the service at ``--service``. It is the library's ASGI tap (``handoff_context.taps.asgi``)
wrapped around a small forwarding app, served by uvicorn.

What it changes: nothing in a body; hop-by-hop headers (RFC 9110 section 7.6.1:
``Connection``, ``Keep-Alive``, ``Transfer-Encoding``, ``Upgrade``, ...) are not forwarded,
because they describe one connection, and ``Host`` names the upstream. A body sent
compressed (``Content-Encoding``) is forwarded as it is and not reported.
"""

from __future__ import annotations

import argparse
import json
import signal
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx
from handoff_context.reporter import Reporter
from handoff_context.taps.asgi import HandoffTap

from app.cli.common import EXIT_OK, UsageError

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
    }
)


def add_tap_command(sub: Any) -> None:
    p = sub.add_parser(
        "tap",
        help="a reverse proxy that reports the handoffs passing to and from an agent",
        description="Forward every request to --upstream and every response (streams "
        "included) back unchanged, and report the handoff elements and A2A task states "
        "that pass to the service at --service, as received by --receiver.",
    )
    p.add_argument("--listen", required=True, type=host_port, metavar="HOST:PORT")
    p.add_argument("--upstream", required=True, type=http_url, metavar="URL")
    p.add_argument("--receiver", required=True, metavar="ID", help="the agent's identifier")
    p.add_argument("--service", required=True, type=http_url, metavar="URL")
    p.add_argument("--token", required=True, metavar="TOKEN", help="an ingest API token")
    p.set_defaults(func=cmd_tap)


def host_port(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def http_url(text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not an http(s) URL")
    return text.rstrip("/")


def forwarding_app(upstream: str, client: httpx.AsyncClient) -> Callable[..., Awaitable[None]]:
    """An ASGI app that forwards each HTTP request to ``upstream`` and streams back the
    answer as it comes."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        url = upstream + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
        request = client.build_request(scope["method"], url, headers=headers, content=bytes(body))
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            await _bad_gateway(send, f"upstream unreachable: {type(exc).__name__}")
            return
        try:
            kept = [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP]
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": kept}
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()

    return app


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _bad_gateway(send: Send, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 502, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_tap(upstream: str, reporter: Reporter, client: httpx.AsyncClient) -> HandoffTap:
    """The tap: the library's ASGI middleware around the forwarding app."""
    return HandoffTap(forwarding_app(upstream, client), reporter)


def _exit_on_term(signum: int, frame: object) -> None:
    raise SystemExit(EXIT_OK)


def cmd_tap(args: argparse.Namespace) -> int:
    import uvicorn

    host, port = args.listen
    reporter = Reporter(args.service, args.token, receiver=args.receiver)
    # No timeout on reading: a stream may stay open as long as its task runs.
    client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None), trust_env=False)
    # uvicorn shuts down gracefully on SIGTERM and then raises the signal again, which by
    # default ends the process at once: the reporter would lose what it still holds. Made
    # an exit instead, the ``finally`` below flushes first.
    signal.signal(signal.SIGTERM, _exit_on_term)
    try:
        uvicorn.run(
            build_tap(args.upstream, reporter, client),
            host=host,
            port=port,
            log_level="warning",
            server_header=False,
            date_header=False,
        )
    except OSError as exc:  # the port is taken, the address is not ours
        raise UsageError(f"cannot listen on {host}:{port}: {exc}") from exc
    finally:
        reporter.close(5.0)
    return EXIT_OK
