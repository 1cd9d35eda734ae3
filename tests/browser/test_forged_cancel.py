"""A forged cancel shows on the hop it attacks: signed by a trusted agent that is not the
hop's issuer, it is refused and filed under its signer, and the attacked hop's page shows
it, attributed to that signer, with its verdict."""

from __future__ import annotations

import json

import httpx
from handoff_context import digest_text, make_status
from sqlalchemy import select

from app.demo.agents import make_cast
from app.store import db
from app.store.models import ElementRow, HopRow
from app.store.tokens import Role, create_token
from tests.browser.conftest import Tab


def test_a_forged_cancel_is_visible_on_the_hop_it_attacks(tab: Tab) -> None:
    engine = db.make_engine(f"sqlite:///{tab.data.db}")
    try:
        with db.transaction(engine) as session:
            token = create_token(session, name="forge", role=Role.INGEST, now=tab.data.now)
            hop, octets = session.execute(
                select(HopRow, ElementRow.octets)
                .join(ElementRow, ElementRow.digest == HopRow.offer)
                .where(HopRow.state == "completed", ElementRow.form == "jws")
                .order_by(HopRow.iat)
                .limit(1)
            ).one()
    finally:
        engine.dispose()
    # The demo run's agents (the data set is the seed-1 run): one that is neither party.
    forger = next(a.signer for a in make_cast(1, 12).agents if a.iss not in (hop.iss, hop.aud))
    # check=False: the library's own guard refuses to sign for the wrong party; a forger's
    # tool would not.
    cancel = make_status(
        forger, offer_octets=octets, state="canceled", iat=tab.data.now - 5, check=False
    )
    line = {
        "received_at": tab.data.now - 4,
        "received_by": hop.aud,
        "payload": {"status": cancel.decode()},
    }
    answer = httpx.post(
        tab.base + "/api/v1/ingest",
        content=(json.dumps(line) + "\n").encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["verdicts"][0]["outcome"] == "reject"
    tab.go(f"/hops/{digest_text(hop.offer)}")
    aimed = tab.page.locator("#aimed")
    assert aimed.is_visible()
    text = aimed.inner_text()
    assert "canceled" in text and "signed by " + forger.iss.rsplit("/", 1)[-1] in text
    assert "reject" in text
    # The hop itself is untouched: still completed.
    assert tab.page.locator(".page-head .badge.st-completed").count() == 1
    tab.shot("hop-forged-cancel")
    assert tab.errors() == []
