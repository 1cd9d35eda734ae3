"""Every flag kind's page shows its proof, in a real browser, over a larger demo run (24
dialogs: every signed-handoff kind and most case kinds, two-owners and status-conflict
among them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Served, Tab, open_tab, serve_store
from tests.web.dashboard_data import build

CASE_KINDS = {
    "two-owners", "release-before-accept", "lost-acceptance", "no-owner", "stale-epoch",
    "expired-reference", "reference-mismatch", "missing-hash", "version-drift",
    "invalid-envelope", "context-id-reuse", "transcript-dump", "unsourced-fact",
}  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data = build(tmp_path_factory.mktemp("proof"), dialogs=24)
    with serve_store(data.db, data.trust, data.now) as base:
        yield Served(base, data)


def _one_of_each_kind(tab: Tab) -> dict[str, str]:
    tab.go("/flags?status=any&group=0")
    kinds: dict[str, str] = {}
    for link in tab.page.locator("table.triage td[data-label=Flag] > a").all():
        kinds.setdefault(link.inner_text().split(" ", 1)[1], str(link.get_attribute("href")))
    return kinds


def _check(tab: Tab, kind: str) -> None:
    page = tab.page
    text = page.inner_text("main")
    if kind == "equivocation":
        assert "Two signed offers for one hop" in text
        assert page.locator("table.compare tr.differs").count() >= 1
        # Who received which offer, and when: a row per receipt, both offers among them.
        labels = page.locator("table.receipts tbody td .badge").all_inner_texts()
        assert {"A", "B"} <= set(labels)
    elif kind == "status-conflict":
        assert "Two statuses that contradict each other" in text
        assert page.locator("table.compare tr.differs").count() >= 1
    elif kind == "cancel-not-propagated":
        assert "Downstream offers and when they were canceled" in text
        assert "grace deadline" in text
        rows = page.locator("table.downstream tbody tr")
        assert rows.count() >= 1
        verdicts = rows.locator("td:nth-child(6)").all_inner_texts()
        assert all(v in ("not canceled", "in time") or v.endswith("late") for v in verdicts)
        assert any(v != "in time" for v in verdicts)
    elif kind == "lost-outcome":
        assert "missing: completed or failed" in text
    elif kind in CASE_KINDS:
        assert "What the case flag rests on" in text
        assert "No stored element for this flag" not in text
        assert page.locator(".case-proof table").first.locator("tbody tr").count() >= 1
        assert page.locator("table.epochs").count() == 1
    else:
        assert "Evidence" in text and page.locator("details.evidence").count() >= 1
    if kind not in CASE_KINDS:
        # Times are readable, with the raw NumericDate beside them.
        stamp = page.locator("main time + .raw").first
        assert stamp.inner_text().isdigit()


def test_each_flag_kinds_page_shows_its_proof(browser: Any, served: Served) -> None:
    tab = open_tab(browser, served)
    try:
        kinds = _one_of_each_kind(tab)
        assert {"equivocation", "status-conflict", "cancel-not-propagated", "two-owners"} <= set(
            kinds
        )
        for kind, href in sorted(kinds.items()):
            tab.go(href)
            try:
                _check(tab, kind)
            except AssertionError as exc:
                raise AssertionError(f"{kind} ({href}): {exc}") from exc
            if kind in ("two-owners", "status-conflict", "cancel-not-propagated"):
                tab.shot(f"proof-{kind}")
        assert tab.errors() == []
    finally:
        tab.page.context.close()
