"""Loopback key servers for the trust-source tests: a real HTTP server on 127.0.0.1 whose
answers the test sets (a JWKS, a SPIFFE bundle, an Agent Card, garbage, an error status, a
redirect, or a closed port for "down"), and a clock the test moves by hand.

The server is listening when ``KeyServer()`` returns (the socket is bound and listening in
the constructor), so no test waits for readiness. Shared by the library's tests and the
service's (both put this folder on the path)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from handoff_context import Signer
from handoff_context._signature import sign_raw
from handoff_context.sources import A2A_EXTENSION, jcs


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    location: str | None = None
    trickle: float = 0.0  # seconds between the body's bytes (a slow peer)


class Clock:
    """Seconds, moved only by the test."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> float:
        return float(self.now)

    def advance(self, seconds: int) -> int:
        self.now += seconds
        return self.now


class KeyServer:
    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {}
        self.hits: list[str] = []
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.hits.append(self.path)
                answer = server.answers.get(self.path, Answer(404, b"{}"))
                self.send_response(answer.status)
                if answer.location is not None:
                    self.send_header("Location", answer.location)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                if not answer.trickle:
                    self.wfile.write(answer.body)
                    return
                for i in range(len(answer.body)):  # the fault itself: a peer that trickles
                    if server.closing.wait(answer.trickle):
                        return
                    try:
                        self.wfile.write(answer.body[i : i + 1])
                        self.wfile.flush()
                    except OSError:
                        return

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def serve(self, path: str, doc: Any, status: int = 200) -> None:
        body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        self.answers[path] = Answer(status, body)

    def redirect(self, path: str, to: str) -> None:
        self.answers[path] = Answer(302, b"", location=to)

    def down(self, path: str) -> None:
        self.answers[path] = Answer(503, b"down for maintenance")

    def trickle(self, path: str, doc: Any, every: float) -> None:
        body = json.dumps(doc).encode()
        self.answers[path] = Answer(200, body, trickle=every)

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@contextmanager
def key_server() -> Iterator[KeyServer]:
    server = KeyServer()
    try:
        yield server
    finally:
        server.close()


def jwks(*signers: Signer, **members: Any) -> dict[str, Any]:
    """A JWKS with the public keys of ``signers``; ``members`` add SPIFFE members."""
    keys = [s.trust_entry()["keys"][0] for s in signers]
    return {"keys": keys, **members}


def spiffe_bundle(*signers: Signer, sequence: int, hint: int) -> dict[str, Any]:
    """A SPIFFE trust bundle: the signers' keys for JWT-SVIDs, and an X.509 key the
    profile ignores (its use is not jwt-svid)."""
    keys = [{**s.trust_entry()["keys"][0], "use": "jwt-svid"} for s in signers]
    x509 = {"kty": "RSA", "use": "x509-svid", "n": "AQAB", "e": "AQAB", "x5c": ["AAAA"]}
    return {"keys": [*keys, x509], "spiffe_sequence": sequence, "spiffe_refresh_hint": hint}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def agent_card(
    agent: str, keys: Sequence[Signer], *, signer: Signer, name: str = "coder"
) -> dict[str, Any]:
    """An A2A 1.0 Agent Card listing ``keys`` in the handoff extension, signed by ``signer``
    (JWS over the card's RFC 8785 form, detached, as A2A 1.0 section 8.4 describes)."""
    card: dict[str, Any] = {
        "name": name,
        "description": "writes code",
        "version": "1.0.0",
        "supportedInterfaces": [
            {"url": "https://b.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {
            "extensions": [
                {
                    "uri": A2A_EXTENSION,
                    "params": {"id": agent, "keys": [s.trust_entry()["keys"][0] for s in keys]},
                }
            ]
        },
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [],
    }
    header = {"alg": signer.alg, "kid": signer.kid, "typ": "JOSE", "jku": "https://evil.example/k"}
    protected = _b64(json.dumps(header).encode())
    signing_input = f"{protected}.{_b64(jcs(card))}".encode()
    signature = sign_raw(signer.alg, signer.key, signing_input)
    card["signatures"] = [{"protected": protected, "signature": _b64(signature)}]
    return card
