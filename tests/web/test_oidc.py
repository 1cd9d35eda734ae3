"""The OpenID Connect login's checks, without a browser: the ID token checks, the role
mapping, the account name, and the settings it needs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet

from app.settings import Settings, SettingsError
from app.store.tokens import Role
from app.web.app import create_app
from app.web.oidc import OidcError, Provider, _claims, account_name, role_for
from tests.web.oidc_provider import CLIENT_ID
from tests.web.oidc_provider import Provider as Idp

ISSUER = "https://idp.example"
KEY = ECKey.generate_key("P-256", parameters={"kid": "k"})
SETTINGS = Settings(
    oidc_issuer=ISSUER,
    oidc_client_id=CLIENT_ID,
    oidc_role_claim="groups",
    oidc_roles=(("readers", "read"), ("ops", "operator"), ("admins", "admin")),
)
PROVIDER = Provider(ISSUER, "", "", KeySet([KEY]))


def _token(key: Any = KEY, **claims: Any) -> str:
    now = int(time.time())
    base = {"iss": ISSUER, "aud": CLIENT_ID, "sub": "u", "iat": now, "exp": now + 60, "nonce": "n"}
    return jwt.encode({"alg": "ES256", "kid": "k"}, {**base, **claims}, key)


def test_a_good_id_token_passes() -> None:
    assert _claims(_token(), SETTINGS, PROVIDER, "n")["sub"] == "u"


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({"nonce": "other"}, "nonce"),
        ({"aud": "someone-else"}, "another client"),
        ({"iss": "https://evil.example"}, "another provider"),
        ({"exp": int(time.time()) - 3600}, "expired"),
        ({"aud": [CLIENT_ID, "x"]}, "azp"),
    ],
)
def test_a_bad_id_token_is_refused(claims: dict[str, Any], why: str) -> None:
    with pytest.raises(OidcError, match=why):
        _claims(_token(**claims), SETTINGS, PROVIDER, "n")


def test_a_token_signed_by_another_key_is_refused() -> None:
    other = ECKey.generate_key("P-256", parameters={"kid": "k"})
    with pytest.raises(OidcError, match="does not verify"):
        _claims(_token(key=other), SETTINGS, PROVIDER, "n")


def test_the_highest_mapped_role_wins() -> None:
    assert role_for({"groups": ["readers", "ops"]}, SETTINGS) is Role.OPERATOR
    assert role_for({"groups": "admins"}, SETTINGS) is Role.ADMIN
    assert role_for({"groups": ["staff"]}, SETTINGS) is None
    assert role_for({}, SETTINGS) is None


def test_account_names_are_valid_and_marked() -> None:
    assert account_name({"preferred_username": "alice", "sub": "1"}) == "sso-alice"
    assert account_name({"email": "a b@x.example", "sub": "1"}) == "sso-a_b@x.example"
    assert (
        account_name({"sub": "x" * 100}).startswith("sso-")
        and len(account_name({"sub": "x" * 100})) <= 64
    )


def test_the_settings_refuse_an_incomplete_provider() -> None:
    with pytest.raises(SettingsError, match="OIDC_CLIENT_ID"):
        Settings(oidc_issuer=ISSUER, oidc_roles=(("a", "read"),))
    with pytest.raises(SettingsError, match="OIDC_ROLES"):
        Settings(oidc_issuer=ISSUER, oidc_client_id="c")
    with pytest.raises(SettingsError, match="https"):
        Settings(oidc_issuer="http://idp.example", oidc_client_id="c", oidc_roles=(("a", "read"),))
    env = {
        "HANDOFF_TRACE_OIDC_ISSUER": ISSUER,
        "HANDOFF_TRACE_OIDC_CLIENT_ID": "c",
        "HANDOFF_TRACE_OIDC_ROLES": "ht-ops=operator, ht-admins=admin",
    }
    assert Settings.from_env(env).oidc_roles == (("ht-ops", "operator"), ("ht-admins", "admin"))
    with pytest.raises(SettingsError, match="value=role"):
        Settings.from_env({**env, "HANDOFF_TRACE_OIDC_ROLES": "ht-ops=root"})


@pytest.fixture
def idp() -> Iterator[Idp]:
    p = Idp({"sub": "u-9"})
    try:
        yield p
    finally:
        p.close()


def test_the_provider_refuses_a_wrong_verifier(idp: Idp) -> None:
    # The test provider itself is strict: a code redeemed without its verifier fails.
    import httpx

    query = {
        "client_id": CLIENT_ID, "redirect_uri": "http://127.0.0.1/cb", "state": "s",
        "nonce": "n", "code_challenge": "abc", "code_challenge_method": "S256",
    }  # fmt: skip
    answer = httpx.get(idp.issuer + "/authorize", params=query, follow_redirects=False)
    code = answer.headers["location"].split("code=", 1)[1].split("&", 1)[0]
    form = {"code": code, "code_verifier": "wrong", "redirect_uri": "http://127.0.0.1/cb"}
    assert httpx.post(idp.issuer + "/token", data=form).status_code == 400
    assert idp.refusals == ["token: PKCE verifier or redirect URI"]


# --- identities: the provider's (iss, sub), never the name (issue #25) --------------------


@pytest.fixture
def sso_app(idp: Idp, databases: Any, world: Any, tmp_path: Any) -> Iterator[TestClient]:
    from tests.web.conftest import Clock, write_trust

    settings = Settings(
        database_url=databases.new("sqlite"),
        trust_file=write_trust(world, tmp_path / "trust.json"),
        oidc_issuer=idp.issuer,
        oidc_client_id=CLIENT_ID,
        oidc_role_claim="groups",
        oidc_roles=(("readers", "read"), ("admins", "admin")),
    )
    with TestClient(create_app(settings, clock=Clock())) as client:
        yield client


def _sso_login(client: TestClient, idp: Idp, claims: dict[str, Any]) -> Any:
    """One login through the provider as the person ``claims`` describe: the callback's
    answer (its cookie, if any, taken out of the client's jar)."""
    import httpx

    idp.claims = claims
    start = client.get("/oidc/start", follow_redirects=False)
    approved = httpx.get(start.headers["location"], follow_redirects=False)
    try:
        return client.get(approved.headers["location"], follow_redirects=False)
    finally:
        client.cookies.clear()


def _who(client: TestClient, cookie: str) -> tuple[str, Role]:
    from app.store.users import session_user

    with client.app.state.service.reading() as session:  # type: ignore[attr-defined]
        user = session_user(session, token=cookie, now=int(time.time()))
    assert user is not None
    return user.username, user.role


def test_two_people_whose_names_look_alike_are_two_accounts(sso_app: TestClient, idp: Idp) -> None:
    john = {"sub": "p-1", "preferred_username": "jöhn", "groups": ["readers"]}
    jahn = {"sub": "p-2", "preferred_username": "jähn", "groups": ["admins"]}
    first = _sso_login(sso_app, idp, john)
    assert first.status_code == 303, first.text
    john_cookie = first.cookies["ht_session"]
    second = _sso_login(sso_app, idp, jahn)
    assert second.status_code == 303, second.text
    jahn_cookie = second.cookies["ht_session"]
    john_name, john_role = _who(sso_app, john_cookie)
    jahn_name, jahn_role = _who(sso_app, jahn_cookie)
    # jähn's login neither took jöhn's account nor changed its role.
    assert john_name != jahn_name
    assert (john_role, jahn_role) == (Role.READ, Role.ADMIN)
    assert john_name == "sso-j_hn" and jahn_name.startswith("sso-j_hn-")
    # And a role change at the provider is that person's only.
    again = _sso_login(sso_app, idp, {**john, "groups": ["admins"]})
    assert _who(sso_app, again.cookies["ht_session"]) == (john_name, Role.ADMIN)
    assert _who(sso_app, jahn_cookie)[1] is Role.ADMIN
    third = _sso_login(sso_app, idp, {**jahn, "groups": ["readers"]})
    assert _who(sso_app, third.cookies["ht_session"]) == (jahn_name, Role.READ)
    assert _who(sso_app, john_cookie) == (john_name, Role.ADMIN)


def test_a_provider_name_that_a_local_account_holds_is_refused_with_a_page(
    sso_app: TestClient, idp: Idp
) -> None:
    from app.store.db import transaction
    from app.store.users import create_user

    engine = sso_app.app.state.service.engine  # type: ignore[attr-defined]
    with transaction(engine) as session:
        create_user(session, username="sso-otto", role=Role.READ, password="x" * 16, now=1)
    answer = _sso_login(sso_app, idp, {"sub": "p-3", "preferred_username": "otto",
                                       "groups": ["admins"]})  # fmt: skip
    assert answer.status_code == 403
    assert "text/html" in answer.headers["content-type"]
    assert "belongs to a local account" in answer.text
    assert "ht_session" not in answer.cookies


def test_an_account_made_before_subjects_were_kept_is_never_claimed(
    sso_app: TestClient, idp: Idp
) -> None:
    # An SSO account from before migration 0014 has no (iss, sub): nobody can tell whose it
    # was, so a login under its name gets an account of its own.
    from app.store.db import transaction
    from app.store.models import UserRow
    from app.store.users import SSO_HASH

    engine = sso_app.app.state.service.engine  # type: ignore[attr-defined]
    with transaction(engine) as session:
        session.add(UserRow(username="sso-alice", role="admin", password_hash=SSO_HASH,
                            created_at=1))  # fmt: skip
    answer = _sso_login(sso_app, idp, {"sub": "p-9", "preferred_username": "alice",
                                       "groups": ["readers"]})  # fmt: skip
    name, role = _who(sso_app, answer.cookies["ht_session"])
    assert name.startswith("sso-alice-") and role is Role.READ
