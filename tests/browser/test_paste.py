"""Paste and verify as jwt.io does it, in a real browser: a correctly signed demo offer reads
"Signature valid" (and by which key) before anything else is judged, judged now it is
stale, and judged at its own time it is accepted; the judging time and the receiver are on
the form. An uploaded capture's report is paged and filters to rejections."""

from __future__ import annotations

import json

from sqlalchemy import select

from app.store import db
from app.store.models import ElementRow, HopRow, LinkRow
from tests.browser.conftest import Tab


def _root_offer(tab: Tab) -> ElementRow:
    """A JWS offer the demo run stored for a completed hop that starts its chain."""
    engine = db.make_engine(f"sqlite:///{tab.data.db}")
    try:
        with db.transaction(engine) as session:
            return session.execute(
                select(ElementRow)
                .join(HopRow, HopRow.offer == ElementRow.digest)
                .where(ElementRow.form == "jws", HopRow.state == "completed")
                .where(~ElementRow.digest.in_(select(LinkRow.offer)))
                .order_by(ElementRow.iat)
                .limit(1)
            ).scalar_one()
    finally:
        engine.dispose()


def test_a_pasted_demo_offer_reads_signature_valid_first(tab: Tab) -> None:
    offer = _root_offer(tab)
    tab.go("/upload")
    tab.page.fill("textarea[name=paste]", offer.octets.decode())
    tab.page.click("#upload button[type=submit]")
    steps = tab.page.locator(".pasted ol.steps li.step")
    steps.first.wait_for()
    texts = steps.all_inner_texts()
    assert texts[0].startswith("Decoded")
    assert texts[1].startswith("Signature valid")
    assert offer.iss.rsplit("/", 1)[-1] in texts[1]  # by which issuer's key
    kid = json.loads(tab.page.inner_text(".pasted pre.json >> nth=0"))["kid"]
    assert kid in texts[1]
    # Judged now (hours after the offer's short lifetime) it is stale; that comes after.
    assert texts[-1].startswith("Verdict") and "stale" in texts[-1]
    assert "before the judging time" in tab.page.inner_text(".pasted dl.times")
    assert "no receiver given" in tab.page.inner_text(".trust-used")
    tab.shot("paste-now")
    # Judged at its own time, the same offer is accepted.
    tab.page.check("input[name=when][value=own]")
    tab.page.click("#upload button[type=submit]")
    tab.page.wait_for_selector(".pasted ol.steps li.verdict-step:has-text('accept')")
    texts = tab.page.locator(".pasted ol.steps li.step").all_inner_texts()
    assert texts[1].startswith("Signature valid") and "accept" in texts[-1]
    assert "at the judging time" in tab.page.inner_text(".pasted dl.times")  # iat
    # With a receiver, the audience is checked against it.
    tab.page.fill("input[name=receiver]", "spiffe://nowhere.example/agent/x")
    tab.page.click("#upload button[type=submit]")
    tab.page.wait_for_selector(".pasted ol.steps li.verdict-step:has-text('wrong-audience')")
    assert tab.page.locator(".pasted li.step.sig.pass").count() == 1
    tab.shot("paste-own-time")
    assert tab.errors() == []


def test_an_uploaded_capture_is_paged_and_filters_to_rejections(tab: Tab) -> None:
    tab.go("/upload")
    tab.page.set_input_files("input[name=file]", str(tab.data.capture))
    tab.page.click("#upload button[type=submit]")
    tab.page.wait_for_selector("table.report tbody tr")
    assert tab.page.locator("table.report tbody tr").count() == 100
    counts = tab.page.inner_text("p.kpis")
    tab.page.click("nav.pager a[rel=next]")
    tab.page.wait_for_url("**/upload?report=*page=2*")
    first = tab.page.locator("table.report tbody tr td.num").first.inner_text()
    assert first == "101"
    assert tab.page.inner_text("p.kpis") == counts  # the counts are the whole report's
    tab.page.click("nav.report-filter a:text-is('rejections only')")
    tab.page.wait_for_url("**only=reject*")
    outcomes = tab.page.locator("table.report tbody tr td .badge.out-reject")
    rows = tab.page.locator("table.report tbody tr")
    assert rows.count() > 0 and outcomes.count() == rows.count()
    tab.shot("upload-rejections")
    assert tab.errors() == []
