"""The dialog page's pictures stay light for a dialog of 2,000 hops: the whole chain tree is
one tree, drawn where it is open (flagged paths and search matches), folded with counts
elsewhere; the timeline draws each hop of a small dialog and counts a large one per bucket."""

from __future__ import annotations

import hashlib
import json

from app.store.dashboard import Activity
from app.store.models import ElementRow, HopRow
from app.store.queries import HopListing, TreeNode
from app.web import charts
from app.web import tree as tree_view

T = 1_793_000_000


def _digest(n: int) -> bytes:
    return hashlib.sha256(str(n).encode()).digest()


def _node(
    n: int, parent: int | None, *, state: str = "completed", flags: tuple[str, ...] = ()
) -> TreeNode:
    hop = HopRow(
        iss=f"spiffe://x.example/agent/a{n % 7}",
        hop=f"hop-{n:06d}-aaaaaaaaaaaaaaaa",
        offer=_digest(n),
        aud=f"spiffe://x.example/agent/a{(n + 1) % 7}",
        dialog="ctx-big",
        task=None,
        iat=T + n,
        exp=T + n + 120,
        state=state,
        a2a_state=None,
        derived_at=T,
    )
    return TreeNode(HopListing(hop, flags), None if parent is None else _digest(parent))


def _big_dialog(size: int = 2000) -> list[TreeNode]:
    # A root fanning out to 10 planners, each with a deep chain of workers below.
    nodes = [_node(0, None)]
    for n in range(1, size):
        parent = 0 if n <= 10 else n - 10
        nodes.append(_node(n, parent, flags=("equivocation",) if n == 1234 else ()))
    return nodes


def test_a_dialog_of_2000_hops_is_one_tree_with_its_flags_open() -> None:
    nodes = _big_dialog()
    tree = tree_view.build(nodes)
    opened = tree_view.default_open(tree)
    rows = tree_view.draw(tree, opened)
    # How long this takes is measured in bench/dialog_render.py, not asserted here.
    assert tree.size[tree.roots[0]] == 2000 and tree.max_depth == 200
    drawn = [r.node for r in rows if r.kind == "item"]
    assert 0 < len(drawn) <= tree_view.HOT_ROWS + tree_view.FIRST_ROWS
    # The flagged hop, 124 levels down, is drawn: its whole path is open.
    flagged = next(i for i, n in enumerate(tree.nodes) if n.hop.flags)
    assert flagged in drawn
    # Every hop is drawn or counted under a folded one.
    folded = sum(tree.size[r.node] - 1 for r in rows if r.kind == "item" and not r.expanded)
    assert len(drawn) + folded == 2000
    # Opening and closing tags balance.
    assert sum(r.kind == "open" for r in rows) == sum(r.kind == "close" for r in rows)


def test_a_search_opens_the_paths_to_its_matches() -> None:
    nodes = _big_dialog()
    tree = tree_view.build(nodes)
    hits = tree_view.matches(tree, "hop-001999")
    assert [tree.nodes[i].hop.hop.hop for i in hits] == ["hop-001999-aaaaaaaaaaaaaaaa"]
    rows = tree_view.draw(tree, tree_view.paths_to(tree, hits))
    assert hits[0] in {r.node for r in rows if r.kind == "item"}
    assert tree_view.matches(tree, "equivocation") == [1234]
    assert len(tree_view.matches(tree, "completed")) == 2000


def test_a_wide_fan_is_drawn_in_parts() -> None:
    nodes = [_node(0, None)] + [_node(n, 0) for n in range(1, 501)]
    tree = tree_view.build(nodes)
    rows = tree_view.draw(tree, {0})
    more = [r for r in rows if r.kind == "more"]
    assert len(more) == 1 and more[0].node == 0 and more[0].skip == tree_view.CHILDREN
    rest = tree_view.draw(tree, set(), start=tree.children[0], skip=tree_view.CHILDREN)
    assert sum(r.kind == "item" for r in rest) == tree_view.CHILDREN


def test_the_timeline_of_a_small_dialog_draws_each_hop() -> None:
    nodes = _big_dialog(120)
    statuses = {
        n.hop.hop.offer: [
            ElementRow(
                digest=_digest(10_000 + i),
                form="jws",
                type="status",
                octets=b"",
                iss=n.hop.hop.aud,
                aud=n.hop.hop.iss,
                hop=n.hop.hop.hop,
                hop_iss=n.hop.hop.iss,
                iat=n.hop.hop.iat + 5,
                offer=n.hop.hop.offer,
                state="completed",
                content=b"",
                first_seen=T,
            )
        ]
        for i, n in enumerate(nodes)
    }
    figure = charts.timeline_figure(nodes, statuses, skew=60)
    rows = {y for trace in figure["data"] for y in trace["y"]}
    assert len(rows) == 120
    clicks = [c for trace in figure["data"] for c in trace.get("customdata", [])]
    assert clicks and all(c.startswith("/hops/") and len(c) == 6 + 43 for c in clicks)


def test_the_timeline_of_a_large_dialog_is_counted_per_bucket() -> None:
    nodes = _big_dialog()
    figure = charts.dialog_activity_figure(nodes)
    bars = [t for t in figure["data"] if t["type"] == "bar"]
    assert sum(sum(t["y"]) for t in bars) == 2000
    assert len(json.dumps(figure)) < 20_000
    flagged = next(t for t in figure["data"] if t["name"] == "flagged hops")
    assert sum(flagged["y"]) == 1


def test_a_prev_the_dialog_does_not_hold_makes_a_root_not_a_broken_link() -> None:
    nodes = [_node(1, None), _node(2, 1), _node(3, 99)]  # 99 is not stored
    tree = tree_view.build(nodes)
    assert tree.roots == [0, 2] and tree.orphan == {2}
    assert tree.children[0] == [1]


def test_the_activity_chart_counts_flags_on_a_second_axis() -> None:
    figure = charts.activity_figure(Activity(60, {T: {"completed": 3, "failed": 1}}, {T: 2}))
    names = [trace["name"] for trace in figure["data"]]
    assert names == ["completed", "failed", "flags opened"]
    assert figure["data"][-1]["yaxis"] == "y2" and figure["data"][-1]["y"] == [2]


def test_timeline_labels_carry_agent_markup_as_entities() -> None:
    """Plotly reads labels as HTML of its own; an identifier's ``<b>`` or ``<a>`` must be
    shown as written (tests/browser/test_xss.py checks the drawn chart)."""
    node = _node(1, None)
    node.hop.hop.iss = "spiffe://x.example/<b>bold<br>&amp;"
    figure = charts.timeline_figure([node], {}, skew=60)
    [label] = {y for trace in figure["data"] for y in trace["y"]}
    assert label.startswith("1. &lt;b&gt;bold&lt;br&gt;&amp;amp; → ")
