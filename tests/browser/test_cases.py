"""The case pages in a real browser: the seed's worked example (triage hands a double-charge
case to billing, epoch 3 -> 4, an acceptance, a handed-off mark, and an hour later a retry
write at epoch 3 that the case system refuses) drawn as an ownership timeline, its envelope
with verified facts apart from claimed ones, the reference outcome, and its flag linked to
the triage queue; and the list of cases. Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from tests.browser.conftest import Served, Tab, open_tab
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


# Each text of the ownership timeline as drawn: its box, and the plot's.
DRAWN = """plot => {
  const svg = plot.querySelector('.main-svg').getBoundingClientRect();
  const box = t => { const r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left - svg.left, right: svg.right - r.right,
            top: r.top - svg.top, height: r.height, width: r.width}; };
  return {bands: [...plot.querySelectorAll('g.barlayer text')].map(box),
          ticks: [...plot.querySelectorAll('g.xtick text')].map(box)};
}"""


def test_the_epoch_labels_and_dates_of_the_timeline_are_whole(browser: Any, served: Served) -> None:
    """Each epoch band's label is drawn whole, at the page's font size, inside the plot (a
    band of a few seconds has it just after the band), and the date ticks are not cut off
    at the top, at 1440 px and on a phone."""
    for viewport in ({"width": 1440, "height": 900}, {"width": 390, "height": 844}):
        tab = open_tab(browser, served, viewport=viewport)
        try:
            tab.go(f"/cases/{quote(case_data.CASE)}")
            plot = tab.page.locator(".plot").first
            plot.locator(".main-svg g.barlayer text").first.wait_for(state="attached")
            drawn = plot.evaluate(DRAWN)
            assert [b["text"] for b in drawn["bands"]] == ["epoch 3", "epoch 4"]
            # Plotly drops (draws at size 0) the ticks it has no room for; the rest show.
            ticks = [t for t in drawn["ticks"] if t["width"] > 0]
            assert len(ticks) >= 3
            for label in drawn["bands"] + ticks:
                where = f"{label} at {viewport['width']} px"
                assert label["height"] >= 10 and label["width"] > 0, where
                assert min(label["left"], label["right"]) >= 0, where
                # A turned tick's box is its turned em box, a few pixels more than its ink
                # (without automargin the turned dates were cut off at the top on a phone).
                assert label["top"] >= -5, where
            assert tab.errors() == []
        finally:
            tab.page.context.close()


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


# The busiest demo case's page measured 7,626 px tall at 1440x900 before the redesign (the
# ledger squeezed into a side column, every handoff in full): the work first now, earlier
# handoffs one line each, and at most half of that.
CASE_PAGE_BEFORE = 7626

# Every run of letters and digits (a word, a number, a time's parts) of at most 24
# characters whose text wraps onto two lines: broken mid-word. Longer runs (digests, signed
# URLs) have nowhere else to break.
BROKEN_WORDS = """() => {
  const broken = [];
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("svg, .plot, details:not([open]) > :not(summary)")) continue;
    for (const m of node.data.matchAll(/[A-Za-z0-9]{2,24}/g)) {
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
      if (tops.size > 1) broken.push(m[0]);
    }
  }
  return broken;
}"""


def test_the_case_page_puts_the_work_first_and_breaks_no_word(tab: Tab) -> None:
    from sqlalchemy import func, select

    from app.store import db
    from app.store.models import EnvelopeItemRow

    engine = db.make_engine(f"sqlite:///{tab.data.db}")
    try:
        with db.transaction(engine) as session:
            busiest = session.execute(
                select(EnvelopeItemRow.case_id)
                .where(EnvelopeItemRow.case_id.like("case-0%"))
                .group_by(EnvelopeItemRow.case_id)
                .order_by(func.count().desc(), EnvelopeItemRow.case_id)
                .limit(1)
            ).scalar_one()
    finally:
        engine.dispose()
    tab.go(f"/cases/{quote(busiest)}")
    tab.page.locator(".plot .main-svg").first.wait_for()
    height = tab.page.evaluate("document.documentElement.scrollHeight")
    assert height <= CASE_PAGE_BEFORE / 2, height
    assert tab.page.evaluate(BROKEN_WORDS) == []
    # Flags and the ledger come before the timeline and the handoffs.
    flags = tab.page.locator("#flags").bounding_box()
    ledger = tab.page.locator("table.epochs").bounding_box()
    timeline = tab.page.locator(".plot").bounding_box()
    assert flags and ledger and timeline and max(flags["y"], ledger["y"]) < timeline["y"]
    assert ledger["width"] >= 500  # not squeezed into a side column
    # The latest handoff is open, the earlier ones one line each, and open in place.
    handoffs = tab.page.locator("details.envelope")
    assert handoffs.count() > 2 and handoffs.first.get_attribute("open") is not None
    earlier = handoffs.nth(1)
    assert earlier.get_attribute("open") is None
    earlier.locator("summary").click()
    assert earlier.locator(".fact-group.verified").is_visible()
    tab.shot("case-demo")
    assert tab.errors() == []
