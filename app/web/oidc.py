"""Login through an OpenID Connect provider: the authorization code flow with PKCE (RFC 7636,
``S256``), for organisations whose people already have an identity provider. Local accounts
(``handoff-trace users create``) keep working beside it.

- ``GET /oidc/start`` makes a ``state``, a ``nonce`` and a PKCE verifier, keeps them in a
  short-lived HttpOnly cookie scoped to ``/oidc`` (so the callback must come back to the
  browser that started it), and sends the browser to the provider.
- ``GET /oidc/callback`` checks ``state`` against the cookie, redeems the code with the
  verifier at the token endpoint, and verifies the ID token: signature by a key of the
  provider's JWKS, ``iss``, ``aud`` (and ``azp``), ``exp``/``iat`` with the skew, ``nonce``.
- The role comes from one claim (``HANDOFF_TRACE_OIDC_ROLE_CLAIM``, a string or a list of
  strings) through ``HANDOFF_TRACE_OIDC_ROLES`` (``group=role,...``); the highest role
  mapped wins, and a person with no mapped value is refused. The account is the provider's
  person, keyed on the ID token's (``iss``, ``sub``); its name ``sso-NAME``
  (``preferred_username``, else ``email``, else ``sub``) is only a label, made distinct
  with a digest when another person's account has it already, and refused (a page, 403)
  when a local account has it. Its role is refreshed at every login; it has no password,
  so it can log in only through the provider.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from sqlalchemy.exc import IntegrityError

from app.errors import HandoffTraceError
from app.settings import Settings
from app.store import db
from app.store.tokens import Role
from app.store.users import UserError, open_session, sso_user
from app.web.render import render, secure
from app.web.service import ServiceDep
from app.web.sessions import COOKIE, is_tls, safe_next

router = APIRouter(include_in_schema=False)
FLOW_COOKIE = "ht_oidc"
FLOW_SECONDS = 600
RANK = {Role.READ: 0, Role.OPERATOR: 1, Role.ADMIN: 2}
ALGORITHMS = ["RS256", "ES256", "PS256", "EdDSA", "Ed25519"]
_NAME = re.compile(r"[^A-Za-z0-9._@-]")


class OidcError(HandoffTraceError):
    """A login through the provider that cannot complete; the message is for people."""

    reason = "oidc-failed"


@dataclass(frozen=True)
class Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks: KeySet


class Discovery:
    """The provider's metadata and keys, fetched once and kept for an hour."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: tuple[float, Provider] | None = None

    def get(self, issuer: str) -> Provider:
        with self._lock:
            if self._found is not None and time.monotonic() - self._found[0] < 3600:
                return self._found[1]
        try:
            with httpx.Client(timeout=10, follow_redirects=False) as client:
                meta = client.get(issuer.rstrip("/") + "/.well-known/openid-configuration")
                meta.raise_for_status()
                doc = meta.json()
                keys = client.get(doc["jwks_uri"])
                keys.raise_for_status()
                jwks = KeySet.import_key_set(keys.json())
        except (httpx.HTTPError, ValueError, KeyError, JoseError) as exc:
            raise OidcError(f"The identity provider cannot be reached or read ({exc}).") from exc
        if doc.get("issuer") != issuer:
            raise OidcError("The identity provider's metadata names another issuer.")
        provider = Provider(issuer, doc["authorization_endpoint"], doc["token_endpoint"], jwks)
        with self._lock:
            self._found = (time.monotonic(), provider)
        return provider


def _discovery(request: Request) -> Discovery:
    if getattr(request.app.state, "oidc_discovery", None) is None:
        request.app.state.oidc_discovery = Discovery()
    return request.app.state.oidc_discovery  # type: ignore[no-any-return]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _redirect_uri(request: Request, settings: Settings) -> str:
    return settings.oidc_redirect_url or str(request.url_for("oidc_callback"))


def role_for(claims: dict[str, Any], settings: Settings) -> Role | None:
    """The highest role the claim's values map to, or None."""
    value = claims.get(settings.oidc_role_claim)
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    mapping = dict(settings.oidc_roles)
    roles = [mapping[v] for v in values if isinstance(v, str) and v in mapping]
    return max((Role(r) for r in roles), key=RANK.__getitem__, default=None)


def account_name(claims: dict[str, Any]) -> str:
    """``sso-`` and a readable name from the token, made a valid account name."""
    for member in ("preferred_username", "email", "sub"):
        value = claims.get(member)
        if isinstance(value, str) and value:
            name = "sso-" + _NAME.sub("_", value)
            if len(name) <= 64:
                return name
    digest = hashlib.sha256(str(claims.get("sub")).encode()).hexdigest()[:32]
    return f"sso-{digest}"


@router.get("/oidc/start")
def oidc_start(request: Request, service: ServiceDep, next: str = "/") -> Response:
    settings = service.settings
    if not settings.oidc_issuer:
        return _refused(request, "Login through an identity provider is not configured.", 404)
    try:
        provider = _discovery(request).get(settings.oidc_issuer)
    except OidcError as exc:
        return _refused(request, str(exc), 502)
    verifier = _b64(secrets.token_bytes(32))
    flow = {
        "state": _b64(secrets.token_bytes(24)),
        "nonce": _b64(secrets.token_bytes(24)),
        "verifier": verifier,
        "next": safe_next(next),
    }
    query = {
        "response_type": "code",
        "client_id": settings.oidc_client_id,
        "redirect_uri": _redirect_uri(request, settings),
        "scope": "openid profile email",
        "state": flow["state"],
        "nonce": flow["nonce"],
        "code_challenge": _b64(hashlib.sha256(verifier.encode()).digest()),
        "code_challenge_method": "S256",
    }
    response = RedirectResponse(f"{provider.authorization_endpoint}?{urlencode(query)}", 303)
    response.set_cookie(
        FLOW_COOKIE,
        _b64(json.dumps(flow).encode()),
        max_age=FLOW_SECONDS,
        httponly=True,
        samesite="lax",
        secure=is_tls(request),
        path="/oidc",
    )
    return secure(response)


def _flow(request: Request) -> dict[str, str]:
    text = request.cookies.get(FLOW_COOKIE, "")
    try:
        flow = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except ValueError as exc:
        raise OidcError("The login took too long or was started elsewhere; start again.") from exc
    if not isinstance(flow, dict) or not all(
        isinstance(flow.get(k), str) for k in ("state", "nonce", "verifier", "next")
    ):
        raise OidcError("The login took too long or was started elsewhere; start again.")
    return flow


def _redeem(
    request: Request, settings: Settings, provider: Provider, code: str, flow: dict[str, str]
) -> dict[str, Any]:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": _redirect_uri(request, settings),
        "client_id": settings.oidc_client_id,
        "code_verifier": flow["verifier"],
    }
    auth = (
        (settings.oidc_client_id, settings.oidc_client_secret)
        if settings.oidc_client_secret
        else None
    )
    try:
        with httpx.Client(timeout=10, follow_redirects=False) as client:
            answer = client.post(provider.token_endpoint, data=form, auth=auth)
        body = answer.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise OidcError(f"The identity provider did not answer the token request ({exc}).") from exc
    if answer.status_code != 200 or not isinstance(body.get("id_token"), str):
        raise OidcError(
            f"The identity provider refused the code ({body.get('error', answer.status_code)})."
        )
    return _claims(body["id_token"], settings, provider, flow["nonce"])


def _claims(token: str, settings: Settings, provider: Provider, nonce: str) -> dict[str, Any]:
    """The ID token's claims, once every check of OpenID Connect Core 3.1.3.7 we rely on
    passed. Raises OidcError."""
    try:
        decoded = jwt.decode(token, provider.jwks, algorithms=ALGORITHMS)
    except (JoseError, ValueError) as exc:
        raise OidcError(f"The ID token does not verify ({exc}).") from exc
    claims = dict(decoded.claims)
    now = int(time.time())
    audience = claims.get("aud")
    audiences = (
        [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
    )
    problems = [
        (claims.get("iss") != provider.issuer, "it was issued by another provider"),
        (settings.oidc_client_id not in audiences, "it is for another client"),
        (len(audiences) > 1 and claims.get("azp") != settings.oidc_client_id, "its azp is not us"),
        (
            not isinstance(claims.get("exp"), int) or claims["exp"] + settings.skew < now,
            "it has expired",
        ),
        (
            isinstance(claims.get("iat"), int) and claims["iat"] - settings.skew > now,
            "it is from the future",
        ),
        (not hmac_equal(str(claims.get("nonce", "")), nonce), "its nonce is not this login's"),
        (not isinstance(claims.get("sub"), str), "it names no subject"),
    ]
    for failed, why in problems:
        if failed:
            raise OidcError(f"The ID token is refused: {why}.")
    return claims


def hmac_equal(a: str, b: str) -> bool:
    return secrets.compare_digest(a.encode(), b.encode())


@router.get("/oidc/callback", name="oidc_callback")
def oidc_callback(
    request: Request, service: ServiceDep, code: str = "", state: str = "", error: str = ""
) -> Response:
    settings = service.settings
    if not settings.oidc_issuer:
        return _refused(request, "Login through an identity provider is not configured.", 404)
    try:
        if error:
            raise OidcError(f"The identity provider said: {error[:200]}.")
        flow = _flow(request)
        if not code or not hmac_equal(state, flow["state"]):
            raise OidcError("The login's state does not match this browser's; start again.")
        provider = _discovery(request).get(settings.oidc_issuer)
        claims = _redeem(request, settings, provider, code[:4096], flow)
        role = role_for(claims, settings)
        if role is None:
            raise OidcError(
                f"Your account at the identity provider has no role for handoff-trace "
                f"(claim {settings.oidc_role_claim!r}); ask an admin."
            )
    except OidcError as exc:
        return _refused(request, str(exc), 403)
    now = int(time.time())
    lifetime = settings.session_seconds

    def login(session: Any) -> str:
        try:
            user = sso_user(
                session,
                issuer=claims["iss"],
                subject=claims["sub"],
                label=account_name(claims),
                role=role,
                now=now,
            )
        except UserError as exc:  # a local account holds the name
            raise OidcError(f"You cannot log in through the provider: {exc}.") from exc
        if user is None:
            raise OidcError("This account is disabled; ask an admin.")
        return open_session(session, user=user, now=now, lifetime=lifetime)

    try:
        try:
            token = db.run(service.engine, login)
        except IntegrityError:
            # Another person's first login took this label in the same instant: once more,
            # and the label is made this person's own (app.store.users.sso_user).
            token = db.run(service.engine, login)
    except OidcError as exc:
        return _refused(request, str(exc), 403)
    response = RedirectResponse(flow["next"], status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        max_age=lifetime,
        httponly=True,
        samesite="lax",
        secure=is_tls(request),
        path="/",
    )
    response.delete_cookie(FLOW_COOKIE, path="/oidc")
    return secure(response)


def _refused(request: Request, message: str, status: int) -> Response:
    context = {"next": "/", "error": message, "username": "", "oidc": status != 404}
    return render(request, "login.html", context, status=status)
