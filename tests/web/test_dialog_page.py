"""The dialog page over HTTP: the whole tree, its fragments for htmx with real links behind
them, the no-JavaScript fold and unfold, and the search."""

from __future__ import annotations

import re
from urllib.parse import quote

from handoff_context import digest_text
from sqlalchemy import text

from app.store import db
from tests.web import test_pages
from tests.web.test_pages import Dash

dataset = test_pages.dataset
dash = test_pages.dash
DIALOG = "ctx-000000-cfa93c6f"


def _nodes(html: str) -> list[str]:
    return re.findall(r'<li class="n [^"]*" id="n-([^"]+)">', html)


def test_the_whole_tree_is_on_one_page(dash: Dash) -> None:
    dash.login("rita")
    html = dash.client.get(f"/dialogs/{DIALOG}").text
    assert "Page 1 of" not in html and "broken" not in html
    counts = [int(n) for n in re.findall(r'<span class="below">(\d+) below', html)]
    assert len(_nodes(html)) + sum(counts) == int(re.search(r"(\d+) hops, ", html).group(1))


def test_unfolding_is_a_fragment_with_a_real_link_behind_it(dash: Dash) -> None:
    dash.login("rita")
    # A search that matches nothing opens nothing: the roots are folded.
    html = dash.client.get(f"/dialogs/{DIALOG}?q=zzzz-nobody").text
    folded = re.search(r'data-node="([^"]+)" aria-expanded="false"', html)
    assert folded, "the page has a folded node"
    node = folded.group(1)
    url = f"/dialog-tree?dialog={quote(DIALOG)}&node={node}"
    fragment = dash.client.get(url, headers={"HX-Request": "true"})
    assert fragment.status_code == 200 and "<html" not in fragment.text
    assert fragment.text.lstrip().startswith('<ul class="tree'), fragment.text[:300]
    assert _nodes(fragment.text)
    plain = dash.client.get(url, follow_redirects=False)
    assert plain.status_code == 303 and f"toggle={node}" in plain.headers["location"]
    # Without JavaScript the toggle link opens the node and lands on a deep link.
    toggled = dash.client.get(
        f"/dialogs/{DIALOG}?q=zzzz-nobody&toggle={node}", follow_redirects=False
    )
    assert toggled.status_code == 303
    target = toggled.headers["location"]
    assert "open=" in target and node in target
    opened = dash.client.get(target).text
    assert f'data-node="{node}" aria-expanded="true"' in opened
    missing = dash.client.get(
        f"/dialog-tree?dialog={quote(DIALOG)}&node=nothing", headers={"HX-Request": "true"}
    )
    assert missing.status_code == 404


def test_a_search_highlights_and_says_how_many(dash: Dash) -> None:
    dash.login("rita")
    html = dash.client.get(f"/dialogs/{DIALOG}?q=failed").text
    matches = re.findall(r'<li class="n hs-failed[^"]* match', html)
    found = re.search(r"(\d+) hops match", html)
    assert found and len(matches) == int(found.group(1)) > 0
    none = dash.client.get(f"/dialogs/{DIALOG}?q=zzzz-nobody").text
    assert "No hop matches" in none


def test_elements_refused_in_a_dialog_are_listed_on_its_page(dash: Dash) -> None:
    """A refused offer makes no hop; its dialog's page still lists it, linked to its
    evidence (issue 19: the service shows each refusal under its dialog)."""
    engine = db.make_engine(f"sqlite:///{dash.data.db}")
    try:
        with engine.connect() as conn:
            found = conn.execute(
                text(
                    "SELECT e.dialog, e.digest, v.reason FROM verdict v "
                    "JOIN element e ON e.digest = v.digest "
                    "WHERE v.outcome = 'reject' AND e.dialog IS NOT NULL LIMIT 1"
                )
            ).one()
    finally:
        engine.dispose()
    dialog, digest, reason = found
    dash.login("rita")
    html = dash.client.get(f"/dialogs/{quote(dialog, safe='')}").text
    refused = html.split("Refused in this dialog", 1)[1].split("</section>", 1)[0]
    assert f'href="/hops/{digest_text(digest)}"' in refused
    assert reason in refused
    assert dash.client.get(f"/hops/{digest_text(digest)}").status_code == 200
    # A dialog with nothing refused has no such section.
    quiet = dash.client.get(f"/dialogs/{DIALOG}").text
    assert ("Refused in this dialog" in quiet) == (dialog == DIALOG)
