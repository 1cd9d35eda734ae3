"""The dashboard over HTTP (no browser): login, roles, CSRF, security headers, escaping of
hostile text, fragments for htmx, triage actions and their audit log, upload and verify.

The browser tests (tests/browser) drive the same pages in Chromium."""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from handoff_context import digest_text
from sqlalchemy import select

from app.settings import Settings
from app.store import db
from app.store.models import ElementRow
from app.store.tokens import Role
from app.store.users import create_user
from app.web.app import create_app
from tests.web import case_data
from tests.web.dashboard_data import BIDI_DETAIL, HOSTILE_AGENT, HOSTILE_DIALOG, Dataset

PASSWORD = "a long enough password"
PAGES = (
    "/",
    "/flags",
    "/flags?status=any&sort=newest",
    "/dialogs",
    "/hops",
    "/hops?state=unresolved",
    "/agents",
    "/trust",
    "/search?q=ctx-",
    "/upload",
    "/cases",
    "/cases?q=case&flagged=1",
    "/flags?view=urgent",
    "/flags?view=mine",
    "/notifications",
)


@pytest.fixture(scope="session")
def dataset(dashboard_data: Dataset) -> Dataset:
    return dashboard_data


class Dash:
    def __init__(self, client: TestClient, data: Dataset) -> None:
        self.client = client
        self.data = data

    def login(self, username: str, password: str = PASSWORD) -> Any:
        return self.client.post(
            "/login",
            data={"username": username, "password": password, "next": "/"},
            follow_redirects=False,
        )

    def csrf(self) -> str:
        html = self.client.get("/upload").text
        found = re.search(r'<meta name="csrf-token" content="([^"]+)">', html)
        assert found, "a logged-in page carries the CSRF token"
        return found.group(1)


def _start(data: Dataset, tmp: Path, **settings: Any) -> Iterator[Dash]:
    path = tmp / "store.db"
    shutil.copyfile(data.db, path)
    url = f"sqlite:///{path}"
    engine = db.make_engine(url)
    try:
        with db.transaction(engine) as session:
            for name, role in (("ada", Role.ADMIN), ("otto", Role.OPERATOR), ("rita", Role.READ)):
                create_user(session, username=name, role=role, password=PASSWORD, now=data.now)
    finally:
        engine.dispose()
    app = create_app(
        Settings(database_url=url, trust_file=data.trust, **settings), clock=lambda: data.now
    )
    with TestClient(app, raise_server_exceptions=True) as client:
        yield Dash(client, data)


@pytest.fixture
def dash(dataset: Dataset, tmp_path: Path) -> Iterator[Dash]:
    yield from _start(dataset, tmp_path)


# --- login and sessions -----------------------------------------------------------------


def test_pages_send_a_stranger_to_the_login_page(dash: Dash) -> None:
    response = dash.client.get("/flags?kind=equivocation", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=/flags%3Fkind%3Dequivocation"
    htmx = dash.client.get("/", headers={"HX-Request": "true"}, follow_redirects=False)
    assert htmx.headers["HX-Redirect"].startswith("/login")


def test_login_sets_a_hardened_session_cookie(dash: Dash) -> None:
    response = dash.login("otto")
    assert response.status_code == 303 and response.headers["location"] == "/"
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "path=/" in cookie
    assert "secure" not in cookie  # plain http here; see the TLS test below
    assert dash.client.get("/").status_code == 200


def test_the_cookie_is_secure_over_tls(dataset: Dataset, tmp_path: Path) -> None:
    for dash in _start(dataset, tmp_path):
        dash.client.base_url = dash.client.base_url.copy_with(scheme="https")
        assert "secure" in dash.login("otto").headers["set-cookie"].lower()


def test_a_wrong_name_and_a_wrong_password_look_the_same(dash: Dash) -> None:
    unknown = dash.login("nobody", "whatever it is here")
    wrong = dash.login("otto", "not the password!!")
    assert unknown.status_code == wrong.status_code == 401
    assert "Wrong user name or password." in unknown.text
    assert unknown.text.replace("nobody", "otto") == wrong.text


def test_logins_are_rate_limited(dash: Dash) -> None:
    for _ in range(5):
        assert dash.login("otto", "not the password!!").status_code == 401
    blocked = dash.login("otto")
    assert blocked.status_code == 429 and "Too many failed logins" in blocked.text
    assert "set-cookie" not in blocked.headers


def test_next_never_leaves_the_site(dash: Dash) -> None:
    response = dash.client.post(
        "/login",
        data={"username": "otto", "password": PASSWORD, "next": "//evil.example/x"},
        follow_redirects=False,
    )
    assert response.headers["location"] == "/"


def test_logout_needs_the_token_and_ends_the_session(dash: Dash) -> None:
    dash.login("rita")
    assert dash.client.post("/logout", follow_redirects=False).status_code == 403
    token = dash.csrf()
    response = dash.client.post("/logout", data={"csrf": token}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/login"
    assert dash.client.get("/", follow_redirects=False).status_code == 303


# --- every page, headers, escaping ------------------------------------------------------


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_with_the_security_headers(dash: Dash, path: str) -> None:
    dash.login("rita")
    response = dash.client.get(path)
    assert response.status_code == 200, response.text[:500]
    csp = response.headers["content-security-policy"]
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["cache-control"] == "no-store"
    html = response.text
    assert "<script>" not in html.replace("<script src=", "")  # no inline script at all
    assert " style=" not in html  # no inline style either (style-src 'self')


def test_hostile_identifiers_are_text(dash: Dash) -> None:
    dash.login("rita")
    pages = [dash.client.get(p).text for p in ("/flags?status=any", "/dialogs", "/agents", "/")]
    hop = re.search(r'href="(/hops/[^"]+)"', dash.client.get("/search?q=" + HOSTILE_DIALOG).text)
    assert hop, "the hostile dialog's hop is found by search"
    pages.append(dash.client.get(hop.group(1)).text)
    joined = "\n".join(pages)
    assert "&lt;img/src=x/onerror=alert(document.domain)&gt;" in joined
    assert "<img/src" not in joined and "<svg/onload" not in joined
    assert "<script>alert(2)" not in joined
    # The bidi override is shown as a badge and never sent as the character itself.
    assert "\u202e" not in joined
    assert ">U+202E</span>" in pages[-1]
    assert HOSTILE_AGENT not in joined and HOSTILE_DIALOG not in joined
    assert BIDI_DETAIL not in joined


def test_an_htmx_request_gets_only_its_block(dash: Dash) -> None:
    dash.login("rita")
    headers = {"HX-Request": "true", "HX-Target": "flag_table"}
    fragment = dash.client.get("/flags?kind=equivocation", headers=headers)
    assert fragment.status_code == 200
    assert fragment.text.lstrip().startswith('<section class="card" id="flag_table">')
    assert "<html" not in fragment.text and "equivocation" in fragment.text
    live = dash.client.get("/", headers={"HX-Request": "true", "HX-Target": "live"})
    assert live.text.lstrip().startswith('<div id="live"')
    restore = {**headers, "HX-History-Restore-Request": "true"}
    assert "<html" in dash.client.get("/flags", headers=restore).text


def test_every_hx_get_has_a_real_href_or_action(dash: Dash) -> None:
    dash.login("rita")
    for path in PAGES:
        for tag in re.findall(r"<(?:a|form)\b[^>]*hx-get=[^>]*>", dash.client.get(path).text):
            assert "href=" in tag or "action=" in tag, tag


# --- triage -----------------------------------------------------------------------------


def test_acknowledging_needs_the_csrf_token_and_is_audited(dash: Dash) -> None:
    flag = dash.data.equivocation_flag
    dash.login("otto")
    form = {"ids": [str(flag)], "action": "acknowledge", "note": "checked with <b>ops</b>"}
    refused = dash.client.post("/flags/bulk", data=form, follow_redirects=False)
    assert refused.status_code == 403
    token = dash.csrf()
    foreign = dash.client.post(
        "/flags/bulk",
        data={**form, "csrf": token},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert foreign.status_code == 403
    done = dash.client.post(
        "/flags/bulk",
        data={**form, "csrf": token, "back": "kind=equivocation"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert done.headers["location"].startswith("/flags?kind=equivocation&done=")
    page = dash.client.get(f"/flags/{flag}").text
    assert "user:otto" in page and "acknowledge" in page
    assert "checked with &lt;b&gt;ops&lt;/b&gt;" in page
    assert 'badge fs-acknowledged">acknowledged' in page


def test_htmx_actions_may_send_the_token_as_a_header(dash: Dash) -> None:
    flag = dash.data.equivocation_flag
    dash.login("otto")
    response = dash.client.post(
        f"/flags/{flag}/action",
        data={"action": "assign", "assignee": "otto"},
        headers={"X-CSRF-Token": dash.csrf()},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert "user:otto" in dash.client.get(f"/flags/{flag}").text


def test_a_reader_cannot_triage(dash: Dash) -> None:
    dash.login("rita")
    response = dash.client.post(
        "/flags/bulk",
        data={"ids": [str(dash.data.equivocation_flag)], "action": "resolve", "csrf": dash.csrf()},
        follow_redirects=False,
    )
    assert response.status_code == 403 and "may not triage" in response.text


def test_snooze_needs_a_time(dash: Dash) -> None:
    dash.login("otto")
    form = {"ids": [str(dash.data.equivocation_flag)], "action": "snooze", "csrf": dash.csrf()}
    assert dash.client.post("/flags/bulk", data=form).status_code == 422
    form["until"] = "2099-01-01T09:30"
    assert dash.client.post("/flags/bulk", data=form, follow_redirects=False).status_code == 303
    assert "until 2099-01-01 09:30:00Z" in dash.client.get("/flags?status=snoozed").text


def test_the_equivocation_evidence_shows_both_offers(dash: Dash) -> None:
    dash.login("rita")
    page = dash.client.get(f"/flags/{dash.data.equivocation_flag}").text
    assert "Two signed offers for one hop" in page
    assert page.count('class="octets"') >= 2
    assert "Signature-only" in page or "Content:" in page


# --- upload -----------------------------------------------------------------------------


def test_upload_verify_only_reports_every_element(dash: Dash) -> None:
    dash.login("otto")
    capture = dash.data.capture.read_bytes()
    response = dash.client.post(
        "/upload",
        data={"mode": "verify", "csrf": dash.csrf()},
        files={"file": ("capture.jsonl", capture, "application/octet-stream")},
    )
    assert response.status_code == 200, response.text[:500]
    assert "Report: " in response.text and "verified only" in response.text
    link = re.search(r'href="(/upload/reports/[^"]+\.json)"', response.text)
    assert link
    report = dash.client.get(link.group(1)).json()
    assert report["counts"]["verdicts"] == len(report["verdicts"]) > 10
    assert report["counts"]["reject"] > 0
    # Another user cannot fetch it.
    dash.client.cookies.clear()
    dash.login("rita")
    assert dash.client.get(link.group(1)).status_code == 404


def test_only_an_admin_may_store_uploads(dash: Dash, caplog: pytest.LogCaptureFixture) -> None:
    dash.login("otto")
    files = {"file": ("c.jsonl", dash.data.capture.read_bytes(), "application/x-ndjson")}
    form = {"mode": "store", "csrf": dash.csrf()}
    assert dash.client.post("/upload", data=form, files=files).status_code == 403
    dash.client.cookies.clear()
    dash.login("ada")
    form["csrf"] = dash.csrf()
    with caplog.at_level(logging.INFO, logger="handoff_trace.ingest"):
        stored = dash.client.post("/upload", data=form, files=files)
    assert stored.status_code == 200 and "verified and stored" in stored.text
    # A stored upload is an ingest like POST /api/v1/ingest: one log line with its counts.
    [line] = [r for r in caplog.records if r.name == "handoff_trace.ingest"]
    assert line.route == "upload"  # type: ignore[attr-defined]
    assert line.counts["verdicts"] > 10  # type: ignore[attr-defined]


def test_a_pasted_jws_is_verified(dash: Dash) -> None:
    dash.login("otto")
    line = json.loads(dash.data.capture.read_text().splitlines()[0])
    jws = re.search(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+", json.dumps(line))
    assert jws
    response = dash.client.post("/upload", data={"paste": jws.group(0), "csrf": dash.csrf()})
    assert response.status_code == 200 and "pasted.json" in response.text


def test_an_upload_over_the_limit_is_refused_with_a_message(
    dataset: Dataset, tmp_path: Path
) -> None:
    for dash in _start(dataset, tmp_path, max_request_bytes=100_000):
        dash.login("otto")
        response = dash.client.post(
            "/upload",
            data={"mode": "verify", "csrf": dash.csrf()},
            files={"file": ("big.jsonl", b"{}\n" * 20_000, "application/x-ndjson")},
        )
        assert response.status_code == 413
        assert "larger than" in response.text and "<html" in response.text


# --- search, assets ---------------------------------------------------------------------


def test_search_finds_a_hop_by_digest_prefix_and_jumps_on_a_whole_digest(dash: Dash) -> None:
    dash.login("rita")
    offer = re.search(r'href="/hops/([A-Za-z0-9_-]{43})"', dash.client.get("/hops").text)
    assert offer
    digest = offer.group(1)
    found = dash.client.get(f"/search?q={digest[:8]}")
    assert f"/hops/{digest}" in found.text
    jump = dash.client.get(f"/search?q={digest}", follow_redirects=False)
    assert jump.status_code == 303 and jump.headers["location"] == f"/hops/{digest}"
    octets = dash.client.get(f"/elements/{digest}?download=1")
    assert octets.headers["content-type"] in ("application/jose", "application/cose")
    assert octets.headers["content-disposition"].startswith("attachment")
    shown = dash.client.get(f"/elements/{digest}")
    if octets.headers["content-type"] == "application/jose":  # a JWS is shown as text
        assert shown.headers["content-type"] == "text/plain; charset=us-ascii"
        assert shown.headers["content-disposition"].startswith("inline")
        assert shown.content == octets.content


def test_a_cose_element_is_shown_on_its_page_with_a_download_link(
    dash: Dash, tmp_path: Path
) -> None:
    """``/elements/<digest>`` shows an element rather than saving a file: a COSE element's
    octets are binary, so the browser goes to its page (decoded, with the download link)."""
    engine = db.make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        with db.transaction(engine) as session:
            cose = session.execute(
                select(ElementRow.digest).where(ElementRow.form == "cose").limit(1)
            ).scalar_one()
    finally:
        engine.dispose()
    digest = digest_text(cose)
    dash.login("rita")
    shown = dash.client.get(f"/elements/{digest}", follow_redirects=False)
    assert shown.status_code == 303 and shown.headers["location"] == f"/hops/{digest}"
    page = dash.client.get(shown.headers["location"]).text
    assert f'href="/elements/{digest}?download=1"' in page
    saved = dash.client.get(f"/elements/{digest}?download=1")
    assert saved.headers["content-type"] == "application/cose"
    assert saved.headers["content-disposition"].startswith("attachment")


def test_plotly_and_htmx_are_served_locally(dash: Dash) -> None:
    plotly = dash.client.get("/vendor/plotly.min.js")
    assert plotly.status_code == 200 and plotly.headers["content-type"].startswith(
        "text/javascript"
    )
    assert dash.client.get("/static/htmx.min.js").status_code == 200
    assert dash.client.get("/static/app.js").status_code == 200


def test_every_latest_rejection_opens_its_hop_or_element_page(dash: Dash) -> None:
    dash.login("rita")
    overview = dash.client.get("/").text
    rejected = overview.split("Latest rejected elements", 1)[1]
    links = re.findall(r'href="(/hops/[A-Za-z0-9_-]{43})"', rejected)
    assert links
    pages = [dash.client.get(link) for link in links]
    assert all(p.status_code == 200 for p in pages)
    alone = [p.text for p in pages if "element without a hop" in p.text]
    assert alone and all("signature" in text and "Flags naming it" in text for text in alone)


def test_every_flag_page_shows_its_kinds_evidence(dash: Dash) -> None:
    dash.login("rita")
    queue = dash.client.get("/flags?status=any").text
    flags = sorted(set(re.findall(r'href="/flags/(\d+)">#\d+ ([a-z-]+)</a>', queue)))
    kinds = {kind for _, kind in flags}
    assert {"equivocation", "lost-outcome", "cancel-not-propagated"} <= kinds
    expected = {
        "equivocation": "Two signed offers for one hop",
        "lost-outcome": "missing: completed or failed",
        "cancel-not-propagated": "Downstream offers and when they were canceled",
        "cancel-race": "Hop timeline",
        "partial-failure": "Hop timeline",
        "rejected-element": "Evidence",
    }
    for flag_id, kind in flags:
        page = dash.client.get(f"/flags/{flag_id}")
        assert page.status_code == 200
        assert expected.get(kind, "Evidence") in page.text, (flag_id, kind)


def test_an_empty_store_renders_every_page(dataset: Dataset, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    engine = db.make_engine(url)
    try:
        db.ensure_schema(engine)
        with db.transaction(engine) as session:
            create_user(session, username="rita", role=Role.READ, password=PASSWORD, now=0)
    finally:
        engine.dispose()
    app = create_app(Settings(database_url=url, trust_file=dataset.trust))
    with TestClient(app) as client:
        dash = Dash(client, dataset)
        dash.login("rita")
        for path in PAGES:
            response = client.get(path)
            assert response.status_code == 200, (path, response.text[:300])
        assert "No open flags" in client.get("/").text
        assert client.get("/dialogs/nothing-here").status_code == 404
        assert client.get("/hops/not-a-digest").status_code == 404
        assert client.get("/flags/12345").status_code == 404
        assert "No cases yet" in client.get("/cases").text
        missing = client.get("/cases/case-nowhere")
        assert missing.status_code == 404 and "No such case" in missing.text


def test_the_worked_example_case_page_and_its_flag_in_triage(dash: Dash) -> None:
    dash.login("rita")
    response = dash.client.get(f"/cases/{case_data.CASE}")
    html = response.text
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    assert " style=" not in html and "<script>" not in html.replace("<script src=", "")
    assert "owner (epoch band)" in html and "stale or rejected write/act" in html
    assert '<span class="badge ref-verified">verified</span>' in html
    flag = re.search(r'href="/flags/(\d+)">#\d+ unsourced-fact</a>', html)
    assert flag, "the unsourced claim is flagged and linked to its triage page"
    queue = dash.client.get("/flags?kind=unsourced-fact").text
    assert f'href="/cases/{case_data.CASE}"' in queue
    page = dash.client.get(f"/flags/{flag.group(1)}").text
    assert f'<a href="/cases/{case_data.CASE}">' in page
    listed = dash.client.get("/cases?q=2026-0042").text
    assert f'href="/cases/{case_data.CASE}"' in listed and "No case matches" not in listed


def test_refused_octets_open_their_own_page_and_show_on_their_hop(dash: Dash) -> None:
    from handoff_context import digest_text
    from sqlalchemy import select

    from app.store.models import HopRow, RejectedOctetsRow

    engine = db.make_engine(f"sqlite:///{dash.data.db}")
    try:
        with db.transaction(engine) as session:
            refused = list(session.execute(select(RejectedOctetsRow)).scalars())
            filed = {
                r.digest: hop.offer
                for r in refused
                if (hop := session.get(HopRow, (r.hop_iss or "", r.hop or ""))) is not None
            }
    finally:
        engine.dispose()
    assert refused, "the dashboard data set holds octets refused before parsing"
    dash.login("rita")
    for row in refused:
        page = dash.client.get(f"/hops/{digest_text(row.digest)}")
        assert page.status_code == 200
        assert "refused before it became an element" in page.text
    for digest, offer in filed.items():
        hop_page = dash.client.get(f"/hops/{digest_text(offer)}").text
        assert "Refused before parsing" in hop_page and digest_text(digest)[:12] in hop_page
