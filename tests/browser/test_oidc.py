"""Login through an OpenID Connect provider in a real browser (authorization code with
PKCE, against the in-process provider of tests/web/oidc_provider.py): the mapped role, a
person without one refused, and local accounts working beside it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Served, open_tab, serve_store
from tests.web.dashboard_data import Dataset, copy
from tests.web.oidc_provider import CLIENT_ID, Provider


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    p = Provider({"sub": "u-1", "preferred_username": "alice", "groups": ["staff", "ht-ops"]})
    try:
        yield p
    finally:
        p.close()


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, provider: Provider, dashboard_data: Dataset
) -> Iterator[Served]:
    data = copy(dashboard_data, tmp_path_factory.mktemp("oidc"))
    settings = {
        "oidc_issuer": provider.issuer,
        "oidc_client_id": CLIENT_ID,
        "oidc_role_claim": "groups",
        "oidc_roles": (("ht-readers", "read"), ("ht-ops", "operator")),
    }
    with serve_store(data.db, data.trust, data.now, **settings) as base:
        yield Served(base, data)


def test_an_oidc_login_yields_the_mapped_role(
    browser: Any, served: Served, provider: Provider
) -> None:
    tab = open_tab(browser, served, user=None)
    try:
        tab.go("/flags?view=urgent")
        assert "/login" in tab.page.url
        tab.page.click("a.sso")
        tab.page.wait_for_url(served.base + "/flags?view=urgent")
        who = tab.page.inner_text("header .who")
        assert "sso-alice" in who and "operator" in who
        assert provider.refusals == []
        tab.shot("oidc-logged-in")
        assert tab.errors() == []
    finally:
        tab.page.context.close()


def test_a_person_without_a_mapped_role_is_refused(
    browser: Any, served: Served, provider: Provider
) -> None:
    provider.claims = {"sub": "u-2", "preferred_username": "bob", "groups": ["staff"]}
    tab = open_tab(browser, served, user=None)
    try:
        tab.go("/login")
        tab.page.click("a.sso")
        tab.page.wait_for_selector("[role=alert]")
        assert "no role for handoff-trace" in tab.page.inner_text("[role=alert]")
        tab.go("/")
        assert "/login" in tab.page.url  # no session was opened
    finally:
        tab.page.context.close()


def test_local_accounts_keep_working(browser: Any, served: Served) -> None:
    tab = open_tab(browser, served)  # logs in as otto through the form
    try:
        tab.go("/")
        assert "otto" in tab.page.inner_text("header .who")
    finally:
        tab.page.context.close()
