"""``handoff-trace tap`` is invisible: the probes of issue 22, each against real servers.

What reaches the upstream is what the client sent (Host kept, nothing added, the headers
``Connection`` names dropped); a compressed answer passes untouched and is still reported;
a client that drops its stream closes the upstream request (a real MCP server takes the
reconnect, and 500 dropped streams leave the pool free); SIGTERM with an abandoned stream
ends the process within its bound and the reporter's last batch reaches a real service;
the token is never in the process arguments.
"""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import os
import signal
import sqlite3
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.server.mcpserver import MCPServer
from starlette.middleware.gzip import GZipMiddleware

from app.capture.carriers import A2A_EXTENSION_URI
from app.cli.tap import FLUSH_TIMEOUT, build_tap, upstream_client

from .servers import free_port, serving, wait_until
from .service import CLI, service
from .system import TRUST
from .test_taps import Seen

STATUS = {"metadata": {A2A_EXTENSION_URI: {"status": "s"}}, "messageId": "m", "role": "ROLE_AGENT"}


def status_event(task: str, state: str, *, carried: bool = True) -> dict[str, Any]:
    status = {"state": state, "message": STATUS} if carried else {"state": state}
    update = {"taskId": task, "contextId": "c-1", "status": status}
    return {"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": update}}


class Upstream:
    """A plain ASGI upstream: ``/echo`` answers with the request's headers as received;
    ``/status`` with an A2A status update; ``/events`` opens an event stream that sends one
    event and then stays open until the client goes away (``open`` counts those streams)."""

    def __init__(self) -> None:
        self.open = 0
        self.lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/events":
            await self._events(receive, send)
            return
        if scope["path"] == "/never":  # never answers; waits for its client to go
            while (await receive())["type"] != "http.disconnect":
                pass
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/echo":
            answer: Any = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]]
        elif scope["path"] == "/upload":
            answer = {"headers": _text(scope["headers"]), "body": body.hex()}
        else:
            answer = status_event("t-1", "TASK_STATE_COMPLETED")
        body = json.dumps(answer).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        # A header for this hop only, named in Connection (RFC 9110 section 7.6.1).
        headers += [(b"connection", b"x-up-hop"), (b"x-up-hop", b"1")]
        headers += [(b"set-cookie", b"session=s; Path=/")]  # the client's, not the tap's
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _events(self, receive: Any, send: Any) -> None:
        with self.lock:
            self.open += 1
        try:
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            event = status_event("t-2", "TASK_STATE_WORKING", carried=False)  # a host state
            first = f"data: {json.dumps(event)}\n\n"
            await send({"type": "http.response.body", "body": first.encode(), "more_body": True})
            while (await receive())["type"] != "http.disconnect":
                pass
        finally:
            with self.lock:
                self.open -= 1


def _text(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, Upstream]]:
    plain = Upstream()
    # A compressing upstream: gzip when (and only when) the client asks for it.
    with serving(GZipMiddleware(plain, minimum_size=0)) as url:
        yield url, plain


@contextmanager
def tapped(
    upstream: str, *, forwarded_host: bool = False, client: httpx.AsyncClient | None = None
) -> Iterator[tuple[str, Seen]]:
    """The tap's own app (as ``handoff-trace tap`` serves it) in front of ``upstream``; the
    lifespan closes its upstream client."""
    seen = Seen()
    client = client or upstream_client(300.0)
    app = build_tap(upstream, seen, client, forwarded_host=forwarded_host)  # type: ignore[arg-type]
    with serving(app, lifespan="on") as url:
        yield url, seen


def exactly(url: str, method: str, path: str, headers: list[tuple[str, str]], body: bytes = b""):  # type: ignore[no-untyped-def]
    """Send exactly these headers (http.client adds none with putrequest's skips)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        conn.endheaders(body or None)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


SENT = [
    ("Host", "evil.example"),
    ("X-Trace-Me", "1"),
    ("Connection", "keep-alive, X-Hop-Secret"),
    ("X-Hop-Secret", "for this hop only"),
    ("Keep-Alive", "timeout=5"),
    ("Content-Type", "application/json"),
    ("Content-Length", "2"),
]


def test_the_upstream_gets_what_the_client_sent(upstream: tuple[str, Upstream]) -> None:
    url, _ = upstream
    client = upstream_client(300.0)
    with tapped(url, client=client) as (tap, _seen):
        _, direct_headers, direct = exactly(url, "POST", "/echo", SENT, b"{}")
        status, headers, through = exactly(tap, "POST", "/echo", SENT, b"{}")
        # A cookie the upstream set reaches the client, and the tap keeps none: the next
        # request reaches the upstream with no Cookie header the client did not send.
        _, _, again = exactly(tap, "POST", "/echo", SENT, b"{}")
    assert headers["set-cookie"] == "session=s; Path=/"
    assert again == through and len(client.cookies.jar) == 0
    assert status == 200
    # The same on the way back: the upstream's hop-only header stays on its hop.
    assert direct_headers["x-up-hop"] == "1" and "x-up-hop" not in headers
    assert headers["content-type"] == "application/json"
    # Directly, the upstream sees the hop-by-hop headers too; through the tap, Host is kept,
    # the headers Connection names are gone, and nothing was added (no User-Agent, Accept,
    # Accept-Encoding of the tap's HTTP client).
    assert ["x-hop-secret", "for this hop only"] in json.loads(direct)
    assert json.loads(through) == [
        ["host", "evil.example"],
        ["x-trace-me", "1"],
        ["content-type", "application/json"],
        ["content-length", "2"],
    ]


def test_forwarded_host_names_the_upstream_and_forwards_the_clients_host(
    upstream: tuple[str, Upstream],
) -> None:
    url, _ = upstream
    with tapped(url, forwarded_host=True) as (tap, _seen):
        _, _, through = exactly(tap, "POST", "/echo", SENT, b"{}")
    got = json.loads(through)
    assert ["host", urllib.parse.urlsplit(url).netloc] in got
    assert ["x-forwarded-host", "evil.example"] in got
    assert [name for name, _ in got].count("host") == 1


def test_a_real_mcp_servers_host_guard_answers_the_same_through_the_tap() -> None:
    server = MCPServer("guarded")  # guards against DNS rebinding on 127.0.0.1 by default
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "1"},
        },
    }
    body = json.dumps(init).encode()
    headers = [
        ("Host", "evil.example"),
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
    ]
    with serving(server.streamable_http_app(), lifespan="on") as url, tapped(url) as (tap, _):
        direct, _, _ = exactly(url, "POST", "/mcp", headers, body)
        through, _, _ = exactly(tap, "POST", "/mcp", headers, body)
    assert direct == through == 421


def test_gzip_passes_untouched_and_is_reported(upstream: tuple[str, Upstream]) -> None:
    url, _ = upstream
    asked = [("Host", "a.example"), ("Accept-Encoding", "gzip"), ("Content-Length", "2")]
    plain = [("Host", "a.example"), ("Content-Length", "2")]
    with tapped(url) as (tap, seen):
        _, direct_headers, direct = exactly(url, "POST", "/status", asked, b"{}")
        _, headers, through = exactly(tap, "POST", "/status", asked, b"{}")
        _, plain_headers, uncompressed = exactly(tap, "POST", "/status", plain, b"{}")
    assert direct_headers["content-encoding"] == headers["content-encoding"] == "gzip"
    assert through == direct  # the same octets, still compressed
    assert json.loads(gzip.decompress(through)) == status_event("t-1", "TASK_STATE_COMPLETED")
    # A client that did not ask for compression gets none: the tap asked for nothing.
    assert "content-encoding" not in plain_headers
    assert json.loads(uncompressed) == status_event("t-1", "TASK_STATE_COMPLETED")
    # Both answers were reported, the compressed one read decompressed.
    assert seen.sent == [status_event("t-1", "TASK_STATE_COMPLETED")] * 2


def test_a_body_goes_on_as_it_came(upstream: tuple[str, Upstream]) -> None:
    url, _ = upstream
    big = os.urandom(1 << 20)

    def pieces() -> Iterator[bytes]:
        for i in range(0, len(big), 1 << 16):
            yield big[i : i + (1 << 16)]

    with tapped(url) as (tap, _seen), httpx.Client(timeout=30) as http:
        chunked = http.post(tap + "/upload", content=pieces()).json()
        sized = http.post(tap + "/upload", content=big).json()
    # Chunked from the client, chunked to the upstream; sized, with its Content-Length.
    assert chunked["headers"]["transfer-encoding"] == "chunked"
    assert "content-length" not in chunked["headers"]
    assert sized["headers"]["content-length"] == str(len(big))
    assert bytes.fromhex(chunked["body"]) == bytes.fromhex(sized["body"]) == big


def test_an_upstream_silent_past_the_idle_timeout_is_cut(upstream: tuple[str, Upstream]) -> None:
    url, plain = upstream
    app = build_tap(url, Seen(), upstream_client(0.2))  # type: ignore[arg-type]
    with serving(app, lifespan="on") as tap, httpx.Client(timeout=30) as http:
        with http.stream("GET", tap + "/events") as stream:
            chunks = stream.iter_raw()
            assert next(chunks).startswith(b"data: ")
            # The upstream sends nothing more: the tap cuts the answer, and the client
            # sees a broken stream (not a complete one), as after any drop.
            with pytest.raises(httpx.RemoteProtocolError):
                list(chunks)
        wait_until(lambda: plain.open == 0, what="the upstream stream's close")


def test_an_upstream_that_does_not_answer_or_is_not_there_is_a_clear_error(
    upstream: tuple[str, Upstream],
) -> None:
    url, _ = upstream
    nobody = f"http://127.0.0.1:{free_port()}"
    with (
        serving(build_tap(url, Seen(), upstream_client(0.2)), lifespan="on") as slow,  # type: ignore[arg-type]
        tapped(nobody) as (absent, _seen),
        httpx.Client(timeout=30) as http,
    ):
        late = http.get(slow + "/never")
        gone = http.get(absent + "/")
    assert (late.status_code, late.json()) == (504, {"detail": "upstream timed out: ReadTimeout"})
    assert (gone.status_code, gone.json()) == (
        502,
        {"detail": "upstream unreachable: ConnectError"},
    )


@pytest.mark.parametrize("target", ["@127.0.0.1:1/echo", "http://127.0.0.1:1/echo", "*"])
def test_a_target_that_is_not_a_path_is_refused(
    upstream: tuple[str, Upstream], target: str
) -> None:
    # Appended to the upstream's URL, "@host/..." would name another host.
    url, _ = upstream
    with tapped(url) as (tap, _seen):
        status, _, body = exactly(tap, "GET", target, [("Host", "a.example")])
    assert (status, json.loads(body)) == (400, {"detail": "the request target must be a path"})


def test_500_dropped_streams_close_upstream_and_leave_the_pool_free(
    upstream: tuple[str, Upstream],
) -> None:
    url, plain = upstream
    with tapped(url) as (tap, seen), httpx.Client(timeout=30) as http:
        for _ in range(500):
            with http.stream("GET", tap + "/events") as stream:
                assert stream.status_code == 200
                assert next(stream.iter_raw()).startswith(b"data: ")
            # Leaving the block closed the connection mid-stream: the client is gone.
        # Every upstream stream was closed with its client (the tap's pool holds 100).
        wait_until(lambda: plain.open == 0, what=lambda: f"{plain.open} upstream streams")
        assert http.post(tap + "/echo", content=b"{}").status_code == 200
    first = status_event("t-2", "TASK_STATE_WORKING", carried=False)
    assert seen.sent.count(first) == 500  # each stream's first event was reported


def mcp_session(url: str, http: httpx.Client) -> dict[str, str]:
    """Initialize an MCP session over Streamable HTTP; the headers that name it."""
    accept = {"Accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "1"},
        },
    }
    answer = http.post(url + "/mcp", json=init, headers=accept)
    assert answer.status_code == 200, answer.text
    session = {
        "mcp-session-id": answer.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert http.post(url + "/mcp", json=done, headers={**accept, **session}).status_code == 202
    return session


def drop_and_reconnect(url: str) -> int:
    """Open an MCP session's GET stream, drop it, and open it again; the status of the
    reconnect. The server takes one GET stream per session (a second one is 409) until
    it sees the first one's client go away, which takes a moment: the reconnect is tried
    until it is not refused, for at most 30 s."""
    with httpx.Client(timeout=30) as http:
        session = mcp_session(url, http)
        headers = {"Accept": "text/event-stream", **session}
        with http.stream("GET", url + "/mcp", headers=headers) as first:
            assert first.status_code == 200
        statuses: list[int] = []

        def reconnected() -> bool:
            with http.stream("GET", url + "/mcp", headers=headers) as again:
                statuses.append(again.status_code)
            return again.status_code != 409

        wait_until(reconnected, what=lambda: f"a reconnect ({statuses[-3:]})", interval=0.05)
        return statuses[-1]


def test_an_mcp_client_that_drops_its_stream_reconnects_through_the_tap() -> None:
    app = MCPServer("streams").streamable_http_app()
    with serving(app, lifespan="on") as url, tapped(url) as (tap, _seen):
        assert drop_and_reconnect(url) == drop_and_reconnect(tap) == 200


# --- the command itself: SIGTERM, the token --------------------------------------------


def test_sigterm_with_an_abandoned_stream_exits_in_bound_and_flushes(
    tmp_path: Path, upstream: tuple[str, Upstream]
) -> None:
    """A watching tap with a stream abandoned on it, then (same service) an enforcing one
    with ``--egress-listen`` and a stream abandoned on its egress listener: one server owns
    both listeners, so that stream is cut like the other, and the enforcing agent's reporter
    (which chains no SIGTERM handler of its own: the tap owns the order) flushes the offer
    it judged just before."""
    from handoff_context import handoff_object, make_offer

    from .system import CODER, PLANNER

    url, plain = upstream
    key = tmp_path / "coder.jwk"
    CODER.save(key)
    with service(tmp_path, TRUST) as svc:
        port = free_port()
        tap = f"http://127.0.0.1:{port}"
        argv = [
            *(CLI, "tap", "--listen", f"127.0.0.1:{port}", "--upstream", url),
            *("--service", svc.url, "--shutdown-timeout", "1"),
        ]
        watching = [*argv, "--receiver", "spiffe://b/agent/coder"]
        with _tap_until_sigterm(watching, svc.token, tmp_path / "tap.log") as proc:
            # The token is nowhere in the process's arguments (what `ps` shows).
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            assert svc.token.encode() not in cmdline
            _abandon_a_stream(tap + "/events", proc)
        wait_until(lambda: plain.open == 0, what="the upstream stream's close")

        egress = free_port()
        enforcing = [
            *argv,
            *("--receiver", CODER.iss, "--enforce", "--trust", str(svc.trust)),
            *("--key-file", str(key), "--state-dir", str(tmp_path)),
            *("--egress-listen", f"127.0.0.1:{egress}"),
            *("--delegate", "spiffe://f.example/agent/streamer", url),
        ]
        with _tap_until_sigterm(enforcing, svc.token, tmp_path / "tap-2.log") as proc:
            offer = make_offer(PLANNER, aud=CODER.iss, dialog="sigterm-egress", iat=_now())
            message = {"messageId": "m-1", "contextId": "sigterm-egress", "role": "ROLE_USER"}
            message["parts"] = [{"text": "x"}]
            message["metadata"] = {A2A_EXTENSION_URI: handoff_object(offer)}
            send = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}
            send["params"] = {"message": message}
            assert httpx.post(tap + "/echo", json=send, timeout=30).status_code == 200
            _abandon_a_stream(url + "/events", proc, proxy=f"http://127.0.0.1:{egress}")
        wait_until(lambda: plain.open == 0, what="the upstream stream's close")
    # The first stream's first event (a host task state) reached the service before the
    # exit, and so did the enforcing sidecar's judged offer.
    with contextlib.closing(sqlite3.connect(tmp_path / "trace.db")) as db:
        stored = db.execute("SELECT task_id, task_state FROM host_state").fetchall()
        offers = db.execute("SELECT dialog FROM element WHERE type = 'offer'").fetchall()
    assert stored == [("t-2", "TASK_STATE_WORKING")]
    assert offers == [("sigterm-egress",)]


@contextmanager
def _tap_until_sigterm(argv: list[str], token: str, log: Path) -> Iterator[Any]:
    """``handoff-trace tap`` with ``argv``, once it answers; the block must end it."""
    env = {**os.environ, "HANDOFF_TRACE_TOKEN": token}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: _answers(argv[argv.index("--listen") + 1], proc, log), what="tap")
        yield proc
        assert proc.poll() is not None, "the tap still runs"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _abandon_a_stream(url: str, proc: Any, *, proxy: str | None = None) -> None:
    """Open an event stream at ``url``, leave it silent, SIGTERM the tap: it exits 0 within
    its bound (--shutdown-timeout, then the reporter's flush)."""
    with httpx.Client(timeout=30, proxy=proxy) as http, http.stream("GET", url) as stream:
        assert next(stream.iter_raw()).startswith(b"data: ")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=1 + FLUSH_TIMEOUT + 20) == 0


def _answers(url: str, proc: subprocess.Popen[bytes], log: Path) -> bool:
    url = url if url.startswith("http") else f"http://{url}"
    if proc.poll() is not None:
        raise RuntimeError(f"tap exited: {log.read_text()[-2000:]}")
    try:
        return httpx.post(url + "/echo", content=b"{}", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _now() -> int:
    import time

    return int(time.time())
