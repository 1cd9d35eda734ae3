"""A 20,000-hop dialog in a real browser: the whole tree opens, a search finds a hop 60
levels down and opens its path, and folding and unfolding work (unfolding loads the
children as a fragment, and the URL keeps what is open)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Served, Tab, open_tab, serve_store
from tests.web.big_dialog import DEEP, DEEP_AGENT, BigDialog, build_big


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> BigDialog:
    return build_big(tmp_path_factory.mktemp("big"), hops=20_000)


@pytest.fixture(scope="module")
def served(big: BigDialog) -> Iterator[Served]:
    with serve_store(big.db, big.trust, big.now) as base:
        yield Served(base, big)  # type: ignore[arg-type]


@pytest.fixture
def tab(browser: Any, served: Served) -> Iterator[Tab]:
    tab = open_tab(browser, served)
    try:
        yield tab
    finally:
        tab.page.context.close()


def test_a_20000_hop_dialog_opens_whole(tab: Tab, big: BigDialog) -> None:
    tab.go(f"/dialogs/{big.dialog}")
    assert "20000 hops" in tab.page.inner_text(".page-head")
    items = tab.page.locator("ul.tree li.n")
    assert 0 < items.count() < 2000  # drawn: what is open; the rest folded with counts
    counts = tab.page.locator("ul.tree .below").all_inner_texts()
    folded = sum(int(text.split(" ", 1)[0]) for text in counts)
    assert folded + items.count() >= big.hops  # every hop is drawn or counted below one
    assert "Page" not in tab.page.inner_text("main")  # no pagination
    tab.page.wait_for_selector(".plot .main-svg")
    assert tab.errors() == []


def test_search_finds_a_deep_hop_and_opens_its_path(tab: Tab, big: BigDialog) -> None:
    tab.go(f"/dialogs/{big.dialog}")
    tab.page.fill(".tree-search input[name=q]", "needle")
    tab.page.click(".tree-search button")
    tab.page.wait_for_load_state("networkidle")
    match = tab.page.locator("ul.tree li.match")
    assert match.count() == 1
    assert DEEP_AGENT.rsplit("/", 1)[-1] in match.inner_text()
    assert match.is_visible()
    # Its whole path is open: every ancestor's toggle says so.
    ancestors = match.locator("xpath=ancestor::li[contains(@class, 'n')]")
    assert ancestors.count() >= DEEP - 1
    for i in range(ancestors.count()):
        toggle = ancestors.nth(i).locator(":scope > .row a.tog")
        assert toggle.get_attribute("aria-expanded") == "true"
    assert "1 hop matches" in tab.page.inner_text("p.found")
    tab.shot("dialog-20000-search")
    assert tab.errors() == []


def test_fold_and_unfold(tab: Tab, big: BigDialog) -> None:
    tab.go(f"/dialogs/{big.dialog}")
    first = tab.page.locator("ul.tree li.n:has(> .row a.tog[aria-expanded=false])").first
    node = first.locator(":scope > .row a.tog").get_attribute("data-node")
    closed = tab.page.locator(f"#n-{node}")
    below = int(closed.locator(":scope > .row .below").inner_text().split(" ", 1)[0])
    closed.locator(":scope > .row a.tog").click()
    children = closed.locator(":scope > ul > li.n")
    children.first.wait_for()
    assert 0 < children.count() <= below
    assert (
        f"open={node}" in tab.page.url or f"%2C{node}" in tab.page.url or f",{node}" in tab.page.url
    )
    # Fold it again: the children are hidden, and the URL forgets it.
    closed.locator(":scope > .row a.tog").click()
    assert not children.first.is_visible()
    assert node not in tab.page.url
    # A deep link restores the open node.
    tab.go(f"/dialogs/{big.dialog}?open={node}")
    again = tab.page.locator(f"#n-{node}")
    assert again.locator(":scope > .row a.tog").get_attribute("aria-expanded") == "true"
    assert again.locator(":scope > ul > li.n").count() == children.count()
    assert tab.errors() == []
