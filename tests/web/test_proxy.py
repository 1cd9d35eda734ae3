"""Proxy awareness (issue 15, item 2): X-Forwarded-For and X-Forwarded-Proto are believed
only from the proxies in HANDOFF_TRACE_FORWARDED_ALLOW_IPS (none by default). Behind a
trusted TLS-terminating proxy the session cookie is Secure and the login limits count the
client's address; from anyone else the headers change nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.settings import Settings, SettingsError
from app.web.app import create_app
from tests.databases import Databases
from tests.web.accounts import PASSWORD, create_accounts
from tests.web.conftest import Clock

PROXY = ("10.0.0.7", 41000)
ELSEWHERE = ("192.0.2.9", 41000)
FORWARDED = {"X-Forwarded-For": "203.0.113.5", "X-Forwarded-Proto": "https"}


@pytest.fixture
def app_settings(databases: Databases, trust_file: Path) -> Settings:
    return Settings(
        database_url=databases.new("sqlite"),
        trust_file=trust_file,
        forwarded_allow_ips=("10.0.0.0/8",),
        login_failures_per_address=2,
        login_failures_per_name=50,
    )


@pytest.fixture
def clients(app_settings: Settings) -> Iterator[dict[str, TestClient]]:
    app = create_app(app_settings, clock=Clock())
    with (
        TestClient(app, client=PROXY, base_url="http://dash.example") as proxied,
        TestClient(app, client=ELSEWHERE, base_url="http://dash.example") as direct,
    ):
        create_accounts(app.state.service.engine)
        yield {"proxy": proxied, "direct": direct}


def login(client: TestClient, name: str, password: str) -> Any:
    return client.post(
        "/login",
        data={"username": name, "password": password, "next": "/"},
        headers=FORWARDED,
        follow_redirects=False,
    )


def test_a_trusted_tls_proxy_gets_a_secure_cookie(clients: dict[str, TestClient]) -> None:
    behind = login(clients["proxy"], "rita", PASSWORD)
    assert behind.status_code == 303
    assert "secure" in behind.headers["set-cookie"].lower()
    # The same headers from an address that is no trusted proxy are ignored.
    spoofed = login(clients["direct"], "rita", PASSWORD)
    assert spoofed.status_code == 303
    assert "secure" not in spoofed.headers["set-cookie"].lower()


def test_the_address_limit_counts_the_client_behind_the_proxy(
    clients: dict[str, TestClient],
) -> None:
    """Through the proxy, failures count against the forwarded client (203.0.113.5); a
    direct client claiming that address in X-Forwarded-For is counted as itself."""
    for i in range(2):
        assert login(clients["proxy"], f"name{i}", "wrong password!").status_code == 401
    assert login(clients["proxy"], "rita", PASSWORD).status_code == 429
    assert login(clients["direct"], "rita", PASSWORD).status_code == 303


def test_no_proxy_is_trusted_by_default() -> None:
    assert Settings.from_env({}).forwarded_allow_ips == ()
    proxies = Settings.from_env({"HANDOFF_TRACE_FORWARDED_ALLOW_IPS": "10.0.0.0/8, ::1"})
    assert proxies.forwarded_allow_ips == ("10.0.0.0/8", "::1")
    with pytest.raises(SettingsError, match="FORWARDED_ALLOW_IPS"):
        Settings.from_env({"HANDOFF_TRACE_FORWARDED_ALLOW_IPS": "proxy.example"})
