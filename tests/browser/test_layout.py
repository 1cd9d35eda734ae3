"""Every page on a phone (390x844) and a desktop (1440x900), light and dark: no horizontal
scroll at 390 px (document.scrollingElement.scrollWidth <= innerWidth), Log out within
reach, and every text at WCAG AA contrast against what is drawn behind it
(tests/browser/contrast.js)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import Served, open_tab

CONTRAST = (Path(__file__).parent / "contrast.js").read_text()
FIXED = [
    "/",
    "/flags",
    "/flags?status=any&group=0",
    "/flags?view=urgent",
    "/flags?view=mine",
    "/dialogs",
    "/hops",
    "/hops?state=unresolved",
    "/agents",
    "/trust",
    "/upload",
    "/cases",
    "/search?q=tester",
    "/notifications",
    "/no-such-page",
]


def _pages(tab: Any) -> list[str]:
    """The fixed pages, and one of each kind reached by a link: a dialog (also with every hop
    a search match), a hop, a case and the page of one flag of every kind."""
    found = list(FIXED)
    for listing, prefix in (("/dialogs", "/dialogs/"), ("/hops", "/hops/"), ("/cases", "/cases/")):
        tab.go(listing)
        found.append(tab.page.locator(f"main a[href^='{prefix}']").first.get_attribute("href"))
    # The dialog again with a search that matches every hop (each agent identifier holds
    # "example"): the match rows' own background under muted and alert text.
    found.append(f"{found[len(FIXED)]}?q=example")
    tab.go("/flags?status=any&group=0")
    kinds: dict[str, str] = {}
    for link in tab.page.locator("table.triage td[data-label=Flag] > a").all():
        kind = link.inner_text().split(" ", 1)[1]
        kinds.setdefault(kind, str(link.get_attribute("href")))
    return found + sorted(kinds.values())


@pytest.fixture(scope="module")
def pages(browser: Any, served: Served) -> list[str]:
    tab = open_tab(browser, served)
    try:
        return _pages(tab)
    finally:
        tab.page.context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_fits_a_phone(
    browser: Any, served: Served, pages: list[str], scheme: str
) -> None:
    tab = open_tab(browser, served, viewport={"width": 390, "height": 844}, color_scheme=scheme)
    try:
        wide, unreachable, low = [], [], []
        for path in pages:
            tab.go(path)
            overflow = tab.page.evaluate("document.scrollingElement.scrollWidth - innerWidth")
            if overflow > 0:
                wide.append(f"{path}: {overflow}px")
            box = tab.page.locator("header .who button").bounding_box()
            if box is None or box["x"] < 0 or box["x"] + box["width"] > 390:
                unreachable.append(path)
            low += [f"{path}: {f}" for f in tab.page.evaluate(CONTRAST)]
        tab.go("/flags")
        tab.shot(f"phone-triage-{scheme}")
        assert wide == [], "wider than a phone"
        assert unreachable == [], "Log out is off screen"
        assert low == [], "below WCAG AA"
    finally:
        tab.page.context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_has_aa_contrast_on_a_desktop(
    browser: Any, served: Served, pages: list[str], scheme: str
) -> None:
    tab = open_tab(browser, served, color_scheme=scheme)
    try:
        low: list[str] = []
        for path in pages:
            tab.go(path)
            low += [f"{path}: {f}" for f in tab.page.evaluate(CONTRAST)]
        assert low == [], "below WCAG AA"
    finally:
        tab.page.context.close()
