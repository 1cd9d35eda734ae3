"""The triage workflow in a real browser: a resolve without a note is refused with the form
kept, and the queue shows a new flag without a reload."""

from __future__ import annotations

import json

import httpx
from handoff_context import Signer, make_offer

from app.store import db
from app.store.tokens import Role, create_token
from tests.browser.conftest import Tab

NEWCOMER = "spiffe://late.example/agent/newcomer-7"


def test_a_resolve_without_a_note_is_refused_with_the_form_kept(tab: Tab) -> None:
    flag = tab.data.equivocation_flag
    tab.go(f"/flags/{flag}")
    tab.page.fill("#act textarea[name=note]", "   ")
    tab.page.click("#act button.primary")
    tab.page.wait_for_selector("#act-panel [role=alert]")
    assert "Resolving needs a note" in tab.page.inner_text("#act-panel [role=alert]")
    assert tab.page.locator("#act textarea[aria-invalid=true]").count() == 1
    assert tab.page.locator("table.compare").count() == 1  # still the flag's page
    tab.shot("flag-resolve-refused")
    tab.page.fill("#act textarea[name=note]", "the retry path re-signed; ops paged")
    tab.page.click("#act button.primary")
    tab.page.wait_for_selector("[role=status]")
    assert "resolved" in tab.page.inner_text(".page-head")
    tab.console.clear()  # the browser logs the 422 of the refused form itself
    assert tab.errors() == []


def _ingest_a_rejected_offer(tab: Tab) -> None:
    engine = db.make_engine(f"sqlite:///{tab.data.db}")
    try:
        with db.transaction(engine) as session:
            token = create_token(session, name="late", role=Role.INGEST, now=tab.data.now)
    finally:
        engine.dispose()
    stranger = Signer.generate(NEWCOMER, "Ed25519", kid="late-1")
    offer = make_offer(
        stranger, aud="spiffe://b.example/agent/helper-9", dialog="ctx-late", iat=tab.data.now - 5
    )
    line = {"received_at": tab.data.now - 4, "payload": {"offer": offer.decode()}}
    response = httpx.post(
        tab.base + "/api/v1/ingest",
        content=(json.dumps(line) + "\n").encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["verdicts"][0]["outcome"] == "reject"


def test_the_queue_shows_a_new_flag_without_a_reload(tab: Tab) -> None:
    tab.go("/flags?sort=severity-newest")
    assert NEWCOMER.rsplit("/", 1)[-1] not in tab.page.inner_text("table.triage")
    tab.page.evaluate("window.__unchanged = true")  # gone if the page were reloaded
    _ingest_a_rejected_offer(tab)
    row = tab.page.locator("table.triage tr.row", has_text="newcomer-7")
    row.wait_for()
    assert "rejected-element" in row.inner_text()
    assert tab.page.evaluate("window.__unchanged === true")
    assert tab.errors() == []
