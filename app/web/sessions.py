"""Dashboard login: operator accounts, session cookies, CSRF and the role matrix.

- The session cookie (``ht_session``) is HttpOnly, SameSite=Lax, path ``/``, and Secure
  whenever the request came over TLS (directly, or through the trusted local proxy that
  ``serve`` believes). Only its SHA-256 is stored (``app.store.users``).
- Every state-changing request (POST) must carry the session's CSRF token, in the
  ``X-CSRF-Token`` header (static/app.js adds it to every htmx request from the page's
  ``csrf-token`` meta tag) or in a ``csrf`` form field; a foreign ``Origin`` is refused too,
  and so is a foreign ``Referer`` when the browser sent no ``Origin`` (``_same_origin``).
- A session lasts ``HANDOFF_TRACE_SESSION_SECONDS``, ends at logout, and ends at once when
  its account is disabled (``handoff-trace users disable``).
- Roles are the API's (``app.web.auth.GRANTS``): read looks, operator also triages and
  verifies uploads, admin also stores them. Pages take only the session cookie and the API
  only a bearer token, so neither credential works where the other is expected.
- Logins are rate-limited per user name and per client address
  (``HANDOFF_TRACE_LOGIN_FAILURES_PER_NAME`` / ``_PER_ADDRESS`` in
  ``HANDOFF_TRACE_LOGIN_WINDOW_SECONDS``), counted in the database so that every instance
  and every restart sees the same failures (``app.store.limits``); a refused attempt gets
  429 with ``Retry-After``. A wrong name and a wrong password get the same answer after the
  same work (no user-name enumeration).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from app.errors import HandoffTraceError
from app.store import db
from app.store.limits import failure_key, forget_failures, record_failure, retry_after
from app.store.users import WebUser, check_password, close_session, open_session, session_user
from app.web.auth import GRANTS, Permission
from app.web.errors import http_code
from app.web.render import render, secure
from app.web.service import Service, ServiceDep

COOKIE = "ht_session"
CSRF_HEADER = "x-csrf-token"
router = APIRouter(include_in_schema=False)


class LoginRequired(HandoffTraceError):
    """No live session: send the browser to the login page, then back to ``next``."""

    reason = "login-required"

    def __init__(self, next_url: str) -> None:
        super().__init__(f"log in to see {next_url}")
        self.next_url = next_url


class PageError(HandoffTraceError):
    """A page that cannot be shown: ``status`` and one sentence for people (``detail``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message, reason=http_code(status))
        self.status = status

    @property
    def message(self) -> str:
        return self.detail


def login_wait(service: Service, *, name_key: str, address_key: str, now: int) -> int:
    """Seconds until this name from this address may try again (0: now), counted over every
    instance's failures (``app.store.limits``)."""
    settings = service.settings
    window = settings.login_window_seconds
    with service.reading() as session:
        return max(
            retry_after(
                session,
                key=name_key,
                limit=settings.login_failures_per_name,
                window=window,
                now=now,
            ),
            retry_after(
                session,
                key=address_key,
                limit=settings.login_failures_per_address,
                window=window,
                now=now,
            ),
        )


def _is_tls(request: Request) -> bool:
    return request.url.scheme == "https"


def _here(request: Request) -> str:
    query = f"?{request.url.query}" if request.url.query else ""
    return request.url.path + query


def _safe_next(value: str | None) -> str:
    """Only a path on this site (never ``//host`` or a scheme) is followed after login."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


def web_user(request: Request, service: ServiceDep) -> WebUser | None:
    token = request.cookies.get(COOKIE)
    if not token:
        return None
    with service.reading() as session:
        user = session_user(session, token=token, now=int(time.time()))
    if user is not None:
        request.state.user_name = user.username  # for the request's log line
    return user


def _same_origin(request: Request) -> bool:
    """False when the browser says the request came from another site: by ``Origin``, or,
    when it sent none, by ``Referer``. With neither (some browsers and privacy settings
    strip both) it is True, and the CSRF token alone decides."""
    own = f"{request.url.scheme}://{request.url.netloc}"
    origin = request.headers.get("origin")
    if origin is not None:  # "null" (a sandboxed frame, a file: page) is foreign too
        return origin == own
    referer = request.headers.get("referer")
    if referer is None:
        return True
    return referer == own or referer.startswith(own + "/")


def requires(permission: Permission, *, change: bool = False) -> Callable[..., WebUser]:
    """A dependency: the logged-in user, who must hold ``permission``; for a state-changing
    request (``change``) also a matching CSRF token and no foreign Origin."""

    async def dependency(request: Request, service: ServiceDep) -> WebUser:
        user = await run_in_threadpool(web_user, request, service)
        if user is None:
            raise LoginRequired(_here(request) if request.method == "GET" else "/")
        request.state.user = user
        if change:
            sent = request.headers.get(CSRF_HEADER)
            if sent is None:
                form = await request.form()
                field = form.get("csrf")
                sent = field if isinstance(field, str) else None
            if not (_same_origin(request) and sent and hmac.compare_digest(sent, user.csrf)):
                raise PageError(
                    403, "The form was stale or came from another site; reload and try again."
                )
        if user.role not in GRANTS[permission]:
            raise PageError(
                403, f"Your role ({user.role.value}) may not {permission.value}; ask an admin."
            )
        return user

    return dependency


Viewer = Annotated[WebUser, Depends(requires(Permission.READ))]
Triager = Annotated[WebUser, Depends(requires(Permission.TRIAGE, change=True))]
Verifier = Annotated[WebUser, Depends(requires(Permission.VERIFY, change=True))]
Leaver = Annotated[WebUser, Depends(requires(Permission.READ, change=True))]


# --- routes -----------------------------------------------------------------------------


@router.get("/login")
def login_page(request: Request, service: ServiceDep, next: str = "/") -> Response:
    if web_user(request, service) is not None:
        return secure(RedirectResponse(_safe_next(next), status_code=303))
    return render(request, "login.html", {"next": _safe_next(next), "error": None, "username": ""})


@router.post("/login")
def login(
    request: Request,
    service: ServiceDep,
    username: Annotated[str, Form(max_length=200)] = "",
    password: Annotated[str, Form(max_length=2000)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    target = _safe_next(next)

    def again(message: str, status: int) -> Response:
        context = {"next": target, "error": message, "username": username}
        return render(request, "login.html", context, status=status)

    if not _same_origin(request):
        return again("This form came from another site.", 403)
    now = int(time.time())
    address = request.client.host if request.client else "-"
    name_key = failure_key("name", username.strip().lower())
    address_key = failure_key("address", address)
    wait = login_wait(service, name_key=name_key, address_key=address_key, now=now)
    if wait:
        refused = again(f"Too many failed logins. Try again in {wait} s.", 429)
        refused.headers["Retry-After"] = str(wait)
        return refused
    with service.reading() as session:
        account = check_password(session, username=username, password=password)
    if account is None:
        window = service.settings.login_window_seconds
        db.run(
            service.engine,
            lambda s: record_failure(s, keys=[name_key, address_key], now=now, window=window),
        )
        return again("Wrong user name or password.", 401)
    db.run(service.engine, lambda s: forget_failures(s, key=name_key))
    lifetime = service.settings.session_seconds
    token = db.run(
        service.engine,
        lambda s: open_session(s, user=account, now=int(time.time()), lifetime=lifetime),
    )
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        max_age=lifetime,  # the browser forgets it when the server would refuse it
        httponly=True,
        samesite="lax",
        secure=_is_tls(request),
        path="/",
    )
    return secure(response)


@router.post("/logout")
def logout(request: Request, user: Leaver, service: ServiceDep) -> Response:
    token = request.cookies.get(COOKIE, "")
    db.run(service.engine, lambda s: close_session(s, token=token))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="lax", secure=_is_tls(request))
    return secure(response)


def login_redirect(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LoginRequired)
    url = "/login?next=" + quote(exc.next_url, safe="/")
    if request.headers.get("hx-request") == "true":
        # htmx follows HX-Redirect with a full page load, rather than swapping the login
        # page into a fragment.
        return secure(Response(status_code=200, headers={"HX-Redirect": url}))
    return secure(RedirectResponse(url, status_code=303))


def page_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PageError)
    context = {"status": exc.status, "message": exc.message}
    return render(request, "error.html", context, status=exc.status)
