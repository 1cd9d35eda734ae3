"""The triage queue (``/flags``), a flag's evidence (``/flags/{id}``) and operator actions.

Actions go through ``app.store.queries.act_on_flag``, which writes the audit log with who
(``user:NAME``) and when; the forms post and redirect back (post/redirect/get), so a reload
never repeats an action and the queue keeps its filters.
"""

from __future__ import annotations

import calendar
import time
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Path, Query, Request
from fastapi.responses import RedirectResponse, Response
from handoff_context import MAX_SAFE_INT, Severity, parse_digest_text
from handoff_context.errors import MalformedError

from app.envelope.flags import FlagKind
from app.store import dashboard, db
from app.store.queries import (
    FlagAction,
    FlagActionError,
    FlagStatus,
    act_on_flag,
    flag_actions,
    get_flag,
    hop_elements,
    hop_for_offer,
)
from app.web.evidence import compare, decode, variant_sentence
from app.web.params import storable
from app.web.render import render, secure
from app.web.service import ServiceDep
from app.web.sessions import PageError, Triager, Viewer

router = APIRouter(include_in_schema=False)
Text = Annotated[str | None, Query(max_length=2048)]
PER_PAGE = 50
BULK_LIMIT = 200


def _pick(value: str | None, allowed: list[str]) -> str | None:
    return value if value in allowed else None


@router.get("/flags")
def flags(
    request: Request,
    user: Viewer,
    service: ServiceDep,
    kind: Text = None,
    severity: Text = None,
    status: Text = "open",
    agent: Text = None,
    dialog: Text = None,
    assignee: Text = None,
    sort: Text = "oldest",
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
    done: Text = None,
) -> Response:
    filters = {
        "kind": _pick(kind, [k.value for k in FlagKind]),
        "severity": _pick(severity, [s.value for s in Severity]),
        "status": _pick(status, [s.value for s in FlagStatus]),
        "agent": (agent or "").strip() or None,
        "dialog": (dialog or "").strip() or None,
        "assignee": (assignee or "").strip() or None,
    }
    now = service.clock()
    service.sweep()
    with service.reading() as session:
        rows, total = dashboard.triage(
            session,
            now=now,
            oldest_first=sort != "newest",
            offset=(page - 1) * PER_PAGE,
            limit=PER_PAGE,
            **filters,
        )
        people = dashboard.assignees(session)
    query = {k: v for k, v in filters.items() if v}
    if status != "open":
        query["status"] = filters["status"] or "any"
    if sort == "newest":
        query["sort"] = "newest"
    context = {
        "nav": "flags",
        "now": now,
        "rows": rows,
        "total": total,
        "page": page,
        "pages": max(1, -(-total // PER_PAGE)),
        "filters": {k: v or "" for k, v in filters.items()},
        "sort": "newest" if sort == "newest" else "oldest",
        "query": urlencode(query),
        "kinds": [k.value for k in FlagKind],
        "severities": [s.value for s in Severity],
        "statuses": [s.value for s in FlagStatus],
        "people": people,
        "done": done,
        "can_triage": user.role.value in ("operator", "admin"),
    }
    return render(request, "flags.html", context)


def _until(text: str | None) -> int | None:
    """``YYYY-MM-DDTHH:MM`` (a datetime-local field, read as UTC) as NumericDate."""
    if not text:
        return None
    try:
        return calendar.timegm(time.strptime(text[:16], "%Y-%m-%dT%H:%M"))
    except ValueError as exc:
        raise PageError(422, "The snooze time must look like 2026-12-01T09:30 (UTC).") from exc


def _apply(
    service: Any, user: Any, ids: list[int], action: str, note: str, assignee: str, until: str
) -> int:
    try:
        chosen = FlagAction(action)
    except ValueError as exc:
        raise PageError(422, "Choose an action.") from exc
    if not ids:
        raise PageError(422, "Select at least one flag.")
    try:
        storable(note)
        storable(assignee)
    except ValueError as exc:
        raise PageError(422, "The note and assignee must be plain text (no NUL).") from exc
    if len(ids) > BULK_LIMIT:
        raise PageError(422, f"At most {BULK_LIMIT} flags at a time.")
    now = service.clock()
    snooze = _until(until) if chosen is FlagAction.SNOOZE else None

    def work(session: Any) -> int:
        for flag_id in ids:
            act_on_flag(
                session,
                flag_id=flag_id,
                actor=user.actor,
                action=chosen,
                now=now,
                note=note.strip() or None,
                assignee=(assignee.strip() or None) if chosen is FlagAction.ASSIGN else None,
                snoozed_until=snooze,
            )
        return len(ids)

    try:
        return db.run(service.engine, work)
    except FlagActionError as exc:
        raise PageError(422, str(exc)) from exc


def _back(target: str, done: str) -> Response:
    joiner = "&" if "?" in target else "?"
    return secure(RedirectResponse(f"{target}{joiner}{urlencode({'done': done})}", status_code=303))


def _safe_query(text: str) -> str:
    return text if text and "\n" not in text and "\r" not in text and len(text) < 2000 else ""


@router.post("/flags/bulk")
def bulk(
    user: Triager,
    service: ServiceDep,
    ids: Annotated[list[int], Form()] = [],  # noqa: B006 (FastAPI copies defaults)
    action: Annotated[str, Form(max_length=32)] = "",
    note: Annotated[str, Form(max_length=4000)] = "",
    assignee: Annotated[str, Form(max_length=200)] = "",
    until: Annotated[str, Form(max_length=40)] = "",
    back: Annotated[str, Form(max_length=2000)] = "",
) -> Response:
    done = _apply(
        service, user, [i for i in ids if 0 < i <= MAX_SAFE_INT], action, note, assignee, until
    )
    query = _safe_query(back)
    return _back("/flags" + (f"?{query}" if query else ""), f"{done} flag(s): {action}")


FlagId = Annotated[int, Path(ge=1, le=MAX_SAFE_INT)]


@router.post("/flags/{flag_id}/action")
def act(
    flag_id: FlagId,
    user: Triager,
    service: ServiceDep,
    action: Annotated[str, Form(max_length=32)] = "",
    note: Annotated[str, Form(max_length=4000)] = "",
    assignee: Annotated[str, Form(max_length=200)] = "",
    until: Annotated[str, Form(max_length=40)] = "",
) -> Response:
    _apply(service, user, [flag_id], action, note, assignee, until)
    return _back(f"/flags/{flag_id}", action)


@router.get("/flags/{flag_id}")
def flag_page(
    request: Request, flag_id: FlagId, user: Viewer, service: ServiceDep, done: Text = None
) -> Response:
    now = service.clock()
    service.sweep()
    with service.reading() as session:
        listing = get_flag(session, flag_id=flag_id, now=now)
        if listing is None:
            raise PageError(404, f"There is no flag {flag_id}.")
        f = listing.flag
        audit = flag_actions(session, flag_id=flag_id)
        digests = []
        for text in f.evidence:
            try:
                digests.append(parse_digest_text(text, what="evidence"))
            except MalformedError:
                continue
        stored = dashboard.elements(session, digests=digests)
        evidence = [stored[d] for d in digests if d in stored]
        hop = hop_for_offer(session, offer=f.offer) if f.offer is not None else None
        timeline = hop_elements(session, iss=f.iss, hop=f.hop) if hop is not None else []
        verdicts = {e.digest: dashboard.verdicts_of(session, digest=e.digest) for e in evidence}
        downstream = [
            (e, hop_for_offer(session, offer=e.digest))
            for e in evidence
            if e.type == "offer" and (f.offer is None or e.digest != f.offer)
        ]
    offers = [decode(e) for e in evidence if e.type == "offer" and e.hop == f.hop]
    pair = offers[:2] if f.kind == FlagKind.EQUIVOCATION.value and len(offers) >= 2 else None
    context = {
        "nav": "flags",
        "now": now,
        "flag": f,
        "status": listing.status,
        "audit": audit,
        "evidence": evidence,
        "decoded": {e.digest: decode(e) for e in evidence},
        "verdicts": verdicts,
        "hop": hop.hop if hop is not None else None,
        "timeline": timeline,
        "pair": pair,
        "members": compare(*pair) if pair else [],
        "variant_sentence": variant_sentence(f.variant),
        "downstream": downstream,
        "lost_after": service.settings.timing.lost_outcome_after,
        "done": done,
        "can_triage": user.role.value in ("operator", "admin"),
        "actions": [a.value for a in FlagAction],
    }
    return render(request, "flag.html", context)
