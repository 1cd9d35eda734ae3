"""Triage in a real browser: the worst flag first, one click from any page to the critical
and high view, and the keyboard cursor kept after an acknowledge."""

from __future__ import annotations

from tests.browser.conftest import Tab


def test_triage_puts_a_critical_flag_first(tab: Tab) -> None:
    tab.go("/dialogs")
    tab.page.click("header nav a[href='/flags?view=urgent']")
    tab.page.wait_for_selector("table.triage tr.row")
    first = tab.page.locator("table.triage tr.row").first
    assert first.locator(".badge.sev-critical").count() == 1
    assert "equivocation" in first.inner_text()
    tab.go("/flags")
    first = tab.page.locator("table.triage tr.row").first
    assert first.locator(".badge.sev-critical").count() == 1
    tab.shot("triage-severity-first")
    assert tab.errors() == []


def test_the_cursor_stays_in_place_after_acknowledging(tab: Tab) -> None:
    tab.go("/flags?sort=oldest")
    before = tab.page.locator("table.triage tr.row").all()
    third = before[2].get_attribute("data-id")
    fourth = before[3].get_attribute("data-id")
    for _ in range(3):
        tab.page.keyboard.press("j")
    current = tab.page.locator("table.triage tr.row.current")
    assert current.get_attribute("data-id") == third
    tab.page.keyboard.press("a")
    tab.page.wait_for_selector("[role=status]")
    # The acknowledged flag stays in "All open" (still open until resolved), marked; the
    # cursor has moved on to the next row, so the next key acts on the next flag.
    tab.page.wait_for_selector("table.triage tr.row.current")
    assert tab.page.locator("table.triage tr.row.current").get_attribute("data-id") == fourth
    acked = tab.page.locator(f"table.triage tr.row[data-id='{third}'] td[data-label=Status]")
    assert acked.inner_text() == "acknowledged"
    # In "Critical and high" an acknowledged flag leaves; the next row takes its place.
    tab.go("/flags?view=urgent")
    urgent = [r.get_attribute("data-id") for r in tab.page.locator("table.triage tr.row").all()]
    tab.page.keyboard.press("j")
    tab.page.keyboard.press("a")
    tab.page.wait_for_selector("[role=status]")
    tab.page.wait_for_selector("table.triage tr.row.current")
    assert tab.page.locator("table.triage tr.row.current").get_attribute("data-id") == urgent[1]
    assert tab.errors() == []
