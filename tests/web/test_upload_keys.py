"""Upload and paste with your own keys (a trust file, or JWKs and the issuer they speak
for), pasted elements decoded even when they cannot be verified, each check explained, and
verify-only storing nothing."""

from __future__ import annotations

import json
import re
from typing import Any

from handoff_context import Form, Signer, digest_text, handoff_digest, make_offer, trust_document
from sqlalchemy import func, select

from app.store.models import ElementRow, FlagRow, ObservationRow
from tests.web import test_pages
from tests.web.test_pages import Dash

dataset = test_pages.dataset
dash = test_pages.dash
OWN = "spiffe://own.example/agent/visitor-1"
RECEIVER = "spiffe://b.example/agent/helper-9"
UNTRUSTED = '<span class="reason">untrusted-key</span>'


def _offer(dash: Dash, form: Form = Form.JWS) -> tuple[Signer, bytes]:
    signer = Signer.generate(OWN, "Ed25519", kid="visitor-1")
    offer = make_offer(signer, aud=RECEIVER, dialog="ctx-own", iat=dash.data.now - 10, form=form)
    return signer, offer


def _verify(dash: Dash, **form: str) -> Any:
    data = {"csrf": dash.csrf(), "mode": "verify", **form}
    return dash.client.post("/upload", data=data)


def _reasons(html: str) -> list[str]:
    return re.findall(r'<td>(?:<span class="reason">([a-z-]+)</span>)?</td>', html)


def _counts(dash: Dash) -> tuple[int, int, int]:
    engine = dash.client.app.state.service.engine  # type: ignore[attr-defined]
    with engine.connect() as c:
        return tuple(  # type: ignore[return-value]
            c.execute(select(func.count()).select_from(t)).scalar_one()
            for t in (ElementRow, ObservationRow, FlagRow)
        )


def test_a_pasted_offer_verifies_with_my_trust_file_and_stores_nothing(dash: Dash) -> None:
    dash.login("otto")
    signer, offer = _offer(dash)
    before = _counts(dash)
    theirs = _verify(dash, paste=offer.decode())
    assert theirs.status_code == 200
    assert UNTRUSTED in theirs.text  # the service does not know this signer
    mine = _verify(dash, paste=offer.decode(), keys=json.dumps(trust_document([signer])))
    assert mine.status_code == 200
    assert "Checked against your keys (1 issuer" in mine.text
    assert UNTRUSTED not in mine.text
    assert re.search(
        r'<span class="cname">signature</span> <span class="badge res-pass">', mine.text
    )
    assert "nothing stored, no flag opened" in mine.text
    assert _counts(dash) == before


def test_jwks_need_the_issuer_they_speak_for(dash: Dash) -> None:
    dash.login("otto")
    signer, offer = _offer(dash)
    jwks = json.dumps({"keys": trust_document([signer])["issuers"][0]["keys"]})
    refused = _verify(dash, paste=offer.decode(), keys=jwks)
    assert refused.status_code == 422 and "fill in the issuer" in refused.text
    done = _verify(dash, paste=offer.decode(), keys=jwks, issuer=OWN)
    assert done.status_code == 200 and UNTRUSTED not in done.text
    bad = _verify(dash, paste=offer.decode(), keys='{"keys": [{"kty": "OKP"}]}', issuer=OWN)
    assert bad.status_code == 422 and "Your keys cannot be used" in bad.text
    private = dict(trust_document([signer])["issuers"][0]["keys"][0], d="AAAA")
    leak = _verify(dash, paste=offer.decode(), keys=json.dumps(private), issuer=OWN)
    assert leak.status_code == 422


def test_own_keys_never_store(dash: Dash) -> None:
    dash.login("ada")
    signer, offer = _offer(dash)
    before = _counts(dash)
    data = {
        "csrf": dash.csrf(),
        "mode": "store",
        "paste": offer.decode(),
        "keys": json.dumps(trust_document([signer])),
    }
    response = dash.client.post("/upload", data=data)
    assert response.status_code == 422 and "Your own keys verify only" in response.text
    assert _counts(dash) == before


def test_a_pasted_jws_is_decoded_even_when_it_cannot_be_verified(dash: Dash) -> None:
    dash.login("otto")
    _, offer = _offer(dash)
    page = _verify(dash, paste=offer.decode()).text
    assert "Pasted offer (JWS)" in page and "<strong>Decoded</strong>" in page
    assert digest_text(handoff_digest(offer)) in page
    assert "&#34;aud&#34;: &#34;spiffe://b.example/agent/helper-9&#34;" in page
    assert "The issuer&#39;s keys are found in the trust configuration" in page
    # A JWS whose header is not a valid element header still shows what it says.
    _, body, sig = offer.decode().split(".")
    broken = "eyJhbGciOiJub25lIn0." + body + "." + sig  # {"alg":"none"}
    page = _verify(dash, paste=broken).text
    assert "<strong>Not a valid element</strong>" in page
    assert "&#34;alg&#34;: &#34;none&#34;" in page and "ctx-own" in page


def test_a_pasted_cose_element_in_hex_is_decoded(dash: Dash) -> None:
    dash.login("otto")
    _, offer = _offer(dash, Form.COSE)
    page = _verify(dash, paste=offer.hex()).text
    assert "Pasted offer (COSE)" in page and "<strong>Decoded</strong>" in page
    assert digest_text(handoff_digest(offer)) in page
    assert "ctx-own" in page and UNTRUSTED in page
