"""``handoff-trace tap``: a reverse proxy in front of an agent whose code cannot change.

It forwards every request to ``--upstream`` and every response back, streamed responses
chunk by chunk as they come, byte for byte; and it reports what passes (requests as
received by ``--receiver``, responses as sent by it) through the library's ``Reporter`` to
the service at ``--service``. It is the library's ASGI tap (``handoff_context.taps.asgi``)
wrapped around a small forwarding app, served by uvicorn.

It is meant to be invisible. What reaches the upstream is what the client sent:
- every header the client sent, in its order, ``Host`` included, except the hop-by-hop ones
  (RFC 9110 section 7.6.1: ``Connection``, ``Keep-Alive``, ``Transfer-Encoding``,
  ``Upgrade``, ... and every header the ``Connection`` header names), which describe one
  connection. Nothing is added (no ``User-Agent``, ``Accept`` or ``Accept-Encoding`` of
  the HTTP client's own). A body is passed on as it arrives, framed as it came (its
  ``Content-Length``, else chunked), never held whole. With ``--forwarded-host`` the
  request names the upstream in ``Host`` instead and the client's ``Host`` travels in
  ``X-Forwarded-Host`` (for an upstream that only answers to its own name);
- every body as it came: a compressed one (``Content-Encoding: gzip`` or ``deflate``) is
  passed on compressed and decompressed only for reporting.
The same holds for the answer on its way back.

Bounds: a client that goes away closes its upstream request at once (a stream the client
dropped does not hold an upstream connection); connecting and waiting for a pooled
connection are bounded, and so is silence on an upstream answer (``--idle-timeout``: an
answer not begun by then is a 504; a stream that sends nothing, not even a keep-alive
comment, for that long is cut, and the client reconnects as it would after any drop).
On SIGTERM or SIGINT the tap stops taking connections, lets open requests finish for
``--shutdown-timeout`` seconds, cancels what is left, flushes the reporter for at most
``FLUSH_TIMEOUT`` seconds and exits 0: it is gone within ``--shutdown-timeout`` +
``FLUSH_TIMEOUT`` seconds (plus a moment).

The ingest token comes from ``--token-file`` or the ``HANDOFF_TRACE_TOKEN`` variable, never
from the command line, where every user of the machine can read it (``ps``).

With ``--enforce`` the tap is the agent's handoff side instead of a watcher: the forwarding
app sits behind ``app.cli.enforce.Enforcer``, which checks every A2A send with the agent's
``handoff_context.agent.Agent`` (``--receiver``, ``--trust``, optionally its key from
``--key-file``) before it is forwarded and signs the statuses of the task states the
answers show; the agent's reports replace the watching tap's. With ``--egress-listen`` the
same process also listens, on loopback, as the agent's HTTP proxy to its ``--delegate``
peers and signs its delegations (``app.cli.egress.Egress``): one uvicorn server with two
sockets (``Listeners`` tells them apart), so one shutdown covers both.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import logging
import os
import signal
import socket
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import anyio
import httpx
from handoff_context.reporter import Reporter
from handoff_context.taps.asgi import HandoffTap

from app.cli.common import EXIT_OK, UsageError, positive_int
from app.errors import HandoffTraceError

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

log = logging.getLogger("handoff_trace.tap")

TOKEN_VARIABLE = "HANDOFF_TRACE_TOKEN"
FLUSH_TIMEOUT = 5.0

# RFC 9110 section 7.6.1 (and the obsolete Proxy-Connection): they describe one connection.
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
    }
)


def add_tap_command(sub: Any) -> None:
    p = sub.add_parser(
        "tap",
        help="a reverse proxy that reports the handoffs passing to and from an agent",
        description="Forward every request to --upstream and every response (streams "
        "included) back unchanged, and report the handoff elements and A2A task states "
        "that pass to the service at --service, as received by --receiver. The ingest "
        f"token is read from --token-file, else from {TOKEN_VARIABLE}.",
    )
    p.add_argument("--listen", required=True, type=host_port, metavar="HOST:PORT")
    p.add_argument("--upstream", required=True, type=http_url, metavar="URL")
    p.add_argument("--receiver", required=True, metavar="ID", help="the agent's identifier")
    p.add_argument("--service", required=True, type=http_url, metavar="URL")
    p.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help=f"a file holding an ingest API token (default: the {TOKEN_VARIABLE} variable)",
    )
    # Refused with a clear message rather than unknown: it was the way once.
    p.add_argument("--token", help=argparse.SUPPRESS)
    p.add_argument(
        "--forwarded-host",
        action="store_true",
        help="send the upstream's own name as Host, and the client's in X-Forwarded-Host "
        "(default: the client's Host goes on unchanged)",
    )
    p.add_argument(
        "--idle-timeout",
        type=seconds,
        default=300.0,
        metavar="SECONDS",
        help="close an upstream answer silent this long (default: 300)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=positive_int,
        default=10,
        metavar="SECONDS",
        help="on SIGTERM, how long open requests may finish before they are cut (default: 10)",
    )
    p.add_argument(
        "--enforce",
        action="store_true",
        help="refuse offers that fail the profile's checks (as --receiver, trusting --trust) "
        "before they reach the agent; with --key-file, sign its statuses",
    )
    p.add_argument("--trust", type=Path, metavar="FILE", help="trust configuration, for --enforce")
    p.add_argument(
        "--key-file",
        type=Path,
        metavar="FILE",
        help="the agent's private JWK (as `keys new` writes it), for --enforce",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="where --enforce keeps the agent's replay memory, in .handoff-state/ (default: .)",
    )
    p.add_argument(
        "--egress-listen",
        type=host_port,
        metavar="HOST:PORT",
        help="with --enforce and --key-file: a loopback address where the agent's HTTP proxy "
        "for its outgoing calls listens; the sidecar signs each delegation's offer there",
    )
    p.add_argument(
        "--delegate",
        nargs=2,
        action="append",
        default=[],
        metavar=("ID", "URL"),
        help="a delegate the agent may call through --egress-listen: its identifier and URL "
        "(repeat it for each; no other target is reached)",
    )
    p.add_argument(
        "--egress-untied",
        choices=("refuse", "new-dialog"),
        default="refuse",
        help="an outgoing call that names no task or dialog of a handoff the agent works "
        "under: refuse it (default), or start a new dialog",
    )
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


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not a number of seconds") from None
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError(f"{text[:60]!r} is not between 0 and 86400 seconds")
    return value


def read_token(token_file: Path | None) -> str:
    """The ingest token: from the file, else from the environment. Raises UsageError."""
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the token file {token_file}: {exc}") from exc
        where = f"the token file {token_file}"
    else:
        token = os.environ.get(TOKEN_VARIABLE, "").strip()
        where = TOKEN_VARIABLE
    if not token:
        raise UsageError(f"no ingest token: pass --token-file FILE or set {TOKEN_VARIABLE}")
    if not token.isprintable() or any(ch.isspace() for ch in token):
        raise UsageError(f"{where} does not hold one token (it has spaces or control characters)")
    return token


def _connection_names(headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """The hop-by-hop headers of one message: the fixed ones and those its ``Connection``
    header names (RFC 9110 section 7.6.1)."""
    named = {
        name.strip().lower()
        for key, value in headers
        if key.lower() == b"connection"
        for name in value.split(b",")
    }
    return _HOP_BY_HOP | named


def end_to_end(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` without the hop-by-hop ones, in their order, names as they came."""
    drop = _connection_names(headers)
    return [(k, v) for k, v in headers if k.lower() not in drop]


def upstream_headers(
    headers: list[tuple[bytes, bytes]], *, upstream: str, forwarded_host: bool
) -> list[tuple[bytes, bytes]]:
    """What the upstream is sent: the client's end-to-end headers, Host included (or, with
    ``forwarded_host``, the upstream's name as Host and the client's as X-Forwarded-Host)."""
    kept = end_to_end(headers)
    if not forwarded_host:
        return kept
    hosts = [v for k, v in kept if k.lower() == b"host"]
    rest = [(k, v) for k, v in kept if k.lower() not in (b"host", b"x-forwarded-host")]
    own = urllib.parse.urlsplit(upstream).netloc.encode("ascii")
    return [(b"host", own), *rest, *((b"x-forwarded-host", h) for h in hosts[:1])]


def forwarding_app(
    upstream: str, client: httpx.AsyncClient, *, forwarded_host: bool = False
) -> Callable[..., Awaitable[None]]:
    """An ASGI app that forwards each HTTP request to ``upstream`` and streams back the
    answer as it comes, until the answer ends or the client goes away."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send, client)
            return
        if scope["type"] != "http":
            return
        path = scope.get("raw_path") or scope["path"].encode()
        if not path.startswith(b"/"):
            # Only origin-form targets: "@host/..." or "http://host/..." appended to the
            # upstream's URL could name another host, and the tap fetches nothing an input
            # asks for.
            await _error(send, "the request target must be a path", status=400)
            return
        url = upstream + path.decode("latin-1")
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        headers = upstream_headers(
            scope["headers"], upstream=upstream, forwarded_host=forwarded_host
        )
        body = _Body(receive, expected=_has_body(scope["headers"]))
        # httpx.Request, not client.build_request: the client's default headers (Accept,
        # Accept-Encoding, User-Agent, Connection) are not the client's to add. The body
        # goes on as it arrives, framed as it came (its Content-Length, else chunked).
        content = body.chunks() if body.expected else None
        request = httpx.Request(scope["method"], url, headers=headers, content=content)
        async with anyio.create_task_group() as group:
            group.start_soon(body.until_disconnect, group.cancel_scope)
            await _exchange(client, request, send)
            group.cancel_scope.cancel()

    return app


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    for key, value in headers:
        name = key.lower()
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
    return False


class _ClientGone(HandoffTraceError):
    """The client went away while its request body was still coming."""

    reason = "client-gone"


class _Body:
    """A request's body, passed on chunk by chunk as it arrives; then the wait for its
    client to go away, which cancels the exchange (closing the upstream request)."""

    def __init__(self, receive: Receive, *, expected: bool) -> None:
        self.receive = receive
        self.expected = expected
        self.done = anyio.Event()
        if not expected:
            self.done.set()

    async def chunks(self) -> AsyncIterator[bytes]:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone("the client went away while sending its request")
            if message.get("body"):
                yield bytes(message["body"])
            if not message.get("more_body", False):
                break
        self.done.set()

    async def until_disconnect(self, scope: anyio.CancelScope) -> None:
        # uvicorn also says "disconnect" once the answer is complete: the exchange is over
        # then, and cancelling it changes nothing.
        await self.done.wait()
        while (await self.receive())["type"] != "http.disconnect":
            pass
        scope.cancel()


async def _exchange(client: httpx.AsyncClient, request: httpx.Request, send: Send) -> None:
    try:
        response = await client.send(request, stream=True)
    except _ClientGone:
        return  # nobody to answer
    except httpx.TimeoutException as exc:  # no connection, no pooled one, or no answer in time
        await _error(send, f"upstream timed out: {type(exc).__name__}", status=504)
        return
    except httpx.HTTPError as exc:
        await _error(send, f"upstream unreachable: {type(exc).__name__}", status=502)
        return
    try:
        kept = end_to_end(response.headers.raw)
        await send({"type": "http.response.start", "status": response.status_code, "headers": kept})
        try:
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as exc:
            # Cut mid-answer (idle too long, the upstream went away): the client's
            # connection is closed too, so it sees a broken answer, not a short one.
            log.warning("upstream answer cut: %s", type(exc).__name__)
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        with anyio.CancelScope(shield=True):
            await response.aclose()


async def _lifespan(receive: Receive, send: Send, client: httpx.AsyncClient) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _error(send: Send, detail: str, *, status: int) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_tap(
    upstream: str, reporter: Reporter, client: httpx.AsyncClient, *, forwarded_host: bool = False
) -> HandoffTap:
    """The tap: the library's ASGI middleware around the forwarding app."""
    return HandoffTap(forwarding_app(upstream, client, forwarded_host=forwarded_host), reporter)


def upstream_client(idle_timeout: float) -> httpx.AsyncClient:
    """The HTTP client to the upstream: no proxy or certificate settings from the
    environment, no redirects followed, no cookies kept, and every wait bounded."""
    timeout = httpx.Timeout(connect=10.0, read=idle_timeout, write=30.0, pool=10.0)
    # Cookies belong to the client and the agent: the tap keeps none (it would only grow).
    keeps_none = http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    return httpx.AsyncClient(
        timeout=timeout, trust_env=False, follow_redirects=False, cookies=keeps_none
    )


def enforcing_agent(args: argparse.Namespace, reporter: Reporter) -> Any:
    """The ``Agent`` the sidecar is for ``--enforce``, or None. Raises UsageError."""
    if not args.enforce:
        if args.trust is not None or args.key_file is not None:
            raise UsageError("--trust and --key-file are for --enforce")
        return None
    if args.trust is None:
        raise UsageError("--enforce needs the trust configuration: --trust FILE")
    try:
        from handoff_context import FileState, Signer, TrustStore
        from handoff_context.agent import Agent

        import app.cli.enforce  # noqa: F401  (needs the a2a-sdk)
    except ImportError as exc:
        raise UsageError(f"--enforce needs the a2a-sdk (handoff-context[a2a]): {exc}") from exc
    from handoff_context.errors import HandoffError, TrustConfigError

    try:
        trust = TrustStore.load(args.trust)
    except (OSError, ValueError, HandoffError, TrustConfigError) as exc:
        raise UsageError(f"cannot use the trust file {args.trust}: {exc}") from exc
    signer = None
    if args.key_file is not None:
        try:
            signer = Signer.load(args.key_file)
        except (OSError, ValueError, HandoffError) as exc:
            raise UsageError(f"cannot use the key file {args.key_file}: {exc}") from exc
        if signer.iss != args.receiver:
            raise UsageError(
                f"the key file names {signer.iss!r}, not the --receiver {args.receiver!r}"
            )
    try:
        state = FileState.for_agent(args.receiver, args.state_dir)
    except OSError as exc:
        raise UsageError(f"cannot keep the agent's state in {args.state_dir}: {exc}") from exc
    return Agent(signer, trust, iss=args.receiver, state=state, reporter=reporter)


def egress_of(args: argparse.Namespace, app: Any, client: httpx.AsyncClient) -> Any:
    """The egress proxy for ``--egress-listen``, or None. Raises UsageError."""
    if args.egress_listen is None:
        return None
    from app.cli.egress import Egress, delegates_of, loopback

    if not args.enforce or args.key_file is None:
        raise UsageError("--egress-listen needs --enforce and the agent's --key-file to sign")
    host = args.egress_listen[0]
    if not loopback(host):
        # Whoever reaches the listener has offers signed with the agent's key.
        raise UsageError(f"--egress-listen must be a loopback address, not {host!r}")
    if args.egress_listen[1] == args.listen[1]:
        # The two listeners are told apart by their port (Listeners).
        raise UsageError("--egress-listen needs a port of its own, not --listen's")
    if not args.delegate:
        raise UsageError("--egress-listen needs at least one --delegate ID URL")
    try:
        delegates = delegates_of(args.delegate)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(str(exc)) from None

    def forwarder(origin: str) -> Any:
        return forwarding_app(origin, client)

    return Egress(app, delegates, forwarder, untied=args.egress_untied, client=client)


class Listeners:
    """One server, two listeners: a request is the egress proxy's when it came to the
    egress listener's socket, else the ingress side's; lifespan goes to the ingress side
    (which closes the shared upstream client)."""

    def __init__(self, ingress: Any, egress: Any, egress_address: tuple[str, int]) -> None:
        self.ingress, self.egress, self.port = ingress, egress, egress_address[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        if scope["type"] != "lifespan" and server and server[1] == self.port:
            await self.egress(scope, receive, send)
        else:
            await self.ingress(scope, receive, send)


def bound(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (raises OSError), as uvicorn binds its own."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _exit_on_term(signum: int, frame: object) -> None:
    raise SystemExit(EXIT_OK)


def cmd_tap(args: argparse.Namespace) -> int:
    import uvicorn

    host, port = args.listen
    if args.token is not None:
        raise UsageError(
            "--token is not taken: every user of the machine can read a command line; "
            f"pass --token-file FILE or set {TOKEN_VARIABLE}"
        )
    token = read_token(args.token_file)
    # The tap owns the order of shutdown (below): the reporter chains no SIGTERM handler.
    reporter = Reporter(args.service, token, receiver=args.receiver, handle_sigterm=False)
    agent = enforcing_agent(args, reporter)
    client = upstream_client(args.idle_timeout)
    egress = None
    if args.delegate and args.egress_listen is None:
        raise UsageError("--delegate is for --egress-listen")
    if agent is None:
        if args.egress_listen is not None:
            raise UsageError("--egress-listen needs --enforce and the agent's --key-file")
        app: Any = build_tap(args.upstream, reporter, client, forwarded_host=args.forwarded_host)
    else:
        from app.cli.enforce import Enforcer

        # The agent reports what it judged and signed, as the in-process integration does;
        # the watching tap would report the same offers a second time.
        forward = forwarding_app(args.upstream, client, forwarded_host=args.forwarded_host)
        app = Enforcer(forward, agent)
        egress = egress_of(args, app, client)
    sockets = []
    for address in (args.listen, args.egress_listen):
        if address is None:
            continue
        try:
            sockets.append(bound(*address))
        except OSError as exc:  # the port is taken, the address is not ours
            for sock in sockets:
                sock.close()
            reporter.close(FLUSH_TIMEOUT)
            if agent is not None:
                agent.state.close()
            raise UsageError(f"cannot listen on {address[0]}:{address[1]}: {exc}") from exc
    if egress is not None:
        app = Listeners(app, egress, args.egress_listen)
    # One owner of shutdown: uvicorn stops accepting on SIGTERM (both listeners), lets open
    # requests finish for --shutdown-timeout and cuts what is left, then raises the signal
    # again, which by default ends the process at once: the reporter would lose what it
    # still holds. Made an exit instead, the ``finally`` below flushes it, then the state
    # is closed.
    signal.signal(signal.SIGTERM, _exit_on_term)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        server_header=False,
        date_header=False,
        timeout_graceful_shutdown=args.shutdown_timeout,
    )
    try:
        uvicorn.Server(config).run(sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()
        reporter.close(FLUSH_TIMEOUT)
        if agent is not None:
            agent.state.close()
    return EXIT_OK
