"""Every page on a phone (390x844) and a desktop (1440x900), light and dark: no horizontal
scroll at 390 px (document.scrollingElement.scrollWidth <= innerWidth), Log out within
reach, and every text at WCAG AA contrast against what is drawn behind it
(tests/browser/contrast.js).

Each viewport's sweep visits every page once and checks it in both colour schemes (see
``_sweep``); the four tests each judge their part of the two sweeps."""

from __future__ import annotations

from dataclasses import dataclass, field
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


PHONE = {"width": 390, "height": 844}
SCHEMES = ("light", "dark")


@dataclass
class Findings:
    """What a sweep found in one colour scheme: pages wider than the phone, pages whose
    Log out is off screen, and texts below WCAG AA."""

    wide: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    low: list[str] = field(default_factory=list)


def _sweep(browser: Any, served: Served, pages: list[str], *, phone: bool) -> dict[str, Findings]:
    """Visit every page once in one viewport and check it in both colour schemes.

    The stylesheet switches on ``prefers-color-scheme`` alone (no script reads it and
    nothing transitions), so emulating the other scheme on the loaded page draws what a
    visit in that scheme draws; the check that the media query now matches guards that.
    The viewport does need a visit of its own: a phone-sized page folds its filters on load.
    """
    tab = open_tab(browser, served, **({"viewport": PHONE} if phone else {}))
    found = {scheme: Findings() for scheme in SCHEMES}
    try:
        for path in pages:
            tab.go(path)
            for scheme in SCHEMES:
                _scheme(tab, scheme)
                f = found[scheme]
                if phone:
                    overflow = tab.page.evaluate(
                        "document.scrollingElement.scrollWidth - innerWidth"
                    )
                    if overflow > 0:
                        f.wide.append(f"{path}: {overflow}px")
                    box = tab.page.locator("header .who button").bounding_box()
                    if box is None or box["x"] < 0 or box["x"] + box["width"] > PHONE["width"]:
                        f.unreachable.append(path)
                f.low += [f"{path}: {low}" for low in tab.page.evaluate(CONTRAST)]
        if phone:
            tab.go("/flags")
            for scheme in SCHEMES:
                _scheme(tab, scheme)
                tab.shot(f"phone-triage-{scheme}")
        return found
    finally:
        tab.page.context.close()


def _scheme(tab: Any, scheme: str) -> None:
    tab.page.emulate_media(color_scheme=scheme)
    query = f"matchMedia('(prefers-color-scheme: {scheme})').matches"
    assert tab.page.evaluate(query), f"the page does not see the {scheme} scheme"


@pytest.fixture(scope="module")
def phone(browser: Any, served: Served, pages: list[str]) -> dict[str, Findings]:
    return _sweep(browser, served, pages, phone=True)


@pytest.fixture(scope="module")
def desktop(browser: Any, served: Served, pages: list[str]) -> dict[str, Findings]:
    return _sweep(browser, served, pages, phone=False)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_page_fits_a_phone(phone: dict[str, Findings], scheme: str) -> None:
    assert phone[scheme].wide == [], "wider than a phone"
    assert phone[scheme].unreachable == [], "Log out is off screen"
    assert phone[scheme].low == [], "below WCAG AA"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_page_has_aa_contrast_on_a_desktop(desktop: dict[str, Findings], scheme: str) -> None:
    assert desktop[scheme].low == [], "below WCAG AA"
