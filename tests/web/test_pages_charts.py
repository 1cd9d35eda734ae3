"""The dialog page's pictures stay light for a dialog of 2,000 hops: the chain graph is
paged (depth-first, so subtrees stay together) and the timeline shows one page of hops."""

from __future__ import annotations

import hashlib
import json

from app.store.dashboard import Activity
from app.store.models import ElementRow, HopRow
from app.store.queries import HopListing, TreeNode
from app.web import charts

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


def test_a_dialog_of_2000_hops_is_paged() -> None:
    nodes = _big_dialog()
    trusted = {f"spiffe://x.example/agent/a{i}" for i in range(7)}
    # How long the layout takes is measured in bench/page_render.py, not asserted here.
    first = charts.chain_graph(nodes, trusted=trusted, page=1)
    assert first.total == 2000 and first.pages == 20
    assert len(first.nodes) == charts.PAGE and first.first == 1
    assert first.height <= charts.ROW * charts.PAGE + 8
    # Every node of a page but those whose parent is on an earlier page has its edge.
    last = charts.chain_graph(nodes, trusted=trusted, page=20)
    assert last.first == 1901 and len(last.nodes) == 100
    assert any(g.continued for g in last.nodes)
    shown = {
        g.digest
        for p in range(1, 21)
        for g in charts.chain_graph(nodes, trusted=trusted, page=p).nodes
    }
    assert len(shown) == 2000  # every hop is on exactly one page
    assert charts.chain_graph(nodes, trusted=trusted, page=999).page == 20


def test_the_timeline_of_a_page_is_small() -> None:
    nodes = _big_dialog()
    graph = charts.chain_graph(nodes, trusted=set(), page=3)
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
        for i, n in enumerate(graph.ordered)
    }
    figure = charts.timeline_figure(graph.ordered, statuses, skew=60, numbers=graph.numbers)
    rows = {y for trace in figure["data"] for y in trace["y"]}
    assert len(rows) == 100
    assert min(int(label.split(".", 1)[0]) for label in rows) == graph.first == 201
    assert len(json.dumps(figure)) < 120_000
    clicks = [c for trace in figure["data"] for c in trace.get("customdata", [])]
    assert clicks and all(c.startswith("/hops/") and len(c) == 6 + 43 for c in clicks)


def test_a_prev_the_dialog_does_not_hold_is_a_broken_link() -> None:
    nodes = [_node(1, None), _node(2, 1), _node(3, 99)]  # 99 is not stored
    graph = charts.chain_graph(nodes, trusted=set(), page=1)
    ghosts = [g for g in graph.nodes if g.node is None]
    assert len(ghosts) == 1 and ghosts[0].depth == 0
    child = next(
        g for g in graph.nodes if g.node is not None and g.node.hop.hop.offer == _digest(3)
    )
    assert child.parent_row == ghosts[0].row and child.untrusted


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
