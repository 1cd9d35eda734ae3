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
- Logins are limited per client address (``HANDOFF_TRACE_LOGIN_FAILURES_PER_ADDRESS`` in
  ``HANDOFF_TRACE_LOGIN_WINDOW_SECONDS``) and slowed per user name from that address
  (after ``HANDOFF_TRACE_LOGIN_FAILURES_PER_NAME`` failures in a row, doubling delays up
  to the window), counted in the database before the password is checked, so that every
  instance and every restart sees the same attempts (``app.store.limits``); a refused
  attempt gets 429 with ``Retry-After``. A wrong name and a wrong password get the same
  answer after the same work (no user-name enumeration).
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
from app.settings import Settings
from app.store import db
from app.store.limits import Limits, failure_key, forgive, take_attempt
from app.store.users import WebUser, check_password, close_session, open_session, session_user
from app.web.auth import GRANTS, Permission
from app.web.errors import http_code
from app.web.render import render, secure
from app.web.service import ServiceDep

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


def login_limits(settings: Settings) -> Limits:
    return Limits(
        address_limit=settings.login_failures_per_address,
        window=settings.login_window_seconds,
        free=settings.login_failures_per_name,
        cap=settings.login_window_seconds,
    )


def wall_clock() -> int:
    """The login limits' clock: real time, like a token's lifetime (the store's clock may be
    pinned to a capture's time). A module function, so a test can hold it still."""
    return int(time.time())


def is_tls(request: Request) -> bool:
    return request.url.scheme == "https"


def _here(request: Request) -> str:
    query = f"?{request.url.query}" if request.url.query else ""
    return request.url.path + query


def safe_next(value: str | None) -> str:
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
        return secure(RedirectResponse(safe_next(next), status_code=303))
    context = {"next": safe_next(next), "error": None, "username": ""}
    return render(request, "login.html", {**context, "oidc": bool(service.settings.oidc_issuer)})


@router.post("/login")
def login(
    request: Request,
    service: ServiceDep,
    username: Annotated[str, Form(max_length=200)] = "",
    password: Annotated[str, Form(max_length=2000)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    target = safe_next(next)

    def again(message: str, status: int) -> Response:
        context = {
            "next": target,
            "error": message,
            "username": username,
            "oidc": bool(service.settings.oidc_issuer),
        }
        return render(request, "login.html", context, status=status)

    if not _same_origin(request):
        return again("This form came from another site.", 403)
    now = wall_clock()
    address = request.client.host if request.client else "-"
    address_key = failure_key("address", address)
    # The name's delays are per address: failing on purpose elsewhere never delays a person.
    name_key = failure_key("name", f"{username.strip().lower()}\0{address}")
    limits = login_limits(service.settings)
    # Counted before the password is checked, under the rows' lock: concurrent guesses on
    # every instance are counted one after the other (app.store.limits).
    wait = db.run(
        service.engine,
        lambda s: take_attempt(
            s, address_key=address_key, name_key=name_key, limits=limits, now=now
        ),
    )
    if wait:
        refused = again(f"Too many failed logins. Try again in {wait} s.", 429)
        refused.headers["Retry-After"] = str(wait)
        return refused
    with service.reading() as session:
        account = check_password(session, username=username, password=password)
    if account is None:
        return again("Wrong user name or password.", 401)
    db.run(
        service.engine,
        lambda s: forgive(s, address_key=address_key, name_key=name_key, now=now, limits=limits),
    )
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
        secure=is_tls(request),
        path="/",
    )
    return secure(response)


@router.post("/logout")
def logout(request: Request, user: Leaver, service: ServiceDep) -> Response:
    token = request.cookies.get(COOKIE, "")
    db.run(service.engine, lambda s: close_session(s, token=token))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="lax", secure=is_tls(request))
    return secure(response)


def login_redirect(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LoginRequired)
    url = "/login?next=" + quote(exc.next_url, safe="/")
    if request.headers.get("hx-request") == "true":
        # htmx follows HX-Redirect with a full page load, rather than swapping the login
        # page into a fragment.
        return secure(Response(status_code=200, headers={"HX-Redirect": url}))
    return secure(RedirectResponse(url, status_code=303))


def wants_page(request: Request) -> bool:
    """A browser asking for a dashboard address (not the API, which always answers JSON)."""
    path = request.url.path
    api = path == "/api" or path.startswith("/api/")
    return not api and "text/html" in request.headers.get("accept", "")


async def not_found(request: Request, exc: Exception) -> Response:
    """An unknown route: the designed page for a browser, the one JSON error shape for the
    API and for every other client."""
    from starlette.exceptions import HTTPException

    from app.web import errors

    if not (isinstance(exc, HTTPException) and exc.status_code == 404 and wants_page(request)):
        return await errors.handle(request, exc)
    service = getattr(request.app.state, "service", None)
    if service is not None:
        request.state.user = await run_in_threadpool(web_user, request, service)
    context = {
        "status": 404,
        "message": "There is no page at this address. It may have moved, or the link is cut.",
    }
    return render(request, "error.html", context, status=404)


def page_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PageError)
    context = {"status": exc.status, "message": exc.message}
    return render(request, "error.html", context, status=exc.status)
