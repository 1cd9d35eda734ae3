"""The upload page's answer stays bounded whatever was uploaded (one page of verdicts, the
first item errors and the counts), its report pages and filters, and a pasted COSE_Sign1 is
decoded when tagged and answered (never a 500) when its payload holds CBOR shared
references."""

from __future__ import annotations

import re

import cbor2
from handoff_context import Form, Signer, make_offer

from tests.web import test_pages
from tests.web.test_pages import Dash

dataset = test_pages.dataset
dash = test_pages.dash
RECEIVER = "spiffe://b.example/agent/helper-9"


def _verify(dash: Dash, **form: object) -> object:
    data = {"csrf": dash.csrf(), "mode": "verify", **form}
    return dash.client.post("/upload", data=data)


def test_many_tiny_malformed_items_give_one_bounded_page(dash: Dash) -> None:
    dash.login("otto")
    items = 40_000  # one-byte items, each its own malformed line
    capture = b"x\n" * items
    response = dash.client.post(
        "/upload",
        data={"csrf": dash.csrf(), "mode": "verify"},
        files={"file": ("tiny.jsonl", capture, "application/x-ndjson")},
    )
    assert response.status_code == 200
    # 100 verdicts a page and at most 20 item errors, whatever the input: well under 1 MB
    # (docs/operations.md), where every verdict in full was ~100 times that.
    assert len(response.content) < 600_000, len(response.content)
    assert len(re.findall(r'<td class="num">\d+</td>', response.text)) <= 100
    pages = re.search(r"Page 1 of (\d+)", response.text)
    key = re.search(r"/upload\?report=([A-Za-z0-9_-]+)", response.text)
    assert key is not None
    last = dash.client.get(f"/upload?report={key.group(1)}&page=100000")
    assert last.status_code == 200 and len(last.content) < 600_000
    if pages is not None:
        assert f"Page {pages.group(1)} of {pages.group(1)}" in last.text


def _cose_offer(dash: Dash) -> bytes:
    signer = Signer.generate("spiffe://own.example/agent/cose-1", "Ed25519", kid="cose-1")
    return make_offer(signer, aud=RECEIVER, dialog="ctx-cose", iat=dash.data.now, form=Form.COSE)


def test_a_cose_sign1_is_decoded_tagged_or_not(dash: Dash) -> None:
    dash.login("otto")
    tagged = _cose_offer(dash)
    assert tagged[0] == 0xD2  # tag 18, COSE_Sign1
    for octets in (tagged, tagged[1:]):
        page = _verify(dash, paste=octets.hex())
        assert page.status_code == 200  # type: ignore[attr-defined]
        assert "&#34;dialog&#34;: &#34;ctx-cose&#34;" in page.text  # type: ignore[attr-defined]


def test_a_cose_payload_with_shared_references_is_answered(dash: Dash) -> None:
    dash.login("otto")
    sign1 = cbor2.loads(_cose_offer(dash)).value
    # A payload whose map refers to itself (tags 28/29, value sharing).
    shared = bytes.fromhex("d81ca1616bd81d00")  # 28({"k": 29(0)})
    hostile = cbor2.dumps([sign1[0], sign1[1], shared, sign1[3]])
    page = _verify(dash, paste=hostile.hex())
    assert page.status_code == 200, page.text[:400]  # type: ignore[attr-defined]
    assert "<strong>Not a valid element</strong>" in page.text  # type: ignore[attr-defined]
