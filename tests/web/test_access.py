"""Who may call what: every route of the app x every role, with the allowed set asserted
exactly.

``ACCESS`` has one line per route of the app (JSON API, dashboard pages, login, assets),
and ``test_every_route_has_an_entry`` compares it with the routes the app really serves
(``app.routes``): a new route without a line fails there, with the line to add.

Each role calls each route with the credential that surface takes: the API a bearer token
of that role, the dashboard a session cookie of an account with that role. The ingest role
is for machines and has no account, so on a page it presents its bearer token, which the
dashboard must treat as no login at all. A refusal has one shape per surface: the API
answers 401 (no valid token, with ``WWW-Authenticate``) or 403 (the token lacks the role);
a page sends a stranger to ``/login?next=...`` (303) and answers a logged-in person
without the role 403. Anything else, a 404 for the made-up ids included, counts as let
through; a 5xx fails the test whatever the role.
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from starlette.routing import Mount

from app.settings import Settings
from app.web.app import create_app
from tests.conftest import World
from tests.web.accounts import ACCOUNTS, PASSWORD, Login, create_accounts, log_in
from tests.web.conftest import Clock, make_tokens, write_trust

ROLES: tuple[str | None, ...] = (None, "read", "ingest", "operator", "admin")
EVERYONE = frozenset(ROLES)
READ = frozenset({"read", "operator", "admin"})
VERIFY = frozenset({"ingest", "operator", "admin"})
INGEST = frozenset({"ingest", "admin"})
TRIAGE = frozenset({"operator", "admin"})
ADMIN = frozenset({"admin"})
# On pages: every account (each person's role includes looking).
LOGGED_IN = frozenset(ACCOUNTS)

# "METHOD path" as the app declares it -> the roles that get through. To add a route, add
# its line here; a path parameter needs a sample value in SAMPLES.
ACCESS: dict[str, frozenset[str | None]] = {
    # JSON API: bearer tokens (app/web/auth.py).
    "POST /api/v1/ingest": INGEST,
    "POST /v1/traces": INGEST,
    "POST /api/v1/verify": VERIFY,
    "GET /api/v1/hops": READ,
    "GET /api/v1/hops/{offer_digest}": READ,
    "GET /api/v1/dialogs": READ,
    "GET /api/v1/dialogs/{dialog}": READ,
    "GET /api/v1/agents": READ,
    "GET /api/v1/elements/{digest}": READ,
    # The evidence log (docs/evidence-log.md).
    "GET /api/v1/elements/{digest}/proof": READ,
    "GET /api/v1/log/checkpoint": READ,
    "GET /api/v1/log/tile/{tile}": READ,
    "GET /api/v1/flags": READ,
    "GET /api/v1/flags/{flag_id}": READ,
    "PATCH /api/v1/flags/{flag_id}": TRIAGE,
    "POST /api/v1/trust/revocations": ADMIN,
    "GET /api/v1/cases": READ,
    "GET /api/v1/cases/{case_id}": READ,
    "GET /api/v1/metrics": EVERYONE - {None},  # any token, the ingest role's too
    "GET /api/v1/healthz": EVERYONE,
    "GET /api/v1/readyz": EVERYONE,
    "GET /api/v1/openapi.json": EVERYONE,
    # Dashboard: session cookies (app/web/sessions.py). The ingest role has no account.
    "GET /login": EVERYONE,
    "POST /login": EVERYONE,
    "POST /logout": LOGGED_IN,
    "GET /": READ,
    "GET /dialogs": READ,
    "GET /dialogs/{dialog}": READ,
    "GET /hops": READ,
    "GET /hops/{offer_digest}": READ,
    "GET /elements/{digest}": READ,
    "GET /elements/{digest}/evidence": READ,
    "GET /agents": READ,
    "GET /trust": READ,
    "GET /search": READ,
    "GET /flags": READ,
    "POST /flags/bulk": TRIAGE,
    "POST /flags/{flag_id}/action": TRIAGE,
    "GET /flags/{flag_id}": READ,
    "GET /flags/similar": READ,
    "POST /flags/{flag_id}/comments": TRIAGE,
    "GET /dialog-tree": READ,
    "GET /notifications": READ,
    # Login through an identity provider: public, as the login form is (it answers 404
    # here, where none is configured).
    "GET /oidc/start": EVERYONE,
    "GET /oidc/callback": EVERYONE,
    "GET /cases": READ,
    "GET /cases/{case_id}": READ,
    "GET /upload": READ,
    # Verify-only for operators; storing (mode=store) is checked inside the route and is
    # admin-only (tests/web/test_pages.py::test_only_an_admin_may_store_uploads).
    "POST /upload": TRIAGE,
    "GET /upload/reports/{key}.json": READ,
    # Assets: public, they hold no data.
    "GET /vendor/plotly.min.js": EVERYONE,
    "GET /static/{name}": EVERYONE,
}

SAMPLES = {
    "tile": "0/000",
    "offer_digest": "A" * 43,
    "digest": "A" * 43,
    "dialog": "ctx-1",
    "flag_id": "1",
    "case_id": "C-1",
    "key": "no-such-report",
    "name": "app.css",
}
# Request bodies where an empty one would not reach the part under test.
BODIES: dict[str, dict[str, str]] = {
    # A real login, so "let through" means logged in (303 to next), not a wrong password.
    "POST /login": {"username": ACCOUNTS["read"], "password": PASSWORD, "next": "/"},
}


@dataclass
class Served:
    app: FastAPI
    client: TestClient
    tokens: dict[str, str]

    @property
    def engine(self) -> Any:
        return self.app.state.service.engine


@pytest.fixture(scope="module")
def served(
    world: World, databases: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    trust = write_trust(world, tmp_path_factory.mktemp("access") / "trust.json")
    settings = Settings(database_url=databases.new("sqlite"), trust_file=trust)
    app = create_app(settings, clock=Clock())
    with TestClient(app, raise_server_exceptions=False) as client:
        served = Served(app, client, make_tokens(app.state.service.engine))
        create_accounts(served.engine)
        yield served


def declared_routes(app: FastAPI) -> set[str]:
    """``METHOD path`` of every route the app serves (HEAD rides along with GET)."""
    found = set()
    for route in iter_route_contexts(app.routes):
        path = route.path_format
        if isinstance(route.original_route, Mount):
            found.add(f"GET {path}")
            continue
        found.update(f"{method} {path}" for method in route.methods or () if method != "HEAD")
    return found


def test_every_route_has_an_entry(served: Served) -> None:
    routes = declared_routes(served.app)
    missing = sorted(routes - ACCESS.keys())
    assert not missing, (
        "routes without a line in ACCESS (tests/web/test_access.py); add one per route "
        'naming the roles that may call it, e.g. "GET /api/v1/things": READ,\n  '
        + "\n  ".join(missing)
    )
    stale = sorted(ACCESS.keys() - routes)
    assert not stale, "ACCESS names routes the app does not serve:\n  " + "\n  ".join(stale)


def _url(key: str) -> str:
    path = key.split(" ", 1)[1]
    names = [n for _, n, _, _ in string.Formatter().parse(path) if n]
    unknown = [n for n in names if n not in SAMPLES]
    assert not unknown, f"add a sample value for {unknown} to SAMPLES (tests/web/test_access.py)"
    return path.format(**SAMPLES)


def _is_api(key: str) -> bool:
    """A bearer-token route: the JSON API, and OTLP/HTTP in at its standard path."""
    path = key.split(" ", 1)[1]
    return path.startswith("/api/") or path == "/v1/traces"


def _credential(served: Served, key: str, role: str | None) -> tuple[dict[str, str], Login | None]:
    """The headers ``role`` sends to this route's surface, and its session if it has one."""
    if role is None:
        return {}, None
    if _is_api(key) or role not in ACCOUNTS:
        return {"Authorization": f"Bearer {served.tokens[role]}"}, None
    login = log_in(served.engine, ACCOUNTS[role])
    return login.headers, login


def _call(served: Served, key: str, role: str | None) -> Any:
    method, _ = key.split(" ", 1)
    headers, login = _credential(served, key, role)
    url = _url(key)
    client = served.client
    try:
        if method == "GET":
            return client.get(url, headers=headers, follow_redirects=False)
        if _is_api(key) and method == "POST":
            headers["Content-Type"] = "application/x-ndjson"
            return client.post(url, content=b"", headers=headers)
        if _is_api(key):
            return client.request(method, url, json={"action": "acknowledge"}, headers=headers)
        form = {**BODIES.get(key, {}), "csrf": login.csrf if login else ""}
        return client.request(method, url, data=form, headers=headers, follow_redirects=False)
    finally:
        client.cookies.clear()  # a login's Set-Cookie must not log in the next caller


def _refused(key: str, role: str | None, response: Any) -> bool:
    """Whether ``response`` is this surface's refusal, checking its exact shape: a caller
    without a credential there is sent away (401, or 303 to the login page), a caller with
    one but without the role is forbidden (403)."""
    status = response.status_code
    if _is_api(key):
        stranger = role is None
        if status == 401:
            assert stranger, f"{key}: {role}'s valid token was answered 401"
            assert response.headers["www-authenticate"].startswith("Bearer"), key
            return True
        if status == 403:
            assert not stranger and "may not" in response.json()["error"]["message"], key
            return True
        return False
    stranger = role not in ACCOUNTS  # no session: anonymous, or a machine's token
    if status == 303 and response.headers["location"].startswith("/login?next="):
        assert stranger, f"{key}: {role}'s live session was sent to the login page"
        return True
    if status == 403:
        assert not stranger and "may not" in response.text, key
        return True
    return False


@pytest.mark.parametrize("key", sorted(ACCESS))
def test_exactly_the_allowed_roles_get_through(served: Served, key: str) -> None:
    answers = {}
    through = set()
    for role in ROLES:
        response = _call(served, key, role)
        answers[role] = response.status_code
        assert response.status_code < 500, (key, role, response.text[:300])
        if not _refused(key, role, response):
            through.add(role)
    assert through == ACCESS[key], f"{key}: statuses by role {answers}"


def test_a_stranger_on_the_api_gets_a_bearer_challenge_and_on_a_page_the_login(
    served: Served,
) -> None:
    api = served.client.get("/api/v1/hops")
    assert (api.status_code, api.headers["www-authenticate"]) == (401, "Bearer")
    page = served.client.get("/hops?state=unresolved", follow_redirects=False)
    assert (page.status_code, page.headers["location"]) == (
        303,
        "/login?next=/hops%3Fstate%3Dunresolved",
    )


@pytest.mark.parametrize("key", sorted(k for k in ACCESS if None not in ACCESS[k]))
def test_a_credential_works_only_where_it_belongs(served: Served, key: str) -> None:
    """An admin's session cookie on the API, or an admin's bearer token on a page, is no
    credential there: the API has no CSRF defence, so it must never honour a cookie, and a
    page must never honour a token a script could hold."""
    if _is_api(key):
        headers = log_in(served.engine, ACCOUNTS["admin"]).headers
    else:
        headers = {"Authorization": f"Bearer {served.tokens['admin']}"}
    method = key.split(" ", 1)[0]
    response = served.client.request(method, _url(key), headers=headers, follow_redirects=False)
    served.client.cookies.clear()
    assert _refused(key, None, response), (key, response.status_code)
    assert response.status_code in (401, 303), (key, response.status_code)
