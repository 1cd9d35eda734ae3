"""The case pages over HTTP (no browser): the ownership timeline's figure, the envelope
view (verified facts apart from claimed ones, the summary labelled, reference outcomes),
flags linked to triage, hostile text, the empty list and the designed 404.

The store's side (``app.store.cases``) has its own tests; here it is replaced by the
hand-built worked example of tests/web/case_data.py, so the page code is tested alone.
The browser test (tests/browser/test_cases.py) runs the same pages on ingested data.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.ingest.cases import CaseEvent, Epoch
from app.settings import Settings
from app.store import db
from app.store.cases import CaseSummary
from app.store.tokens import Role
from app.store.users import create_user
from app.web import cases, charts
from app.web.app import create_app
from tests.web import case_data

PASSWORD = "a long enough password"


def test_the_timeline_draws_one_band_per_epoch_and_the_stale_write_apart() -> None:
    figure = charts.case_figure(case_data.detail())
    bands = [t for t in figure["data"] if t["type"] == "bar"]
    assert len(bands) == 1 and bands[0]["text"] == ["epoch 3", "epoch 4"]
    assert bands[0]["y"] == ["triage", "billing"]
    traces = {t["name"]: t for t in figure["data"] if t["type"] == "scatter"}
    stale = traces["stale or rejected write/act"]
    assert stale["x"] == [charts._iso(case_data.T0 + 3635)] and stale["y"] == ["triage"]
    assert stale["marker"]["symbol"] == "x"
    # The in-epoch writes stay ordinary writes.
    assert len(traces["write"]["x"]) == 2
    assert {"handoff sent", "accepted", "handed-off mark"} <= set(traces)


def test_a_write_at_the_current_epoch_is_not_stale_but_an_older_one_is() -> None:
    detail = case_data.detail()
    late = [e for e in detail.events if e.at > case_data.T0 + 60]
    applied_old = late[-1].__class__(**{**late[-1].__dict__, "outcome": "applied"})
    assert not charts.is_stale(late[0], detail.epochs)  # billing at epoch 4
    assert charts.is_stale(late[-1], detail.epochs)  # refused
    assert charts.is_stale(applied_old, detail.epochs)  # epoch 3 after epoch 4 began


def test_the_timeline_uses_the_ledgers_fence_and_its_exemption() -> None:
    """An older-epoch write in the implied band of the first handoff is fenced by nothing
    (the ledger raises no flag), so the timeline does not draw it stale; after an
    acceptance it is."""
    t0 = case_data.T0
    write = CaseEvent(t0 + 10, "write", "triage", 2, None, "applied", None, "capture:2")
    implied = (Epoch(3, "billing", t0, None, None),)
    assert not charts.is_stale(write, implied)
    accepted = (Epoch(1, "billing", t0, t0 + 5, None), Epoch(3, "triage", t0 + 5, None, "c:3"))
    assert charts.is_stale(write, accepted)


def test_hostile_names_in_the_timeline_are_text_for_plotly() -> None:
    detail = case_data.detail()
    evil = "https://evil.example/<b>x</b>\u202e"
    events = tuple(e.__class__(**{**e.__dict__, "agent": evil}) for e in detail.events)
    figure = charts.case_figure(detail.__class__(**{**detail.__dict__, "events": events}))
    text = repr(figure)
    assert "<b>x</b>" not in text and "\u202e" not in text
    assert "&lt;b&gt;x&lt;/b&gt;&lt;U+202E&gt;" in text


def test_hover_texts_use_no_markup_that_plotly_styles() -> None:
    """Plotly draws ``<b>``, ``<i>`` and the like with a style attribute, which the CSP
    refuses on every hover; ``<br>`` is the only tag the timeline may put in a label."""
    figure = charts.case_figure(case_data.detail())
    texts = [t for trace in figure["data"] for t in trace["hovertext"]]
    assert texts and all("<" not in t.replace("<br>", "") for t in texts), texts


def test_facts_fall_into_verified_and_claimed() -> None:
    view = cases.envelope_view(case_data.detail().envelopes[0])
    assert [f.key for f in view.verified] == ["account_id", "payment_ids"]
    assert [f.key for f in view.claimed] == ["disputed_amount", "customer_note"]
    assert view.unsourced == 1


# --- the pages ----------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path, trust_file: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    detail = case_data.detail()
    summary = CaseSummary(detail.case_id, detail.owner, detail.epoch, 1, 1, case_data.T0 + 3635)
    listed: list[CaseSummary] = [summary]

    def list_cases(session: Any, **kw: Any) -> list[CaseSummary]:
        found = [c for c in listed if not kw.get("q") or kw["q"] in c.case_id]
        return found[kw["offset"] : kw["offset"] + kw["limit"]]

    monkeypatch.setattr(cases, "list_cases", list_cases)
    monkeypatch.setattr(
        cases, "case_detail", lambda session, case_id: detail if case_id == detail.case_id else None
    )
    url = f"sqlite:///{tmp_path / 'cases.db'}"
    engine = db.make_engine(url)
    try:
        db.ensure_schema(engine)
        with db.transaction(engine) as session:
            create_user(session, username="rita", role=Role.READ, password=PASSWORD, now=0)
    finally:
        engine.dispose()
    app = create_app(Settings(database_url=url, trust_file=trust_file))
    with TestClient(app, raise_server_exceptions=True) as test_client:
        form = {"username": "rita", "password": PASSWORD, "next": "/"}
        test_client.post("/login", data=form, follow_redirects=False)
        test_client.listed = listed  # type: ignore[attr-defined]
        yield test_client


def _section(html: str, css_class: str) -> str:
    found = re.search(rf'<div class="fact-group {css_class}">(.*?)</table>', html, re.S)
    assert found, css_class
    return found.group(1)


def test_the_case_page_shows_the_envelope_the_ledger_and_the_flag(client: Any) -> None:
    response = client.get(f"/cases/{case_data.CASE}")
    assert response.status_code == 200
    html = response.text
    assert 'aria-current="page">Cases<' in html
    assert 'class="plot" data-figure=' in html and "/vendor/plotly.min.js" in html
    verified, claimed = _section(html, "verified"), _section(html, "claimed")
    assert "account_id" in verified and "payment_ids" in verified
    assert "disputed_amount" not in verified and "disputed_amount" in claimed
    assert "no source" in claimed and "no source" not in verified
    assert "written by the sender · not verified" in html
    assert '<span class="badge ref-verified">verified</span>' in html
    assert 'href="/flags/41">#41 two-owners</a>' in html
    assert "stale</span>" in html  # the stale write in the text timeline
    assert " style=" not in html and "<script>" not in html.replace("<script src=", "")


def test_hostile_fact_values_are_text(client: Any) -> None:
    html = client.get(f"/cases/{case_data.CASE}").text
    assert case_data.HOSTILE_FACT not in html
    assert "&lt;img src=x onerror=alert(7)&gt;" in html


def test_an_unknown_case_is_a_designed_404(client: Any) -> None:
    response = client.get("/cases/no-such-case")
    assert response.status_code == 404
    assert "No such case" in response.text and 'href="/cases"' in response.text
    assert "no-such-case" in response.text


def test_the_case_list_links_each_case_and_filters(client: Any) -> None:
    html = client.get("/cases").text
    assert f'href="/cases/{case_data.CASE}"' in html
    assert client.get("/cases?q=nothing-like-it").text.count("No case matches") == 1
    client.listed.clear()
    assert "No cases yet" in client.get("/cases").text
