"""The triage queue over HTTP (no browser): severity first, the "critical and high" view
one click from every page, folded groups and their members, the cursor after an action."""

from __future__ import annotations

import re

from tests.web import test_pages
from tests.web.test_pages import PAGES, Dash

# The dashboard fixtures of test_pages (a logged-out client over a copy of the demo store).
dataset = test_pages.dataset
dash = test_pages.dash


def _kinds(html: str) -> list[str]:
    return re.findall(r'href="/flags/\d+">#\d+ ([a-z-]+)</a>', html)


def _severities(html: str) -> list[str]:
    return re.findall(r'<td data-label="Severity"><span class="badge sev-([a-z]+)">', html)


def test_triage_puts_the_worst_first(dash: Dash) -> None:
    dash.login("rita")
    rank = ["critical", "high", "medium", "low"]
    for path in ("/flags", "/flags?status=any", "/flags?group=0", "/flags?sort=severity-newest"):
        found = _severities(dash.client.get(path).text)
        assert found, path
        assert found == sorted(found, key=rank.index), path
        assert found[0] == "critical"
    assert _kinds(dash.client.get("/flags").text)[0] == "equivocation"


def test_the_urgent_view_is_linked_from_every_page(dash: Dash) -> None:
    dash.login("rita")
    for path in PAGES:
        assert 'href="/flags?view=urgent"' in dash.client.get(path).text, path
    flat = dash.client.get("/flags?view=urgent&group=0").text
    count = len(_severities(flat))
    assert count > 0 and f'<span class="badge count-urgent">{count}</span>' in flat
    html = dash.client.get("/flags?view=urgent").text
    assert "Critical and high, open, newest first" in html
    assert set(_severities(html)) == {"critical", "high"}
    # Newest first within a severity.
    opened = re.findall(r'<td data-label="Opened"><time datetime="([^"]+)"', html)
    highs = [t for t, s in zip(opened, _severities(html), strict=True) if s == "high"]
    assert highs == sorted(highs, reverse=True)


def test_the_overview_lists_flag_kinds_worst_first(dash: Dash) -> None:
    dash.login("rita")
    html = dash.client.get("/").text
    table = html[html.index("Open flags by kind") :]
    found = re.findall(r'<span class="badge sev-([a-z]+)">', table)
    rank = ["critical", "high", "medium", "low"]
    assert found[0] == "critical" and found == sorted(found, key=rank.index)


def test_a_group_unfolds_and_a_bulk_action_reaches_every_member(dash: Dash) -> None:
    dash.login("otto")
    token = dash.csrf()
    html = dash.client.get("/flags?kind=rejected-element&group=0").text
    issuers = re.findall(r'data-id="(\d+)"', html)
    assert len(issuers) >= 2
    # The similar-flags fragment of a one-flag group: just that flag's row when not
    # excluded, and an ungrouped queue of it without htmx.
    first = dash.client.get("/flags?kind=rejected-element").text
    key = re.search(r'name="groups" value="([^"]+)"', first)
    single = re.search(r'name="ids" value="(\d+)"', first)
    assert single, "single flags keep their own checkbox"
    plain = dash.client.get(
        "/flags/similar?kind=rejected-element&issuer=x&variant=stale", follow_redirects=False
    )
    assert plain.status_code == 303 and plain.headers["location"].startswith("/flags?")
    assert "group=0" in plain.headers["location"]
    if key is None:  # this data set has no repeated (kind, issuer, reason): check one id
        form = {"ids": [single.group(1)], "action": "acknowledge", "csrf": token, "at": "3"}
        done = dash.client.post("/flags/bulk", data=form, follow_redirects=False)
        assert done.status_code == 303 and "at=3" in done.headers["location"]
        after = dash.client.get(done.headers["location"]).text
        assert 'data-at="3"' in after


def test_an_unknown_group_key_selects_nothing(dash: Dash) -> None:
    dash.login("otto")
    form = {"groups": ["kind=&issuer="], "action": "acknowledge", "csrf": dash.csrf()}
    response = dash.client.post("/flags/bulk", data=form, follow_redirects=False)
    assert response.status_code == 422


def test_search_finds_case_ids_and_flag_numbers(dash: Dash) -> None:
    dash.login("rita")
    flag = dash.data.equivocation_flag
    for q in (str(flag), f"%23{flag}"):
        jump = dash.client.get(f"/search?q={q}", follow_redirects=False)
        assert jump.status_code == 303 and jump.headers["location"] == f"/flags/{flag}"
    cases = dash.client.get("/search?q=case-0000").text
    assert re.search(r'href="/cases/case-0000[^"]+"', cases)
    none = dash.client.get("/search?q=999999").text
    assert "No case id contains that." in none
