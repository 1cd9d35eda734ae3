"""The triage queue (``/flags``), a flag's evidence (``/flags/{id}``) and operator actions.

The forms that act on flags are in ``app.web.actions``; a refused action comes back here
(``queue_page``, ``flag_view``) with the form as it was sent and what to fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import RedirectResponse, Response
from handoff_context import MAX_SAFE_INT, Severity, parse_digest_text
from handoff_context.errors import MalformedError

from app.envelope.flags import FlagKind
from app.store import dashboard
from app.store.comments import comments_of
from app.store.queries import (
    FlagAction,
    FlagStatus,
    flag_actions,
    get_flag,
    hop_elements,
    hop_for_offer,
)
from app.store.rejected import get_refused
from app.web import proof
from app.web.evidence import compare, decode, variant_sentence
from app.web.people import NOBODY, people_of
from app.web.render import ENV, render, secure
from app.web.service import ServiceDep
from app.web.sessions import PageError, Viewer

router = APIRouter(include_in_schema=False)
Text = Annotated[str | None, Query(max_length=2048)]
PER_PAGE = 50
# Snooze presets: what people pick at night instead of typing a time.
PRESETS = {"1h": "1 hour", "4h": "4 hours", "tomorrow": "tomorrow 09:00 UTC"}
# An action form before anything was sent (a refused one comes back with its values).
EMPTY_FORM: dict[str, Any] = {
    "action": "", "note": "", "assignee": "", "until": "", "preset": "", "ids": (), "groups": (),
    "comment": None,
}  # fmt: skip


def _pick(value: str | None, allowed: list[str]) -> str | None:
    return value if value in allowed else None


def _text(value: str | None) -> str | None:
    return (value or "").strip() or None


# The status filter's choices: the default first (an acknowledged flag is still open
# until resolved, see dashboard.OPEN_OR_ACKNOWLEDGED), then each status alone.
STATUS_NAMES = {
    dashboard.OPEN_OR_ACKNOWLEDGED: "open or acknowledged",
    **{s.value: s.value for s in FlagStatus},
}
STATUS_VALUES = list(STATUS_NAMES)

# Named views, one click from every page (the header links to the first): what an
# operator paged at night wants first, and what is theirs.
VIEWS = {
    "urgent": "Critical and high, open, newest first",
    "mine": "Assigned to me, open",
    "acknowledged": "Acknowledged: someone is on it",
}


@dataclass(frozen=True)
class Queue:
    """The queue's parameters as read from the URL, and the URL query that gives them."""

    filters: dashboard.TriageFilter
    order: dashboard.Order
    grouped: bool
    view: str | None
    query: dict[str, str]


def read_queue(
    user: Any,
    *,
    view: str | None,
    kind: str | None,
    severity: str | None,
    status: str | None,
    agent: str | None,
    dialog: str | None,
    assignee: str | None,
    variant: str | None,
    issuer: str | None,
    sort: str | None,
    group: str | None,
) -> Queue:
    chosen = view if view in VIEWS else None
    default_status = dashboard.OPEN_OR_ACKNOWLEDGED
    picked_status = default_status if status is None else _pick(status, STATUS_VALUES)
    severities: tuple[str, ...] = ()
    if chosen == "urgent":
        severities, picked_status = dashboard.URGENT, "open"
    elif chosen == "acknowledged":
        picked_status = FlagStatus.ACKNOWLEDGED.value
    elif severity in {s.value for s in Severity}:
        severities = (str(severity),)
    orders = [o.value for o in dashboard.Order]
    default_order = "severity-newest" if chosen == "urgent" else "severity"
    order = dashboard.Order(_pick(sort, orders) or default_order)
    who = user.username if chosen == "mine" else _text(assignee)
    filters = dashboard.TriageFilter(
        kind=_pick(kind, [k.value for k in FlagKind]),
        severities=severities,
        status=picked_status,
        agent=_text(agent),
        dialog=_text(dialog),
        assignee=who,
        variant=_text(variant),
        issuer=_text(issuer),
    )
    query = {
        "view": chosen or "",
        "kind": filters.kind or "",
        "severity": severities[0] if severities and not chosen else "",
        "agent": filters.agent or "",
        "dialog": filters.dialog or "",
        "assignee": "" if chosen == "mine" else (filters.assignee or ""),
        "variant": filters.variant or "",
        "issuer": filters.issuer or "",
    }
    if picked_status != default_status and not chosen:
        query["status"] = picked_status or "any"
    if order.value != default_order:
        query["sort"] = order.value
    grouped = group != "0"
    if not grouped:
        query["group"] = "0"
    return Queue(filters, order, grouped, chosen, {k: v for k, v in query.items() if v})


QUEUE_PARAMS = (
    "view", "kind", "severity", "status", "agent", "dialog", "assignee", "variant", "issuer",
    "sort", "group",
)  # fmt: skip


@router.get("/flags")
def flags(
    request: Request,
    user: Viewer,
    service: ServiceDep,
    view: Text = None,
    kind: Text = None,
    severity: Text = None,
    status: Text = None,
    agent: Text = None,
    dialog: Text = None,
    assignee: Text = None,
    variant: Text = None,
    issuer: Text = None,
    sort: Text = None,
    group: Text = None,
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
    done: Text = None,
    at: Annotated[int | None, Query(ge=0, le=PER_PAGE)] = None,
) -> Response:
    params = {
        "view": view, "kind": kind, "severity": severity, "status": status, "agent": agent,
        "dialog": dialog, "assignee": assignee, "variant": variant, "issuer": issuer,
        "sort": sort, "group": group,
    }  # fmt: skip
    return queue_page(request, user, service, params, page=page, done=done, at=at)


def params_of(query: str) -> dict[str, str | None]:
    """The queue's parameters from a URL query (the bulk form's ``back``)."""
    found = parse_qs(query)
    return {name: found[name][0] if name in found else None for name in QUEUE_PARAMS}


def queue_page(
    request: Request,
    user: Any,
    service: Any,
    params: dict[str, str | None],
    *,
    page: int = 1,
    done: str | None = None,
    at: int | None = None,
    form: dict[str, Any] | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    """The queue for ``params``; after a refused bulk action (``error``), with the bulk
    form as it was sent (``form``) so nothing typed or ticked is lost."""
    queue = read_queue(user, **params)
    now = service.clock()
    service.sweep()
    read = dashboard.triage_groups if queue.grouped else dashboard.triage
    with service.reading() as session:
        rows, total = read(
            session,
            now=now,
            filters=queue.filters,
            order=queue.order,
            offset=(page - 1) * PER_PAGE,
            limit=PER_PAGE,
        )
    people = people_of(service)
    f = queue.filters
    context = {
        "nav": "urgent" if queue.view == "urgent" else "flags",
        "now": now,
        "rows": rows,
        "total": total,
        "page": page,
        "pages": max(1, -(-total // PER_PAGE)),
        "view": queue.view,
        "view_title": VIEWS.get(queue.view or ""),
        "filters": {
            "kind": f.kind or "",
            "severity": queue.query.get("severity", ""),
            "status": f.status or "",
            "agent": f.agent or "",
            "dialog": f.dialog or "",
            "assignee": queue.query.get("assignee", ""),
        },
        "hidden": {k: queue.query[k] for k in ("view", "variant", "issuer") if k in queue.query},
        "sort": queue.order.value,
        "grouped": queue.grouped,
        "orders": ORDER_NAMES,
        "query": urlencode(queue.query),
        "kinds": [k.value for k in FlagKind],
        "severities": [s.value for s in Severity],
        "statuses": STATUS_NAMES,
        "people": people,
        "done": done,
        "at": at,
        "form": {**EMPTY_FORM, **(form or {})},
        "error": error,
        "presets": PRESETS,
        "can_triage": user.role.value in ("operator", "admin"),
        "nobody": NOBODY,
    }
    return render(request, "flags.html", context, status=status)


ORDER_NAMES = {
    "severity": "severity, then oldest",
    "severity-newest": "severity, then newest",
    "oldest": "oldest first",
    "newest": "newest first",
}


def group_query(row: dashboard.TriageRow) -> str:
    """The URL query of the flags folded into ``row`` (same kind, issuer, variant)."""
    f = row.flag.flag
    return urlencode({"kind": f.kind, "issuer": f.iss, "variant": f.variant or "-"})


ENV.globals["group_query"] = group_query


@router.get("/flags/similar")
def similar(
    request: Request,
    user: Viewer,
    service: ServiceDep,
    kind: Text = None,
    issuer: Text = None,
    variant: Text = None,
    status: Text = None,
    shown: Annotated[int | None, Query(ge=1, le=MAX_SAFE_INT)] = None,
) -> Response:
    """The flags folded into one group row, as table rows for htmx to put under it; a
    browser without htmx gets the ungrouped queue of the same flags (a real page)."""
    key = {"kind": kind or "", "issuer": issuer or "", "variant": variant or "-"}
    picked = dashboard.OPEN_OR_ACKNOWLEDGED if status is None else _pick(status, STATUS_VALUES)
    if request.headers.get("hx-request") != "true":
        query = {**key, "group": "0", **({"status": status} if status else {})}
        return secure(RedirectResponse(f"/flags?{urlencode(query)}", status_code=303))
    filters = dashboard.TriageFilter(
        kind=_text(kind), issuer=_text(issuer), variant=_text(variant) or "-", status=picked
    )
    with service.reading() as session:
        rows, total = dashboard.triage(
            session, now=service.clock(), filters=filters, order=dashboard.Order.NEWEST,
            limit=PER_PAGE + 1,
        )  # fmt: skip
    context = {
        "now": service.clock(),
        "rows": [r for r in rows if r.flag.flag.id != shown][:PER_PAGE],
        "more": total > PER_PAGE + 1,
        "all_href": f"/flags?{urlencode({**key, 'group': '0'})}",
        "can_triage": user.role.value in ("operator", "admin"),
    }
    return render(request, "_flag_similar.html", context)


FlagId = Annotated[int, Path(ge=1, le=MAX_SAFE_INT)]


@router.get("/flags/{flag_id}")
def flag_page(
    request: Request, flag_id: FlagId, user: Viewer, service: ServiceDep, done: Text = None
) -> Response:
    return flag_view(request, flag_id, user, service, done=done)


def flag_view(
    request: Request,
    flag_id: int,
    user: Any,
    service: Any,
    *,
    done: str | None = None,
    form: dict[str, Any] | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    """A flag's page; after a refused action (``error``) with the form as it was sent."""
    now = service.clock()
    service.sweep()
    with service.reading() as session:
        listing = get_flag(session, flag_id=flag_id, now=now)
        if listing is None:
            raise PageError(404, f"There is no flag {flag_id}.")
        f = listing.flag
        audit = flag_actions(session, flag_id=flag_id)
        thread = comments_of(session, flag_id=flag_id)
        digests = []
        for text in f.evidence:
            try:
                digests.append(parse_digest_text(text, what="evidence"))
            except MalformedError:
                continue
        stored = dashboard.elements(session, digests=digests)
        evidence = [stored[d] for d in digests if d in stored]
        # Octets refused before they became an element (a rejected-element flag's evidence)
        # are stored too, apart: name them rather than say nothing is stored.
        refused = [r for d in digests if d not in stored and (r := get_refused(session, digest=d))]
        hop = hop_for_offer(session, offer=f.offer) if f.offer is not None else None
        timeline = hop_elements(session, iss=f.iss, hop=f.hop) if hop is not None else []
        verdicts = {e.digest: dashboard.verdicts_of(session, digest=e.digest) for e in evidence}
        below = [e for e in evidence if e.type == "offer" and e.hop != f.hop]
        downstream = proof.downstream(session, below)
        own_offers = [e for e in evidence if e.type == "offer" and e.hop == f.hop]
        received = proof.receipts(session, own_offers[:2])
        case = proof.case_proof(session, f)
    offers = [decode(e) for e in own_offers]
    pair = offers[:2] if f.kind == FlagKind.EQUIVOCATION.value and len(offers) >= 2 else None
    statuses = [decode(e) for e in evidence if e.type == "status"]
    conflict = statuses[:2] if f.kind == FlagKind.STATUS_CONFLICT.value else []
    cancels = [e for e in evidence if e.type == "status" and e.state == "canceled"]
    context = {
        "nav": "flags",
        "now": now,
        "flag": f,
        "status": listing.status,
        "audit": audit,
        "evidence": evidence,
        "decoded": {e.digest: decode(e) for e in evidence},
        "refused": refused,
        "verdicts": verdicts,
        "hop": hop.hop if hop is not None else None,
        "timeline": timeline,
        "pair": pair,
        "members": compare(*pair) if pair else [],
        "variant_sentence": variant_sentence(f.variant),
        "downstream": downstream,
        "deadline": f.opened_at,  # a cancel-not-propagated flag opens at its deadline
        "cancels": cancels,
        "grace": service.settings.timing.cancel_grace,
        "received": received,
        "conflict": conflict if len(conflict) == 2 else None,
        "conflict_members": compare(*conflict) if len(conflict) == 2 else [],
        "case": case,
        "times_of": proof.times_of,
        "lost_after": service.settings.timing.lost_outcome_after,
        "done": done,
        "can_triage": user.role.value in ("operator", "admin"),
        "actions": [a.value for a in FlagAction],
        "comments": thread,
        "form": {**EMPTY_FORM, **(form or {})},
        "error": error,
        "presets": PRESETS,
        "people": people_of(service),
        "nobody": NOBODY,
    }
    return render(request, "flag.html", context, status=status)
