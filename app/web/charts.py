"""The dashboard's pictures: Plotly figures as plain dicts (rendered in the browser by
static/app.js from a ``data-figure`` attribute) and the dialog's chain graph, laid out here
and drawn as server-side SVG by templates/_graph.html.

Colours are by hop state and match static/app.css; every click target is a hop page URL
(``customdata`` / SVG ``<a href>``), never text from an element.
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from typing import Any

from handoff_context import HopState, digest_text

from app.envelope.ledger import band_at, fenced
from app.ingest.cases import CaseDetail, CaseEvent, Epoch
from app.store.dashboard import Activity
from app.store.models import ElementRow
from app.store.queries import TreeNode
from app.web.render import agent_name, visible_text

STATE_COLOURS = {
    HopState.OFFERED: "#3b82f6",
    HopState.ACCEPTED: "#8b5cf6",
    HopState.COMPLETED: "#16a34a",
    HopState.FAILED: "#dc2626",
    HopState.REJECTED: "#ea580c",
    HopState.CANCELED: "#6b7280",
    HopState.EXPIRED: "#ca8a04",
}
STATUS_SYMBOLS = {
    "accepted": "circle",
    "completed": "diamond",
    "failed": "x",
    "rejected": "triangle-down",
    "canceled": "square",
}
FLAG_COLOUR = "#e11d48"


def _iso(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _timeline_layout(height: int, rows: Sequence[str]) -> dict[str, Any]:
    """Rows of bands over time (the dialog timeline, a case's ownership): dates on top,
    ``rows`` top to bottom in their order, the legend under the plot. Without the explicit
    order Plotly stacks categories in the order the traces first name them (one trace per
    state), so a failed second hop would be drawn after every completed one."""
    return _layout(
        barmode="overlay",
        height=height,
        # automargin: on a phone the date ticks turn and need more room than 36 px.
        xaxis={"type": "date", "side": "top", "automargin": True},
        yaxis={
            "autorange": "reversed",
            "automargin": True,
            "type": "category",
            "categoryorder": "array",
            "categoryarray": list(rows),
        },
        legend={"orientation": "h", "y": -40 / height},
        margin={"l": 8, "r": 16, "t": 36, "b": 40},
    )


def _layout(**extra: Any) -> dict[str, Any]:
    """Transparent backgrounds and the page's font, so both themes read well (app.js sets
    the font colour from the page)."""
    return {
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"family": "system-ui, sans-serif", "size": 12},
        "margin": {"l": 48, "r": 16, "t": 8, "b": 40},
        "legend": {"orientation": "h", "y": -0.2},
        **extra,
    }


def _whole_step(largest: int, ticks: int = 5) -> int:
    """The smallest tick step of 1, 2 or 5 times a power of ten that needs at most
    ``ticks`` ticks to reach ``largest``."""
    base = 1
    while True:
        for factor in (1, 2, 5):
            if -(-largest // (base * factor)) <= ticks:
                return base * factor
        base *= 10


def activity_figure(act: Activity) -> dict[str, Any]:
    """Hops offered per time bucket, stacked by their state now, and flags opened."""
    buckets = sorted(set(act.hops) | set(act.flags))
    xs = [_iso(b) for b in buckets]
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "name": state.value,
            "x": xs,
            "y": [act.hops.get(b, {}).get(state.value, 0) for b in buckets],
            "marker": {"color": colour},
            "hovertemplate": f"%{{y}} {state.value}<extra></extra>",
        }
        for state, colour in STATE_COLOURS.items()
        if any(state.value in act.hops.get(b, {}) for b in buckets)
    ]
    opened = [b for b in buckets if act.flags.get(b)]
    data.append(
        {
            "type": "scatter",
            "mode": "markers",
            "name": "flags opened",
            "x": [_iso(b) for b in opened],
            "y": [act.flags[b] for b in opened],
            "yaxis": "y2",
            "marker": {"color": FLAG_COLOUR, "size": 9, "symbol": "diamond"},
            "hovertemplate": "%{y} flags opened<extra></extra>",
        }
    )
    layout = _layout(
        barmode="stack",
        height=280,
        xaxis={"type": "date"},
        yaxis={"title": {"text": "hops"}, "rangemode": "tozero"},
        yaxis2={
            "title": {"text": "flags"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "showgrid": False,
            "tickformat": "d",
            # Whole flags only: with automatic ticks a maximum of 1 gives 0, 0.5, 1 and
            # the "d" format prints them as 0, 1, 1.
            "tickmode": "linear",
            "tick0": 0,
            "dtick": _whole_step(max(act.flags.values(), default=1)),
        },
        bargap=0.15,
    )
    layout["margin"]["r"] = 48
    return {"data": data, "layout": layout}


def timeline_figure(
    nodes: Sequence[TreeNode],
    statuses: Mapping[bytes, Sequence[ElementRow]],
    *,
    skew: int,
    numbers: Sequence[int] = (),
) -> dict[str, Any]:
    """Gantt-style: per hop the offer window iat..exp as a bar coloured by state, each
    status as a marker at its iat, and the expiry line (exp + skew). Rows follow
    ``nodes`` (the chain graph's order), top to bottom, numbered as in the graph."""
    numbers = list(numbers) or list(range(1, len(nodes) + 1))
    labels = [f"{numbers[i]}. {_label(n)}" for i, n in enumerate(nodes)]
    data: list[dict[str, Any]] = []
    for state, colour in STATE_COLOURS.items():
        rows = [(i, n) for i, n in enumerate(nodes) if n.hop.hop.state == state.value]
        if not rows:
            continue
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": state.value,
                "y": [labels[i] for i, _ in rows],
                "base": [_iso(n.hop.hop.iat) for _, n in rows],
                "x": [max(n.hop.hop.exp - n.hop.hop.iat, 1) * 1000 for _, n in rows],
                "marker": {"color": colour, "opacity": 0.55},
                "customdata": [f"/hops/{digest_text(n.hop.hop.offer)}" for _, n in rows],
                "hovertemplate": f"{state.value}: offer window<extra></extra>",
            }
        )
    for kind, symbol in STATUS_SYMBOLS.items():
        points = [
            (labels[i], s, n)
            for i, n in enumerate(nodes)
            for s in statuses.get(n.hop.hop.offer, ())
            if s.state == kind
        ]
        if points:
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"status {kind}",
                    "y": [p[0] for p in points],
                    "x": [_iso(p[1].iat) for p in points],
                    "marker": {
                        "symbol": symbol,
                        "size": 10,
                        "color": STATE_COLOURS[HopState(kind)],
                        "line": {"width": 1, "color": "#111827"},
                    },
                    "customdata": [f"/hops/{digest_text(p[2].hop.hop.offer)}" for p in points],
                    "hovertemplate": f"{kind} signed %{{x}}<extra></extra>",
                }
            )
    expiry = [(labels[i], n.hop.hop.exp + skew) for i, n in enumerate(nodes)]
    data.append(
        {
            "type": "scatter",
            "mode": "markers",
            "name": "expiry (exp + skew)",
            "y": [e[0] for e in expiry],
            "x": [_iso(e[1]) for e in expiry],
            "marker": {"symbol": "line-ns-open", "size": 14, "color": "#9ca3af"},
            "hovertemplate": "expires %{x}<extra></extra>",
        }
    )
    return {"data": data, "layout": _timeline_layout(90 + 26 * max(len(nodes), 3), labels)}


def _label(node: TreeNode) -> str:
    h = node.hop.hop
    return plotly_text(f"{h.iss.rsplit('/', 1)[-1]} → {h.aud.rsplit('/', 1)[-1]}")


def plotly_text(text: str) -> str:
    """Agent-chosen text for a Plotly label, shown as written. Plotly reads labels as a
    small HTML of its own (``<b>``, ``<br>``, ``<a href>``, styles), so an identifier ending
    in ``<b>`` would restyle the chart (and trip the CSP with a style attribute); Plotly
    turns these entities back into the characters they name."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --- a case's ownership timeline (docs/envelopes.md) ----------------------------------------

EPOCH_COLOURS = ("#6366f1", "#0ea5e9")  # alternate, so neighbouring epochs stay apart
# Marker look per event kind; a write or act that the ledger calls stale (an epoch older
# than the owner's, or refused by the system of record) gets its own, louder trace.
CASE_MARKERS: dict[str, tuple[str, str, str]] = {
    "handoff": ("handoff sent", "triangle-right", "#3b82f6"),
    "accepted": ("accepted", "circle", "#16a34a"),
    "rejected": ("rejected", "triangle-down", "#ea580c"),
    "handed-off": ("handed-off mark", "line-ns-open", "#8b5cf6"),
    "write": ("write", "square", "#64748b"),
    "act": ("act", "diamond", "#64748b"),
    "invalid": ("invalid envelope", "x-thin-open", "#9ca3af"),
}
STALE_MARKER = ("stale or rejected write/act", "x", FLAG_COLOUR)


def _plain(text: object, limit: int = 120) -> str:
    """Untrusted text for Plotly's labels, which read a little HTML: escaped (Plotly turns
    entities back into characters), hidden characters spelt out, and cut to ``limit``."""
    shown = visible_text(text)
    return html.escape(shown if len(shown) <= limit else shown[: limit - 1] + "…")


def is_stale(event: CaseEvent, epochs: Sequence[Epoch]) -> bool:
    """A write or act that the fencing token should have stopped: refused by the system of
    record, or one the ledger's epoch fence applies to (``app.envelope.ledger.fenced``)."""
    if event.kind not in ("write", "act"):
        return False
    if event.outcome == "rejected":
        return True
    return fenced(event.epoch, band_at(epochs, event.at))


def _rows(detail: CaseDetail) -> list[str]:
    """Agents top to bottom in order of first appearance (owners and actors alike)."""
    seen: dict[str, None] = {}
    moments = [(e.start, e.owner) for e in detail.epochs]
    moments += [(ev.at, ev.agent or "unknown") for ev in detail.events]
    for _, agent in sorted(moments, key=lambda m: m[0]):
        seen.setdefault(agent, None)
    return list(seen)


def _row_labels(agents: Sequence[str]) -> dict[str, str]:
    """Short names where they are unambiguous, whole identifiers otherwise."""
    short = {a: agent_name(a) or a for a in agents}
    counts: dict[str, int] = {}
    for name in short.values():
        counts[name] = counts.get(name, 0) + 1
    return {a: _plain(s if counts[s] == 1 else a, 48) for a, s in short.items()}


def case_figure(detail: CaseDetail) -> dict[str, Any]:
    """Ownership over time: one horizontal band per epoch on its owner's row, and every
    captured event (handoff, acceptance, rejection, write, handed-off mark, act) as a marker
    on its agent's row, with the epoch it carried in the hover text."""
    labels = _row_labels(_rows(detail))
    times = [e.start for e in detail.epochs] + [ev.at for ev in detail.events]
    first, last = (min(times), max(times)) if times else (0, 0)
    pad = max(60, (last - first) // 20)
    data: list[dict[str, Any]] = []
    if detail.epochs:
        ends = [e.end if e.end is not None else last + pad for e in detail.epochs]
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": "owner (epoch band)",
                "y": [labels[e.owner] for e in detail.epochs],
                "base": [_iso(e.start) for e in detail.epochs],
                "x": [
                    max(end - e.start, 1) * 1000 for e, end in zip(detail.epochs, ends, strict=True)
                ],
                # Each band says its epoch: inside at its end when it fits (away from the
                # acceptance and writes at its start), else just after it (a band of a few
                # seconds); Plotly picks the colour against the band or the page, and
                # the label may run past the plot area rather than be cut off.
                "text": [f"epoch {e.epoch}" for e in detail.epochs],
                "textposition": "auto",
                "insidetextanchor": "end",
                "constraintext": "none",
                "cliponaxis": False,
                "marker": {
                    "color": [EPOCH_COLOURS[e.epoch % 2] for e in detail.epochs],
                    "opacity": 0.8,
                },
                "hovertext": [_band_text(e, labels) for e in detail.epochs],
                "hovertemplate": "%{hovertext}<extra></extra>",
            }
        )
    groups: dict[tuple[str, str, str], list[CaseEvent]] = {}
    for ev in detail.events:
        look = STALE_MARKER if is_stale(ev, detail.epochs) else CASE_MARKERS.get(ev.kind)
        groups.setdefault(look or (ev.kind, "circle-open", "#9ca3af"), []).append(ev)
    for (name, symbol, colour), events in groups.items():
        stale = (name, symbol, colour) == STALE_MARKER
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": _plain(name, 40),
                "y": [labels[ev.agent or "unknown"] for ev in events],
                "x": [_iso(ev.at) for ev in events],
                "marker": {
                    "symbol": symbol,
                    "size": 15 if stale else 11,
                    "color": colour,
                    "line": {"width": 2 if stale else 1, "color": colour if stale else "#111827"},
                },
                "hovertext": [_event_text(ev, stale) for ev in events],
                "hovertemplate": "%{hovertext}<extra></extra>",
            }
        )
    layout = _timeline_layout(110 + 40 * max(len(labels), 2), list(labels.values()))
    return {"data": data, "layout": layout}


def _band_text(e: Epoch, labels: Mapping[str, str]) -> str:
    until = "now" if e.end is None else _iso(e.end)
    via = f"<br>handoff {_plain(e.handoff_id, 80)}" if e.handoff_id else ""
    return f"epoch {e.epoch}: {labels[e.owner]}<br>{_iso(e.start)} … {until}{via}"


def _event_text(ev: CaseEvent, stale: bool) -> str:
    """The marker's hover text. Plotly draws its ``<b>`` with a style attribute, which the
    CSP refuses (a console error on every hover): ``<br>`` is the only markup used."""
    parts = [f"{_plain(ev.kind, 20)}{' (stale)' if stale else ''}", _iso(ev.at)]
    parts.append(f"by {_plain(ev.agent or 'unknown agent', 80)}")
    if ev.epoch is not None:
        parts.append(f"epoch {ev.epoch}")
    if ev.outcome:
        parts.append(f"outcome {_plain(ev.outcome, 20)}")
    if ev.handoff_id:
        parts.append(f"handoff {_plain(ev.handoff_id, 80)}")
    if ev.detail:
        parts.append(_plain(ev.detail))
    return "<br>".join(parts)


# --- a large dialog's timeline, aggregated ----------------------------------------------------

TIMELINE_ROWS = 300  # above this many hops a dialog's timeline is counted per time bucket


def dialog_activity_figure(nodes: Sequence[TreeNode], *, buckets: int = 60) -> dict[str, Any]:
    """Hops offered per time bucket (by offer ``iat``), stacked by their state, and flagged
    hops: one bar per bucket whatever the dialog's size, so 20,000 hops draw as fast as 20."""
    if not nodes:
        return {"data": [], "layout": _layout(height=240)}
    times = [n.hop.hop.iat for n in nodes]
    low, high = min(times), max(times)
    width = max(1, -(-(max(high - low, 1)) // buckets))
    counts: dict[str, dict[int, int]] = {}
    flagged: dict[int, int] = {}
    for n in nodes:
        b = low + (n.hop.hop.iat - low) // width * width
        counts.setdefault(n.hop.hop.state, {})[b] = counts.get(n.hop.hop.state, {}).get(b, 0) + 1
        if n.hop.flags:
            flagged[b] = flagged.get(b, 0) + 1
    data: list[dict[str, Any]] = []
    for state, colour in STATE_COLOURS.items():
        per = counts.get(state.value)
        if not per:
            continue
        xs = sorted(per)
        data.append(
            {
                "type": "bar",
                "name": state.value,
                "x": [_iso(b) for b in xs],
                "y": [per[b] for b in xs],
                "marker": {"color": colour},
                "hovertemplate": f"%{{y}} {state.value}<extra></extra>",
            }
        )
    marks = sorted(flagged)
    data.append(
        {
            "type": "scatter",
            "mode": "markers",
            "name": "flagged hops",
            "x": [_iso(b) for b in marks],
            "y": [flagged[b] for b in marks],
            "yaxis": "y2",
            "marker": {"color": FLAG_COLOUR, "size": 9, "symbol": "diamond"},
            "hovertemplate": "%{y} flagged<extra></extra>",
        }
    )
    layout = _layout(
        barmode="stack",
        height=260,
        xaxis={"type": "date"},
        yaxis={"title": {"text": "hops"}, "rangemode": "tozero"},
        yaxis2={
            "title": {"text": "flagged"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "showgrid": False,
            "tickmode": "linear",
            "tick0": 0,
            "dtick": _whole_step(max(flagged.values(), default=1)),
        },
        bargap=0.1,
    )
    layout["margin"]["r"] = 48
    return {"data": data, "layout": layout}
