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
  ``HANDOFF_TRACE_LOGIN_WINDOW_SECONDS``); a wrong name and a wrong password get the same
  answer after the same work (no user-name enumeration).
"""

from __future__ import annotations

import hmac
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from app.settings import Settings
from app.store import db
from app.store.users import WebUser, check_password, close_session, open_session, session_user
from app.web.auth import GRANTS, Permission
from app.web.render import render, secure
from app.web.service import ServiceDep

COOKIE = "ht_session"
CSRF_HEADER = "x-csrf-token"
router = APIRouter(include_in_schema=False)


class LoginRequired(Exception):
    """No live session: send the browser to the login page, then back to ``next``."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


class PageError(Exception):
    """A page that cannot be shown: ``status`` and one sentence for people."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Attempts:
    """Failed logins in a sliding window, per key (a user name, a client address)."""

    def __init__(self, limit: int, window: int) -> None:
        self.limit, self.window = limit, window
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def wait(self, key: str, now: float) -> int:
        """Seconds until ``key`` may try again (0: now)."""
        with self._lock:
            failures = self._failures.get(key)
            if failures is None:
                return 0
            while failures and failures[0] <= now - self.window:
                failures.popleft()
            if len(failures) < self.limit:
                return 0
            return int(failures[0] + self.window - now) + 1

    def fail(self, key: str, now: float) -> None:
        with self._lock:
            if len(self._failures) > 100_000:  # a flood of names must not exhaust memory
                self._failures.clear()
            self._failures.setdefault(key, deque()).append(now)

    def forget(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)


def limiters(request: Request, settings: Settings) -> tuple[Attempts, Attempts]:
    """The app's failed-login counters: per user name, per client address."""
    state = request.app.state
    if getattr(state, "login_attempts", None) is None:
        window = settings.login_window_seconds
        state.login_attempts = (
            Attempts(settings.login_failures_per_name, window),
            Attempts(settings.login_failures_per_address, window),
        )
    return state.login_attempts  # type: ignore[no-any-return]


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
        return session_user(session, token=token, now=int(time.time()))


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
    context = {"next": _safe_next(next), "error": None, "username": ""}
    return render(request, "login.html", {**context, "oidc": bool(service.settings.oidc_issuer)})


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
        context = {
            "next": target,
            "error": message,
            "username": username,
            "oidc": bool(service.settings.oidc_issuer),
        }
        return render(request, "login.html", context, status=status)

    if not _same_origin(request):
        return again("This form came from another site.", 403)
    by_name, by_address = limiters(request, service.settings)
    now = time.monotonic()
    address = request.client.host if request.client else "-"
    name_key = username.strip().lower()
    wait = max(by_name.wait(name_key, now), by_address.wait(address, now))
    if wait:
        return again(f"Too many failed logins. Try again in {wait} s.", 429)
    with service.reading() as session:
        account = check_password(session, username=username, password=password)
    if account is None:
        by_name.fail(name_key, now)
        by_address.fail(address, now)
        return again("Wrong user name or password.", 401)
    by_name.forget(name_key)
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
