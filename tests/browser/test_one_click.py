"""Triage in one click and by keyboard, in a real browser: each row's Ack / Resolve / Snooze /
Me and the flag page's buttons act at once and the audit log names every value (who, to whom,
until when, why); every action has a key on both pages, ``?`` lists them, a selection made
with ``x`` is acted on rather than thrown away; and on a phone the first row of the queue is
above the fold."""

from __future__ import annotations

import re

from tests.browser.conftest import Tab, open_tab


def _row(tab: Tab, flag: str) -> object:
    return tab.page.locator(f"table.triage tr.row[data-id='{flag}']")


def _audit(tab: Tab, flag: str) -> str:
    tab.go(f"/flags/{flag}")
    return str(tab.page.inner_text("ol.audit"))


def test_one_click_row_actions_and_their_audit_entries(tab: Tab) -> None:
    tab.go("/flags?group=0&sort=oldest")
    ids = [r.get_attribute("data-id") for r in tab.page.locator("table.triage tr.row").all()]
    acked, mine, snoozed, resolved = ids[:4]
    _row(tab, acked).locator("button:text-is('Ack')").click()
    tab.page.wait_for_selector("[role=status]")
    assert f"#{acked} acknowledged" in tab.page.inner_text("[role=status]")
    # Acknowledged is still open until resolved ("All open" keeps it, as OnCall and
    # PagerDuty do), with its badge and no Ack button any more.
    assert _row(tab, acked).locator("td[data-label=Status]").inner_text() == "acknowledged"
    assert _row(tab, acked).locator("button:text-is('Ack')").count() == 0
    _row(tab, mine).locator("button:text-is('Me')").click()
    tab.page.wait_for_selector("[role=status]")
    assert f"#{mine} assigned to otto" in tab.page.inner_text("[role=status]")
    assert "otto" in _row(tab, mine).locator("td[data-label=Assignee]").inner_text()
    _row(tab, snoozed).locator("summary:text-is('Snooze')").click()
    _row(tab, snoozed).locator("button:text-is('4 hours')").click()
    tab.page.wait_for_selector("[role=status]")
    assert re.search(rf"#{snoozed} snoozed until \d{{4}}-", tab.page.inner_text("[role=status]"))
    menu = _row(tab, resolved).locator("details.q-resolve")
    menu.locator("summary").click()
    menu.locator("textarea[name=note]").fill("keys rotated; the planner re-signed")
    menu.locator("button[type=submit]").click()
    tab.page.wait_for_selector("[role=status]")
    assert f"#{resolved} resolved" in tab.page.inner_text("[role=status]")
    # The audit log of each says who did what, with every value.
    assert re.search(r"user:otto\s+acknowledge", _audit(tab, acked))
    assert re.search(r"user:otto\s+assign to otto", _audit(tab, mine))
    assert re.search(r"user:otto\s+snooze until \d{4}-\d\d-\d\d \d\d:\d\d", _audit(tab, snoozed))
    log = _audit(tab, resolved)
    assert "resolve" in log and "keys rotated; the planner re-signed" in log
    # The acknowledged one has a view of its own.
    tab.go("/flags?view=acknowledged")
    assert _row(tab, acked).count() == 1
    assert tab.errors() == []


def test_the_flag_page_acts_in_one_click_and_assigns_from_the_known_accounts(tab: Tab) -> None:
    flag = str(tab.data.equivocation_flag)
    tab.go(f"/flags/{flag}")
    options = tab.page.locator("#act-assign select[name=assignee] option").all_text_contents()
    assert "ada" in options and "otto (me)" in options and "nobody (unassign)" in options
    tab.page.click("#act-panel details.more summary")
    tab.page.select_option("#act-assign select[name=assignee]", "ada")
    tab.page.click("#act-assign button[type=submit]")
    tab.page.wait_for_selector("[role=status]")
    assert "assigned to ada" in tab.page.inner_text("[role=status]")
    tab.page.click("#act-ack button")
    tab.page.wait_for_selector("[role=status]")
    assert "acknowledged" in tab.page.inner_text(".page-head")
    tab.page.click("#act-snooze button:text-is('1 hour')")
    tab.page.wait_for_selector("[role=status]")
    audit = tab.page.inner_text("ol.audit")
    assert re.search(r"user:otto\s+assign to ada", audit)
    assert re.search(r"user:otto\s+snooze until \d{4}-", audit)
    assert re.search(r"user:otto\s+acknowledge", audit)
    assert tab.errors() == []


def test_keys_on_the_queue_act_on_the_cursor_or_on_the_selection(tab: Tab) -> None:
    tab.go("/flags?group=0&sort=newest")
    ids = [r.get_attribute("data-id") for r in tab.page.locator("table.triage tr.row").all()]
    keys = tab.page.keyboard
    # ? lists every key of the page, Esc closes the list.
    keys.press("?")
    help_list = tab.page.locator("dialog#keys-help")
    assert help_list.is_visible()
    listed = help_list.inner_text()
    for words in ("acknowledge", "resolve", "snooze", "assign to me", "assign to…", "apply"):
        assert words in listed
    keys.press("Escape")
    assert not help_list.is_visible()
    # m: assign the current row to me.
    keys.press("j")
    assert tab.page.locator("tr.row.current").get_attribute("data-id") == ids[0]
    keys.press("m")
    tab.page.wait_for_selector("[role=status]")
    assert f"#{ids[0]} assigned to otto" in tab.page.inner_text("[role=status]")
    # s then 2: snooze the current row for 4 hours (the cursor came back to its place).
    tab.page.locator("tr.row.current").wait_for()
    assert tab.page.locator("tr.row.current").get_attribute("data-id") == ids[0]
    keys.press("s")
    keys.press("2")
    tab.page.wait_for_selector("[role=status]")
    assert f"#{ids[0]} snoozed until" in tab.page.inner_text("[role=status]")
    # r: the note, then Enter resolves with it... Ctrl+Enter from the note field.
    tab.page.locator("tr.row.current").wait_for()
    current = tab.page.locator("tr.row.current").get_attribute("data-id")
    keys.press("r")
    keys.type("duplicate of an older flag")
    keys.press("Control+Enter")
    tab.page.wait_for_selector("[role=status]")
    assert f"#{current} resolved" in tab.page.inner_text("[role=status]")
    # x on two rows, then a: both are acknowledged, the selection is not thrown away.
    tab.page.locator("tr.row.current").wait_for()
    ticked = []
    for step in ("x", "j", "x"):
        ticked.append(tab.page.locator("tr.row.current").get_attribute("data-id"))
        keys.press(step)
    keys.press("a")
    tab.page.wait_for_selector("[role=status]")
    assert "2 flags acknowledged" in tab.page.inner_text("[role=status]")
    assert ticked[1] != ticked[2]
    for acked in ticked[1:]:
        assert _row(tab, acked).locator("td[data-label=Status]").inner_text() == "acknowledged"
    chosen = tab.page.locator("tr.row.current").get_attribute("data-id")
    # g: the picker of the bulk form; e applies the form as filled.
    keys.press("x")
    keys.press("g")
    assert tab.page.evaluate("document.activeElement.name") == "assignee"
    tab.page.select_option("#bulk select[name=assignee]", "ada")
    tab.page.locator("table.triage").click(position={"x": 2, "y": 2})
    keys.press("e")
    tab.page.wait_for_selector("[role=status]")
    assert f"#{chosen} assigned to ada" in tab.page.inner_text("[role=status]")
    # Esc leaves the search field.
    keys.press("/")
    assert tab.page.evaluate("document.activeElement.name") == "q"
    keys.press("Escape")
    assert tab.page.evaluate("document.activeElement.name") != "q"
    assert tab.errors() == []


def test_keys_on_the_flag_page(tab: Tab) -> None:
    tab.go("/flags?group=0&sort=oldest")
    flag = tab.page.locator("table.triage tr.row").nth(5).get_attribute("data-id")
    tab.go(f"/flags/{flag}")
    keys = tab.page.keyboard
    keys.press("?")
    listed = tab.page.inner_text("dialog#keys-help")
    for words in ("acknowledge", "resolve", "snooze", "assign to me", "assign to…", "comment"):
        assert words in listed
    keys.press("Escape")
    keys.press("a")
    tab.page.wait_for_selector("[role=status]")
    assert f"#{flag} acknowledged" in tab.page.inner_text("[role=status]")
    keys.press("m")
    tab.page.wait_for_selector(f"[role=status]:has-text('#{flag} assigned to otto')")
    keys.press("s")
    keys.press("3")
    tab.page.wait_for_selector(f"[role=status]:has-text('#{flag} snoozed until')")
    keys.press("g")
    assert tab.page.evaluate("document.activeElement.name") == "assignee"
    keys.press("Escape")
    keys.press("c")
    assert tab.page.evaluate("document.activeElement.name") == "body"
    keys.press("Escape")
    keys.press("r")
    keys.type("the planner re-signed on retry")
    keys.press("Control+Enter")
    tab.page.wait_for_selector(f"[role=status]:has-text('#{flag} resolved')")
    audit = tab.page.inner_text("ol.audit")
    for entry in ("acknowledge", "assign to otto", "snooze until", "resolve"):
        assert entry in audit
    keys.press("u")
    tab.page.wait_for_url("**/flags")
    assert tab.errors() == []


def test_on_a_phone_the_first_row_is_above_the_fold(browser: object, served: object) -> None:
    tab = open_tab(browser, served, viewport={"width": 390, "height": 844})  # type: ignore[arg-type]
    try:
        tab.go("/flags")
        first = tab.page.locator("table.triage tr.row").first.bounding_box()
        assert first is not None and first["y"] + 80 < 844  # its title and severity show
        # Compact cards: the first three whole on the screen, none over 170 px tall (each
        # was ~230 px, one labelled line per cell: the queue of 16 rows ran 3,966 px).
        boxes = [r.bounding_box() for r in tab.page.locator("table.triage tr.row").all()]
        assert len(boxes) >= 10
        tallest = max(b["height"] for b in boxes if b)
        assert tallest <= 170, f"a card is {tallest} px tall"
        third = boxes[2]
        assert third is not None and third["y"] + third["height"] <= 844
        width = tab.page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390
        # The flag page: the Act panel comes first.
        tab.go(f"/flags/{tab.data.equivocation_flag}")
        act = tab.page.locator("#act-panel").bounding_box()
        assert act is not None and act["y"] < 844
        tab.shot("phone-triage-flag")
        assert tab.errors() == []
    finally:
        tab.page.context.close()
