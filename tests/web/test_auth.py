"""Bearer tokens: the role matrix for every route, hashed storage, revocation."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import select

from app.store.db import transaction
from app.store.models import TokenRow
from app.store.tokens import Role, authenticate, create_token, revoke_token
from tests.web.conftest import ROLES, Api

DIGEST = "A" * 43
ANYONE = {None, *ROLES}
READ = {"read", "operator", "admin"}

# (method, path, roles allowed). Every route of the API is here: a test below checks it.
MATRIX = [
    ("POST", "/api/v1/ingest", {"ingest", "admin"}),
    ("POST", "/api/v1/verify", {"ingest", "operator", "admin"}),
    ("GET", "/api/v1/hops", READ),
    ("GET", f"/api/v1/hops/{DIGEST}", READ),
    ("GET", "/api/v1/dialogs", READ),
    ("GET", "/api/v1/dialogs/ctx-1", READ),
    ("GET", "/api/v1/agents", READ),
    ("GET", f"/api/v1/elements/{DIGEST}", READ),
    ("GET", "/api/v1/flags", READ),
    ("GET", "/api/v1/flags/1", READ),
    ("PATCH", "/api/v1/flags/1", {"operator", "admin"}),
    ("GET", "/api/v1/cases", READ),
    ("GET", "/api/v1/cases/C-1", READ),
    ("GET", "/api/v1/metrics", READ),
    ("GET", "/api/v1/healthz", ANYONE),
    ("GET", "/api/v1/readyz", ANYONE),
    ("GET", "/api/v1/openapi.json", ANYONE),
]


def _call(api: Api, method: str, path: str, role: str | None) -> int:
    headers = api.auth(role)
    if method == "POST":
        headers["Content-Type"] = "application/x-ndjson"
        return api.client.post(path, content=b"", headers=headers).status_code
    if method == "PATCH":
        return api.client.patch(path, json={"action": "acknowledge"}, headers=headers).status_code
    return api.client.get(path, headers=headers).status_code


def test_the_matrix_covers_every_route(sqlite_api: Api) -> None:
    paths = sqlite_api.get("/api/v1/openapi.json").json()["paths"]
    documented = {
        (method.upper(), path)
        for path, ops in paths.items()
        for method in ops
        if method != "parameters"
    }
    covered = {
        (
            m,
            p.replace(DIGEST, "{offer_digest}" if "/hops/" in p else "{digest}")
            .replace("ctx-1", "{dialog}")
            .replace("/flags/1", "/flags/{flag_id}")
            .replace("/cases/C-1", "/cases/{case_id}"),
        )
        for m, p, _ in MATRIX
        if not p.endswith("openapi.json")
    }
    assert documented == covered


@pytest.mark.parametrize(
    ("method", "path", "allowed"), MATRIX, ids=[f"{m} {p}" for m, p, _ in MATRIX]
)
def test_role_matrix(sqlite_api: Api, method: str, path: str, allowed: set[str | None]) -> None:
    outcome = {}
    for role in (None, *ROLES):
        status = _call(sqlite_api, method, path, role)
        if role in allowed:
            # Allowed: whatever the route answers (200, or 404 for the made-up ids), never
            # an authentication or authorization refusal.
            assert status not in (401, 403), (role, status)
            outcome[role] = "allowed"
        else:
            assert status == (401 if role is None else 403), (role, status)
            outcome[role] = "refused"
    assert {r for r, o in outcome.items() if o == "allowed"} == allowed


def test_anonymous_gets_a_bearer_challenge(sqlite_api: Api) -> None:
    response = sqlite_api.get("/api/v1/hops", role=None)
    assert response.headers["www-authenticate"] == "Bearer"
    for header in ("Bearer ht_nope", "Bearer " + "x" * 5000, "Basic dXNlcjpwYXNz", "Bearer"):
        response = sqlite_api.client.get("/api/v1/hops", headers={"Authorization": header})
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
    response = sqlite_api.client.get("/api/v1/hops", headers={"Authorization": "Bearer ht_nope"})
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'


def test_the_database_holds_only_the_hash_of_a_token(api: Api) -> None:
    with transaction(api.engine) as session:
        rows = list(session.execute(select(TokenRow)).scalars())
    assert {r.name for r in rows} == {f"{role}-token" for role in ROLES}
    for row in rows:
        token = api.tokens[row.role]
        assert token.startswith("ht_") and len(token) >= 43
        assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
        stored = " ".join(str(v) for v in row.model_dump().values())
        assert token not in stored and token[3:] not in stored


def test_a_revoked_token_is_refused_at_once(api: Api) -> None:
    assert api.get("/api/v1/hops", role="read").status_code == 200
    with transaction(api.engine) as session:
        revoke_token(session, name="read-token", now=1)
    response = api.get("/api/v1/hops", role="read")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "the bearer token is unknown or revoked"
    assert api.get("/api/v1/hops", role="operator").status_code == 200


def test_tokens_are_unique_and_random(api: Api) -> None:
    with transaction(api.engine) as session:
        made = {create_token(session, name=f"t{i}", role=Role.READ, now=1) for i in range(20)}
        assert len(made) == 20
        assert authenticate(session, next(iter(made))) is not None
        assert authenticate(session, "ht_" + "A" * 43) is None
        assert authenticate(session, "no-prefix") is None
