"""The OpenID Connect login's checks, without a browser: the ID token checks, the role
mapping, the account name, and the settings it needs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet

from app.settings import Settings, SettingsError
from app.store.tokens import Role
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
