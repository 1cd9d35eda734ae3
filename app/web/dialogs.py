"""A dialog's page (``/dialogs/{dialog}``): the whole chain tree (``app.web.tree``), its
search and its timeline; and ``/dialog-tree``, the fragment that unfolds one node for htmx.

The view state is in the URL: ``q`` (the search) and ``open`` (nodes opened on top of the
default), so a view is a deep link; ``toggle`` is how a click works without JavaScript (it
redirects to the canonical URL with that node opened or closed).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from app.store import dashboard
from app.store.queries import dialog_tree
from app.web import charts
from app.web import tree as tree_view
from app.web.render import render, secure
from app.web.service import Service, ServiceDep
from app.web.sessions import PageError, Viewer

router = APIRouter(include_in_schema=False)
Text = Annotated[str | None, Query(max_length=2048)]
REFUSED_ROWS = 50  # elements refused in a dialog listed on its page, newest first


def _none(value: str | None) -> str | None:
    return value.strip() or None if value else None


def _read(service: Service) -> Any:
    service.sweep()
    return service.reading()


def _dialog_nodes(service: Service, dialog: str) -> list[Any]:
    if len(dialog) > 1024:
        raise PageError(404, "No dialog has that name.")
    with _read(service) as session:
        nodes = dialog_tree(session, dialog=dialog)
    if not nodes:
        raise PageError(404, "No hop is stored for that dialog.")
    return nodes


def _view(tree: tree_view.Tree, q: str | None, opened: str | None) -> tuple[list[int], set[int]]:
    """The search's matches and what is open: the matches' paths with a search, else the
    default; and on top of either the nodes the URL opens, with their paths, so a deep link
    always shows them."""
    hits = tree_view.matches(tree, q or "")
    chosen = tree_view.read_open(tree, opened)
    base = tree_view.paths_to(tree, hits) if q else tree_view.default_open(tree)
    return hits, base | chosen | tree_view.paths_to(tree, sorted(chosen))


@router.get("/dialogs/{dialog:path}")
def dialog_page(
    request: Request,
    dialog: str,
    user: Viewer,
    service: ServiceDep,
    q: Text = None,
    open: Annotated[str | None, Query(max_length=70_000)] = None,
    toggle: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    if len(dialog) > 1024:
        raise PageError(404, "No dialog has that name.")
    with _read(service) as session:
        nodes = dialog_tree(session, dialog=dialog)
        refused = dashboard.refused_in_dialog(session, dialog=dialog, limit=REFUSED_ROWS)
    if not nodes:
        if not refused:
            raise PageError(404, "No hop is stored for that dialog.")
        # Every element naming the dialog was refused: no hop, no tree, but the refusals
        # are what the operator came for (search leads here by the dialog id).
        context = {
            "nav": "dialogs", "now": service.clock(), "dialog": dialog, "tree": None,
            "refused": refused, "refused_rows": REFUSED_ROWS,
        }  # fmt: skip
        return render(request, "dialog.html", context)
    tree = tree_view.build(nodes)
    hits, opened = _view(tree, _none(q), open)
    if toggle is not None:
        # A click without JavaScript: open or close one node, then show the canonical URL.
        node = tree.by_short.get(toggle)
        if node is not None:
            opened ^= {node}
        query = {
            k: v for k, v in (("q", _none(q)), ("open", tree_view.open_param(tree, opened))) if v
        }
        target = f"/dialogs/{quote(dialog, safe='')}?{urlencode(query)}#n-{toggle}"
        return secure(RedirectResponse(target, status_code=303))
    states: dict[str, int] = {}
    for n in nodes:
        states[n.hop.hop.state] = states.get(n.hop.hop.state, 0) + 1
    if len(nodes) <= charts.TIMELINE_ROWS:
        ordered = [tree.nodes[i] for i in _tree_order(tree)]
        with service.reading() as session:
            statuses = dashboard.statuses_of(session, offers=[n.hop.hop.offer for n in ordered])
        figure = charts.timeline_figure(ordered, statuses, skew=service.settings.skew)
        aggregated = False
    else:
        figure, aggregated = charts.dialog_activity_figure(nodes), True
    here = {k: v for k, v in (("q", _none(q)), ("open", open)) if v}
    context = {
        "refused": refused,
        "refused_rows": REFUSED_ROWS,
        "nav": "dialogs",
        "now": service.clock(),
        "dialog": dialog,
        "tree": tree,
        "rows": tree_view.draw(tree, opened),
        "hits": set(hits[: tree_view.MATCH_ROWS]),
        "hit_count": len(hits),
        "q": _none(q) or "",
        "here": urlencode(here),
        "figure": figure,
        "aggregated": aggregated,
        "states": states,
        "flagged": sum(1 for n in nodes if n.hop.flags),
        "trusted": set(service.trust.issuers),
        "short": tree_view.SHORT,
        "strip": _strip(tree, hits),
    }
    return render(request, "dialog.html", context)


def _tree_order(tree: tree_view.Tree) -> list[int]:
    order: list[int] = []
    stack = list(reversed(tree.roots))
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(reversed(tree.children[i]))
    return order


def _strip(tree: tree_view.Tree, hits: list[int]) -> list[tuple[float, str, str]]:
    """Where the flags and matches are along the tree's depth-first order, as fractions of
    its length, for the overview strip: (position, kind, short digest)."""
    order = _tree_order(tree)
    place = {i: n / max(len(order), 1) for n, i in enumerate(order)}
    marks = [(place[i], "match", tree.key[i][: tree_view.SHORT]) for i in hits[:500]]
    flagged = [i for i in tree.bad if tree.nodes[i].hop.flags][:500]
    marks += [(place[i], "flag", tree.key[i][: tree_view.SHORT]) for i in flagged]
    return sorted(marks)


@router.get("/dialog-tree")
def dialog_fragment(
    request: Request,
    user: Viewer,
    service: ServiceDep,
    dialog: Annotated[str, Query(max_length=1024)] = "",
    node: Annotated[str, Query(max_length=64)] = "",
    skip: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    q: Text = None,
    open: Annotated[str | None, Query(max_length=70_000)] = None,
) -> Response:
    """The children of one node (or, with ``skip``, the rest of them), as a list for htmx to
    put under it; without htmx, the dialog's page with that node open."""
    if request.headers.get("hx-request") != "true":
        query = {k: v for k, v in (("q", _none(q)), ("toggle", node)) if v}
        target = f"/dialogs/{quote(dialog, safe='')}?{urlencode(query)}"
        return secure(RedirectResponse(target, status_code=303))
    nodes = _dialog_nodes(service, dialog)
    tree = tree_view.build(nodes)
    hits, opened = _view(tree, _none(q), open)
    parent = tree.by_short.get(node)
    if node and parent is None:
        raise PageError(404, "That hop is not in this dialog any more; reload the page.")
    start = tree.roots if parent is None else tree.children[parent]
    context = {
        "now": service.clock(),
        "dialog": dialog,
        "tree": tree,
        "rows": tree_view.draw(tree, opened, start=start, skip=skip),
        "hits": set(hits[: tree_view.MATCH_ROWS]),
        "q": _none(q) or "",
        "here": urlencode({k: v for k, v in (("q", _none(q)), ("open", open)) if v}),
        "trusted": set(service.trust.issuers),
        "short": tree_view.SHORT,
        "continued": skip > 0,
    }
    return render(request, "_tree.html", context)
