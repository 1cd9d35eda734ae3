"""A small OpenID Connect provider on loopback, for the login tests: discovery, JWKS, an
authorize endpoint that approves at once (as the person ``claims`` describe) and a token
endpoint that checks the PKCE verifier (S256), the client and the redirect URI before it
signs an ID token (ES256). Nothing here is a real identity provider: it is the other side
of the protocol, kept strict so the client's mistakes show."""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from joserfc import jwt
from joserfc.jwk import ECKey

CLIENT_ID = "handoff-trace-test"


class Provider:
    def __init__(self, claims: dict[str, Any]) -> None:
        self.claims = claims
        self.key = ECKey.generate_key("P-256", parameters={"kid": "test-1"})
        self.codes: dict[str, dict[str, str]] = {}
        self.refusals: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def _meta(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": self.issuer + "/authorize",
            "token_endpoint": self.issuer + "/token",
            "jwks_uri": self.issuer + "/jwks",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "id_token_signing_alg_values_supported": ["ES256"],
        }

    def _authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if query.get("client_id") != CLIENT_ID or query.get("code_challenge_method") != "S256":
            self.refusals.append("authorize: client or PKCE method")
            return 400, {}, b"bad request"
        code = secrets.token_urlsafe(16)
        self.codes[code] = query
        target = query["redirect_uri"] + "?" + urlencode({"code": code, "state": query["state"]})
        return 302, {"Location": target}, b""

    def _token(self, form: dict[str, str]) -> dict[str, Any] | None:
        asked = self.codes.pop(form.get("code", ""), None)
        if asked is None:
            self.refusals.append("token: unknown code")
            return None
        challenge = (
            base64.urlsafe_b64encode(
                hashlib.sha256(form.get("code_verifier", "").encode()).digest()
            )
            .rstrip(b"=")
            .decode()
        )
        if (
            challenge != asked["code_challenge"]
            or form.get("redirect_uri") != asked["redirect_uri"]
        ):
            self.refusals.append("token: PKCE verifier or redirect URI")
            return None
        now = int(time.time())
        claims = {
            "iss": self.issuer, "aud": CLIENT_ID, "iat": now, "exp": now + 300,
            "nonce": asked["nonce"], **self.claims,
        }  # fmt: skip
        token = jwt.encode({"alg": "ES256", "kid": "test-1"}, claims, self.key)
        return {"access_token": "unused", "token_type": "Bearer", "id_token": token}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        import json

        provider = self

        class Handler(BaseHTTPRequestHandler):
            def _send(
                self, status: int, body: bytes, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                for name, value in (headers or {"Content-Type": "application/json"}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/.well-known/openid-configuration":
                    self._send(200, json.dumps(provider._meta()).encode())
                elif url.path == "/jwks":
                    key = provider.key.as_dict(private=False)
                    self._send(200, json.dumps({"keys": [key]}).encode())
                elif url.path == "/authorize":
                    status, headers, body = provider._authorize(query)
                    self._send(status, body, headers or {"Content-Type": "text/plain"})
                else:
                    self._send(404, b"{}")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                answer = provider._token(form) if self.path == "/token" else None
                if answer is None:
                    self._send(400, json.dumps({"error": "invalid_grant"}).encode())
                else:
                    self._send(200, json.dumps(answer).encode())

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
