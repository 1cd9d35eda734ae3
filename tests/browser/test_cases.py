"""The case pages in a real browser: the seed's worked example (triage hands a double-charge
case to billing, epoch 3 -> 4, an acceptance, a handed-off mark, and an hour later a retry
write at epoch 3 that the case system refuses) drawn as an ownership timeline, its envelope
with verified facts apart from claimed ones, the reference outcome, and its flag linked to
the triage queue; and the list of cases. Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

from urllib.parse import quote

from tests.browser.conftest import Tab
from tests.web import case_data


def test_the_worked_example_case_page(tab: Tab) -> None:
    tab.go(f"/cases/{quote(case_data.CASE)}")
    plot = tab.page.locator(".plot")
    plot.locator(".main-svg").first.wait_for()
    # Two epoch bands (3 on triage's row, 4 on billing's), drawn as bars.
    assert plot.locator("g.barlayer g.point").count() == 2
    assert plot.locator("g.barlayer text").all_text_contents() == ["epoch 3", "epoch 4"]
    legend = plot.locator("g.legend text.legendtext").all_text_contents()
    assert "stale or rejected write/act" in legend and "handed-off mark" in legend
    # The stale write: one marker in its own trace, and in the text timeline.
    stale = plot.locator("g.scatterlayer g.trace").nth(
        legend.index("stale or rejected write/act") - 1
    )
    assert stale.locator("path.point").count() == 1
    assert tab.page.locator("ol.timeline li.stale").count() == 1
    # Verified facts and claims in two groups; the unsourced claim marked.
    verified = tab.page.locator(".fact-group.verified")
    claimed = tab.page.locator(".fact-group.claimed")
    assert verified.locator("tbody tr").count() == 2 and claimed.locator("tbody tr").count() == 2
    assert (
        "disputed_amount" in claimed.inner_text() and "disputed_amount" not in verified.inner_text()
    )
    assert claimed.locator("tr.unsourced .badge").inner_text() == "no source"
    assert "not verified" in tab.page.locator("figure.summary figcaption").inner_text()
    assert tab.page.locator("table.refs .badge.ref-verified").inner_text() == "verified"
    # The case's flag opens its page in triage, which links back to the case.
    flag = tab.page.locator("#flags a[href^='/flags/']").first
    assert "unsourced-fact" in flag.inner_text()
    tab.shot("case")
    flag.click()
    tab.page.wait_for_url("**/flags/*")
    assert tab.page.locator(f"a[href='/cases/{case_data.CASE}']").count() >= 1
    assert tab.errors() == [] and tab.dialogs == []


def test_the_case_list_and_the_triage_queue_link_cases(tab: Tab) -> None:
    tab.go("/cases")
    rows = tab.page.locator("table.cases tbody tr")
    assert rows.count() >= 2  # the worked example and the demo run's cases
    assert tab.page.locator(f"table.cases a[href='/cases/{case_data.CASE}']").count() == 1
    tab.shot("cases")
    tab.page.check("input[name=flagged]")
    tab.page.wait_for_url("**/cases?*flagged=1*")
    flagged = tab.page.locator("table.cases tbody tr td .badge.flag")
    assert flagged.count() == tab.page.locator("table.cases tbody tr").count() > 0
    tab.go("/flags?kind=unsourced-fact")
    tab.page.locator(f"table.triage a.case-link[href='/cases/{case_data.CASE}']").click()
    tab.page.wait_for_url(f"**/cases/{case_data.CASE}")
    assert tab.errors() == []
