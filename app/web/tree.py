"""A dialog's whole chain tree, drawn as nested lists that stay usable at 20,000 hops.

Every hop is in the tree; what is drawn is the part that is open. A collapsed node shows how
many hops lie below it and unfolds on click (an htmx fragment, ``/dialog-tree``, with a
real link to the same view as a page). Open by default: the first levels (up to a small
budget of rows), and every path down to a flagged or failed hop. A search (agent, hop id,
state or digest prefix) highlights its matches and opens their paths. The view state (the
search, the nodes opened by hand) is in the URL, so every view is a deep link.

A ``prev`` the dialog does not hold does not become a node drawn like a broken link: the
hop that names it is a root, labelled "prev … not in this dialog's store".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from handoff_context import digest_text

from app.store.queries import TreeNode

SHORT = 12  # digest characters that name a node in a URL
FIRST_ROWS = 150  # rows opened level by level on a plain visit
HOT_ROWS = 600  # rows opened along flagged and failed paths, at most
MATCH_ROWS = 200  # matches whose paths a search opens, at most
CHILDREN = 200  # children drawn under one node before a "more" link
FAILED = frozenset({"failed", "rejected", "expired"})


@dataclass
class Tree:
    """The dialog's hops indexed for drawing: children in order, subtree sizes, and which
    hops are flagged or failed."""

    nodes: list[TreeNode]
    key: list[str]  # digest text per node index
    children: list[list[int]]
    roots: list[int]
    size: list[int]  # hops in the subtree, the node included
    depth: list[int]
    parent: list[int | None]
    orphan: set[int]  # roots whose prev is not in the dialog
    bad: set[int]  # flagged or failed hops
    below_bad: list[int]  # flagged or failed hops in the subtree
    by_short: dict[str, int] = field(default_factory=dict)

    @property
    def max_depth(self) -> int:
        return max(self.depth, default=0)

    def ancestors(self, i: int, last: int = 4) -> tuple[list[int], int]:
        """The last ``last`` ancestors of node ``i``, root side first, and how many more
        are above them: the breadcrumb of a node drawn below the capped indent."""
        path: list[int] = []
        at = self.parent[i]
        while at is not None:
            path.append(at)
            at = self.parent[at]
        path.reverse()
        return path[-last:], max(0, len(path) - last)


def build(nodes: Sequence[TreeNode]) -> Tree:
    index = {n.hop.hop.offer: i for i, n in enumerate(nodes)}
    count = len(nodes)
    children: list[list[int]] = [[] for _ in range(count)]
    parent: list[int | None] = [None] * count
    roots, orphan = [], set()
    for i, n in enumerate(nodes):
        p = index.get(n.parent) if n.parent is not None else None
        if p is None or p == i:
            roots.append(i)
            if n.parent is not None:
                orphan.add(i)
        else:
            parent[i] = p
            children[p].append(i)
    # Depth-first order without recursion: depth downwards, then sizes upwards.
    order: list[int] = []
    depth = [0] * count
    stack = list(reversed(roots))
    seen = [False] * count
    while stack:
        i = stack.pop()
        if seen[i]:
            continue
        seen[i] = True
        order.append(i)
        for c in reversed(children[i]):
            depth[c] = depth[i] + 1
            stack.append(c)
    # A cycle of prev links (never valid, profile §7) leaves nodes unreached: make them roots.
    for i in range(count):
        if not seen[i]:
            roots.append(i)
            orphan.add(i)
            order.append(i)
    bad = {i for i, n in enumerate(nodes) if n.hop.flags or n.hop.hop.state in FAILED}
    size = [1] * count
    below_bad = [1 if i in bad else 0 for i in range(count)]
    for i in reversed(order):
        p = parent[i]
        if p is not None and seen[i]:
            size[p] += size[i]
            below_bad[p] += below_bad[i]
    key = [digest_text(n.hop.hop.offer) for n in nodes]
    tree = Tree(list(nodes), key, children, roots, size, depth, parent, orphan, bad, below_bad)
    tree.by_short = {k[:SHORT]: i for i, k in enumerate(key)}
    return tree


def matches(tree: Tree, text: str) -> list[int]:
    """Hops matching ``text``: an agent identifier containing it, a hop id or offer digest
    starting with it (4 characters at least), or a state named by it; in tree order."""
    text = text.strip()
    if not text:
        return []
    lowered = text.lower()
    found = []
    for i, n in enumerate(tree.nodes):
        h = n.hop.hop
        if (
            lowered in h.iss.lower()
            or lowered in h.aud.lower()
            or h.state == lowered
            or (len(text) >= 4 and (h.hop.startswith(text) or tree.key[i].startswith(text)))
            or lowered in n.hop.flags
        ):
            found.append(i)
    return found


def _ancestors(tree: Tree, i: int) -> Iterable[int]:
    p = tree.parent[i]
    while p is not None:
        yield p
        p = tree.parent[p]


def default_open(tree: Tree) -> set[int]:
    """What a plain visit opens: level by level from the roots while the rows drawn stay
    under ``FIRST_ROWS``, then every path to a flagged or failed hop under ``HOT_ROWS``."""
    opened: set[int] = set()
    rows = len(tree.roots)
    level = list(tree.roots)
    while level and rows < FIRST_ROWS:
        following = []
        for i in level:
            if tree.children[i] and rows + len(tree.children[i]) <= FIRST_ROWS:
                opened.add(i)
                rows += min(len(tree.children[i]), CHILDREN)
                following.extend(tree.children[i])
        level = following
    for i in sorted(tree.bad, key=lambda b: tree.depth[b]):
        path = [a for a in _ancestors(tree, i) if a not in opened]
        cost = sum(min(len(tree.children[a]), CHILDREN) for a in path)
        if rows + cost > HOT_ROWS:
            continue
        opened.update(path)
        rows += cost
    return opened


def paths_to(tree: Tree, hits: Sequence[int]) -> set[int]:
    opened: set[int] = set()
    for i in hits[:MATCH_ROWS]:
        opened.update(_ancestors(tree, i))
    return opened


@dataclass(frozen=True)
class Row:
    """One token of the drawn tree: ``open``/``close`` a list, or an ``item``, or a
    ``more`` link for children beyond ``CHILDREN``."""

    kind: str
    node: int = -1
    expanded: bool = False
    skip: int = 0  # for ``more``: children already drawn


def draw(
    tree: Tree, opened: set[int], *, start: Sequence[int] | None = None, skip: int = 0
) -> list[Row]:
    """The rows of the tree from ``start`` (the roots by default; from its ``skip``-th on),
    opening ``opened``. A ``close`` row with ``expanded`` also ends its parent's item."""
    first = list(tree.roots if start is None else start)
    rows: list[Row] = [Row("open")]
    # Each entry: the siblings of one level, the next one to draw, how many were drawn,
    # and whether the level hangs under an item (whose <li> its close ends).
    stack: list[tuple[list[int], int, int, bool]] = [(first, skip, 0, False)]
    while stack:
        siblings, at, drawn, nested = stack.pop()
        if at >= len(siblings) or drawn >= CHILDREN:
            if at < len(siblings):
                above = tree.parent[siblings[at]]
                rows.append(Row("more", -1 if above is None else above, skip=at))
            rows.append(Row("close", expanded=nested))
            continue
        i = siblings[at]
        expanded = i in opened and bool(tree.children[i])
        rows.append(Row("item", i, expanded))
        stack.append((siblings, at + 1, drawn + 1, nested))
        if expanded:
            rows.append(Row("open", i))  # the list of i's children
            stack.append((tree.children[i], 0, 0, True))
    return rows


def open_param(tree: Tree, opened: Iterable[int]) -> str:
    return ",".join(sorted(tree.key[i][:SHORT] for i in opened))


def read_open(tree: Tree, text: str | None) -> set[int]:
    """Nodes named in an ``open`` parameter (short digests, comma-separated); unknown
    names are ignored (a deep link outlives a hop's removal)."""
    if not text:
        return set()
    return {tree.by_short[k] for k in text.split(",")[:5000] if k in tree.by_short}
