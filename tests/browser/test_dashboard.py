"""The dashboard in a real browser: login, upload and report, a dialog's tree and timeline,
acknowledging an equivocation, hostile identifiers, the CSP, and a screenshot of each page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.browser.conftest import Served, Tab, open_tab
from tests.web.dashboard_data import HOSTILE_AGENT, HOSTILE_DIALOG


def test_login_leads_to_the_overview_with_its_chart(browser: Any, served: Served) -> None:
    tab = open_tab(browser, served, user=None)
    try:
        tab.go("/flags")
        assert tab.page.url.startswith(served.base + "/login?next=/flags")
        tab.page.fill("input[name=username]", "otto")
        tab.page.fill("input[name=password]", "not the password at all")
        tab.page.click("button[type=submit]")
        assert "Wrong user name or password." in tab.page.inner_text("[role=alert]")
        tab.console.clear()  # the browser logs the 401 of the refused login itself
        tab.page.fill("input[name=password]", "a long enough password")
        tab.page.click("button[type=submit]")
        tab.page.wait_for_url(served.base + "/flags")
        tab.go("/")
        tab.page.wait_for_selector(".plot .main-svg")
        assert tab.page.locator(".kpi").count() == 5
        assert tab.errors() == [] and tab.dialogs == []
    finally:
        tab.page.context.close()


def test_upload_a_capture_and_read_the_report(tab: Tab) -> None:
    tab.go("/upload")
    tab.page.set_input_files("input[type=file]", str(tab.data.capture))
    tab.page.click("#upload button[type=submit]")
    tab.page.wait_for_selector("#report table.report tbody tr")
    rows = tab.page.locator("#report table.report tbody tr")
    assert rows.count() > 10
    outcomes = tab.page.locator("#report table.report td .badge").all_inner_texts()
    assert "accept" in outcomes and "reject" in outcomes
    assert "verified only" in tab.page.inner_text("#report h2")
    tab.shot("upload-report")
    with tab.page.expect_download() as download:
        tab.page.click("text=Download report JSON")
    report = json.loads(Path(download.value.path()).read_bytes())
    # The page shows the first 100 verdicts and says how many there are in all.
    total = report["counts"]["verdicts"]
    assert rows.count() == min(total, 100)
    assert f"{total} verdicts" in tab.page.inner_text("#report")
    assert tab.errors() == []


def test_a_dialog_shows_its_tree_and_timeline(tab: Tab) -> None:
    tab.go(f"/flags/{tab.data.equivocation_flag}")
    tab.page.click(".card dl.facts a[href^='/dialogs/']")
    tab.page.wait_for_selector("ul.tree li.n")
    tab.page.wait_for_selector(".plot .main-svg g.barlayer path")
    assert tab.page.locator("ul.tree li.n").count() >= 2
    assert tab.page.locator("ul.tree li.n.equivocation").count() >= 1
    tab.shot("dialog")
    tab.page.locator("ul.tree li.n.equivocation > .row a.hop").first.click()
    tab.page.wait_for_url(re.compile(r".*/hops/[A-Za-z0-9_-]{43}$"))
    tab.page.wait_for_selector("ol.checks li")
    checks = tab.page.locator("ol.checks").first.locator("li .cname")
    assert checks.all_inner_texts()[:3] == ["signature", "audience", "freshness"]
    tab.shot("hop")
    assert tab.errors() == []


# The row labels of a dialog's timeline as drawn, top to bottom on the screen, and the top
# of its legend.
DRAWN_ROWS = """plot => {
  const rows = [...plot.querySelectorAll('.main-svg g.ytick text')]
    .map(t => [t.getBoundingClientRect(), t.textContent])
    .filter(pair => pair[0].height > 0).sort((a, b) => a[0].top - b[0].top);
  const legend = plot.querySelector('g.legend').getBoundingClientRect();
  return {labels: rows.map(pair => pair[1]), bottom: Math.max(...rows.map(p => p[0].bottom)),
          legend: legend.top};
}"""


def _drawn_numbers(tab: Tab, link: str) -> tuple[list[int], dict[str, Any]]:
    tab.go(link)
    tab.page.wait_for_selector(".plot .main-svg g.barlayer path")
    drawn = tab.page.locator(".plot").last.evaluate(DRAWN_ROWS)
    return [int(label.split(".", 1)[0]) for label in drawn["labels"]], drawn


def test_every_dialog_timeline_numbers_its_rows_top_down(
    tab: Tab, browser: Any, served: Served
) -> None:
    """Rows are numbered in the tree's order and drawn in that order, whatever their
    states: Plotly would otherwise stack them by the first trace (state) naming each row.
    On a phone every row keeps its label and the legend sits under the rows."""
    tab.go("/dialogs")
    links = tab.page.locator("main table a[href^='/dialogs/']").evaluate_all(
        "links => links.map(a => a.getAttribute('href'))"
    )
    assert len(links) >= 5
    mixed = 0
    seen: list[tuple[str, int]] = []  # (dialog, rows drawn at 1440 px)
    for link in links:
        if mixed == 3:
            break
        numbers, _ = _drawn_numbers(tab, link)
        assert numbers == list(range(1, len(numbers) + 1)), link
        seen.append((link, len(numbers)))
        states = tab.page.locator("ul.tree li.n > .row .badge[class*='st-']").all_inner_texts()
        mixed += len(set(states)) > 1
    assert mixed == 3  # dialogs that mix states (a failed hop before completed ones)
    assert tab.errors() == []
    link, hops = max(seen, key=lambda s: s[1])
    phone = open_tab(browser, served, viewport={"width": 390, "height": 844})
    try:
        numbers, drawn = _drawn_numbers(phone, link)
        assert numbers == list(range(1, hops + 1))
        assert drawn["legend"] >= drawn["bottom"]
        assert phone.errors() == []
    finally:
        phone.page.context.close()


def test_acknowledge_an_equivocation_with_a_note(tab: Tab) -> None:
    tab.go("/flags?kind=equivocation")
    tab.shot("triage")
    tab.page.click(f"a[href='/flags/{tab.data.equivocation_flag}']")
    tab.page.wait_for_selector("table.compare")
    assert tab.page.locator("table.compare tr").count() > 5
    tab.shot("flag-equivocation")
    tab.page.click("#act-panel details.more summary")
    note = "both offers came from the retry path; paged ops"
    tab.page.fill("#act-note textarea[name=note]", note)
    tab.page.click("#act-note button[type=submit]")
    tab.page.wait_for_selector("[role=status]")
    tab.page.click("#act-ack button")
    tab.page.wait_for_selector("[role=status]")
    audit = tab.page.inner_text("ol.audit")
    assert "user:otto" in audit and "acknowledge" in audit
    assert "both offers came from the retry path; paged ops" in audit
    assert "acknowledged" in tab.page.inner_text(".page-head")
    assert tab.errors() == []


def test_keyboard_shortcuts_move_and_acknowledge(tab: Tab) -> None:
    tab.go("/flags?kind=rejected-element")
    first = tab.page.locator("table.triage tr.row").first.get_attribute("data-href")
    tab.page.keyboard.press("j")
    assert tab.page.locator("table.triage tr.row.current").count() == 1
    tab.page.keyboard.press("a")
    tab.page.wait_for_selector("[role=status]")
    assert "acknowledged" in tab.page.inner_text("[role=status]")
    tab.go(str(first))
    assert "user:otto" in tab.page.inner_text("ol.audit")


def test_hostile_identifiers_render_as_text_and_run_nothing(tab: Tab) -> None:
    response = tab.go("/flags?status=any")
    assert HOSTILE_AGENT[:30] in tab.page.inner_text("main")  # shown (cut) as text
    tab.go("/search?q=" + HOSTILE_DIALOG)
    tab.page.click("main a[href^='/hops/']")
    tab.page.wait_for_selector("h1.ident")
    text = tab.page.inner_text("main")
    assert HOSTILE_DIALOG in text  # shown as text, not parsed as markup
    assert "U+202E" in text  # the bidi override in a status detail is made visible
    assert tab.page.locator("main img, main script, main svg[onload]").count() == 0
    tab.go("/dialogs/" + HOSTILE_DIALOG)
    tab.page.wait_for_selector("ul.tree li.n.untrusted")
    tab.go("/agents")
    tab.shot("agents")
    assert tab.dialogs == [], "a hostile identifier ran script"
    assert tab.errors() == []
    assert response is not None


def test_every_page_has_the_csp_and_fits_the_window(tab: Tab) -> None:
    pages = {
        "overview": "/",
        "triage-all": "/flags?status=any",
        "dialogs": "/dialogs",
        "hops": "/hops",
        "unresolved": "/hops?state=unresolved",
        "upload": "/upload",
        "trust": "/trust",
        "search": "/search?q=tester",
    }
    for name, path in pages.items():
        response = tab.go(path)
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe" not in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        overflow = tab.page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{path} is wider than the window by {overflow}px"
        tab.shot(name)
    assert tab.errors() == [] and tab.dialogs == []


def test_the_dark_theme_follows_the_system(browser: Any, served: Served) -> None:
    tab = open_tab(browser, served, color_scheme="dark")
    try:
        tab.go("/")
        tab.page.wait_for_selector(".plot .main-svg")
        background = tab.page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(13, 17, 23)"
        tab.shot("overview-dark")
        assert tab.errors() == []
    finally:
        tab.page.context.close()
