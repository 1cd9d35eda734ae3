"""A hop 70 levels down stays readable, on a desktop and on a phone: the indent stops
growing below a few levels, and a deep node shows its level and its last ancestors (a
breadcrumb) instead, so a search's match keeps a label wide enough to read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Served, Tab, open_tab, serve_store
from tests.web.big_dialog import DEEP_AGENT, BigDialog, build_big

DEPTH = 70


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> BigDialog:
    return build_big(tmp_path_factory.mktemp("deep"), hops=600, deep=DEPTH)


@pytest.fixture(scope="module")
def served(big: BigDialog) -> Iterator[Served]:
    with serve_store(big.db, big.trust, big.now) as base:
        yield Served(base, big)  # type: ignore[arg-type]


def _find_needle(tab: Tab, big: BigDialog) -> Any:
    tab.go(f"/dialogs/{big.dialog}?q=needle")
    match = tab.page.locator("ul.tree li.match")
    assert match.count() == 1
    return match


@pytest.mark.parametrize(
    "viewport", [{"width": 390, "height": 844}, {"width": 1440, "height": 900}], ids=str
)
def test_the_depth_70_match_is_readable(browser: Any, served: Served, viewport: Any) -> None:
    tab = open_tab(browser, served, viewport=viewport)
    try:
        big: BigDialog = served.data  # type: ignore[assignment]
        match = _find_needle(tab, big)
        level = int(match.locator(":scope > .row .crumbs-deep .lvl").inner_text()[1:])
        assert level > DEPTH  # it really is that deep
        label = match.locator(":scope > .row a.hop")
        assert DEEP_AGENT.rsplit("/", 1)[-1] in label.inner_text()
        box = label.bounding_box()
        assert box is not None and box["width"] >= 200, box
        # The label fits in the page: nothing pushed it out to the right.
        assert box["x"] + box["width"] <= viewport["width"]
        # The breadcrumb names the ancestors above, each a link to its node in the tree.
        crumbs = match.locator(":scope > .row .crumbs-deep a")
        assert crumbs.count() == 4
        target = crumbs.last.get_attribute("href")
        assert target is not None and tab.page.locator(target).count() == 1
        tab.shot(f"dialog-depth-70-{viewport['width']}")
        assert tab.errors() == []
    finally:
        tab.page.context.close()
