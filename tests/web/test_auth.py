"""Bearer tokens: the challenge, hashed storage, revocation and expiry. Which role may
call which route is tests/web/test_access.py."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest
from sqlalchemy import or_, select

from app.store.db import transaction
from app.store.models import TokenRow
from app.store.tokens import (
    Principal,
    Role,
    TokenError,
    authenticate,
    create_token,
    revoke_token,
)
from tests.web.conftest import ROLES, Api


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
    assert response.json()["error"]["message"] == "the bearer token is unknown, expired or revoked"
    assert api.get("/api/v1/hops", role="operator").status_code == 200


def test_tokens_are_unique_and_random(api: Api) -> None:
    with transaction(api.engine) as session:
        made = {create_token(session, name=f"t{i}", role=Role.READ, now=1) for i in range(20)}
        assert len(made) == 20
        assert authenticate(session, next(iter(made)), now=2) is not None
        assert authenticate(session, "ht_" + "A" * 43, now=2) is None
        assert authenticate(session, "no-prefix", now=2) is None


def test_a_token_works_until_it_expires_and_not_a_second_longer(api: Api) -> None:
    now = int(time.time())
    with transaction(api.engine) as session:
        lasting = create_token(session, name="lasting", role=Role.READ, now=now, expires_in=600)
        spent = create_token(session, name="spent", role=Role.READ, now=now - 60, expires_in=60)
        row = session.execute(select(TokenRow).where(TokenRow.name == "lasting")).scalar_one()
        assert row.expires_at == now + 600
        # The boundary, on the store function's own clock: valid before, refused at.
        assert authenticate(session, lasting, now=now + 599) is not None
        assert authenticate(session, lasting, now=now + 600) is None
    ok = api.client.get("/api/v1/hops", headers={"Authorization": f"Bearer {lasting}"})
    assert ok.status_code == 200
    expired = api.client.get("/api/v1/hops", headers={"Authorization": f"Bearer {spent}"})
    assert expired.status_code == 401
    assert expired.headers["www-authenticate"] == 'Bearer error="invalid_token"'


@pytest.mark.parametrize("expires_in", [0, -5, 11 * 366 * 86400])
def test_an_expiry_outside_one_second_to_ten_years_is_refused(
    sqlite_api: Api, expires_in: int
) -> None:
    with transaction(sqlite_api.engine) as session, pytest.raises(TokenError, match="expires"):
        create_token(session, name="odd", role=Role.READ, now=1, expires_in=expires_in)


def _reference(session: Any, token: str, now: int) -> Principal | None:
    """What ``authenticate`` answered through the ORM, before its prebuilt driver read."""
    row = session.execute(
        select(TokenRow).where(
            TokenRow.token_hash == hashlib.sha256(token.encode()).hexdigest(),
            TokenRow.revoked_at.is_(None),
            or_(TokenRow.expires_at.is_(None), TokenRow.expires_at > now),
        )
    ).scalar_one_or_none()
    return None if row is None else Principal(name=row.name, role=Role(row.role))


def test_authenticate_answers_what_the_orm_query_answers(api: Api) -> None:
    """Every role, with and without expiry, revoked or not, at and around each boundary."""
    t = 10_000
    with transaction(api.engine) as session:
        made = dict(api.tokens)
        for role in Role:
            made[f"{role}-expiring"] = create_token(
                session, name=f"{role}-expiring", role=role, now=t, expires_in=100
            )
        made["revoked"] = create_token(session, name="revoked", role=Role.ADMIN, now=t)
        revoke_token(session, name="revoked", now=t + 50)
    made["unknown"] = "ht_" + "B" * 43
    with transaction(api.engine) as session:
        seen = set()
        for token in made.values():
            for now in (0, t, t + 49, t + 50, t + 99, t + 100, t + 101, 2**40):
                got = authenticate(session, token, now=now)
                assert got == _reference(session, token, now), (token, now)
                seen.add(got is None)
                if got is not None:
                    assert type(got.role) is Role and type(got.name) is str
        assert seen == {True, False}
