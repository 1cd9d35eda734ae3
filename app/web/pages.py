"""The dashboard's read pages (server-rendered Jinja2 + htmx): overview, dialogs, hops,
agents, trust and search; ``install`` adds every dashboard router to the app.

Routes only translate: query parameters in, store reads (``app.store.queries``,
``app.store.dashboard``) out to a template. Nothing here verifies or writes SQL. Filters
and paging live in the URL, so every view is a deep link and the back button works.
"""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import RedirectResponse, Response
from handoff_context import (
    A2A_STATE,
    OFFER_CHECKS,
    STATUS_CHECKS,
    HopState,
    digest_text,
    parse_digest_text,
)
from handoff_context.errors import MalformedError
from starlette.exceptions import HTTPException

from app.store import dashboard, key_history
from app.store.cases import list_cases
from app.store.queries import (
    get_element,
    get_flag,
    hop_elements,
    hop_for_offer,
    list_agents,
    list_dialogs,
    list_flags,
)
from app.store.rejected import filed_under, get_refused, receipts_of, refused_of_hop
from app.web import charts
from app.web.render import render, secure
from app.web.service import Service, ServiceDep
from app.web.sessions import (
    LoginRequired,
    PageError,
    Viewer,
    login_redirect,
    not_found,
    page_error,
)

router = APIRouter(include_in_schema=False)
Page = Annotated[int, Query(ge=1, le=1_000_000)]
Text = Annotated[str | None, Query(max_length=2048)]
PER_PAGE = 50


def _none(value: str | None) -> str | None:
    return value.strip() or None if value else None


def _read(service: Service) -> Any:
    service.sweep()
    return service.reading()


# --- overview ---------------------------------------------------------------------------


@router.get("/")
def overview(request: Request, user: Viewer, service: ServiceDep) -> Response:
    # The store's clock judges snoozes; the "as of" line is the wall clock, so each refresh
    # of the live block shows that it really was read again.
    now = service.clock()
    with _read(service) as session:
        states = dashboard.hop_states(session)
        flag_counts = dashboard.open_flag_counts(session, now=now)
        figure = charts.activity_figure(dashboard.activity(session))
        agents = sorted(list_agents(session), key=lambda a: -(a.issued + a.received))[:8]
        rejected = dashboard.latest_rejections(session, limit=8)
    severities = {"critical": 0, "high": 0, "medium": 0, "low": 0}
    for _, severity, n in flag_counts:
        severities[severity] = severities.get(severity, 0) + n
    context = {
        "nav": "overview",
        "now": now,
        "states": [(s.value, states.get(s.value, 0)) for s in HopState],
        "hop_total": sum(states.values()),
        "flag_counts": flag_counts,  # worst severity first (dashboard.open_flag_counts)
        "severities": severities,
        "figure": figure,
        "read_at": int(time.time()),
        "agents": agents,
        "rejected": rejected,
    }
    return render(request, "overview.html", context)


# --- dialogs ----------------------------------------------------------------------------


@router.get("/dialogs")
def dialogs(request: Request, user: Viewer, service: ServiceDep, after: Text = None) -> Response:
    with _read(service) as session:
        found = list_dialogs(session, after=_none(after), limit=PER_PAGE + 1)
        shown = found[:PER_PAGE]
        states = dashboard.dialog_states(session, dialogs=[d.dialog for d in shown])
    following = shown[-1].dialog if len(found) > PER_PAGE else None
    context = {
        "nav": "dialogs",
        "now": service.clock(),
        "dialogs": shown,
        "states": states,
        "following": following,
        "after": _none(after),
        "colours": charts.STATE_COLOURS,
    }
    return render(request, "dialogs.html", context)


# --- hops -------------------------------------------------------------------------------


@router.get("/hops")
def hops(
    request: Request,
    user: Viewer,
    service: ServiceDep,
    state: Text = None,
    agent: Text = None,
    dialog: Text = None,
    page: Page = 1,
) -> Response:
    state = _none(state)
    if state == "unresolved":
        states: tuple[str, ...] = dashboard.UNRESOLVED
    elif state in {s.value for s in HopState}:
        states = (state,) if state else ()
    else:
        state, states = None, ()
    with _read(service) as session:
        found, total = dashboard.find_hops(
            session,
            states=states,
            agent=_none(agent),
            dialog=_none(dialog),
            offset=(page - 1) * PER_PAGE,
            limit=PER_PAGE,
        )
    context = {
        "nav": "unresolved" if state == "unresolved" else "hops",
        "now": service.clock(),
        "hops": found,
        "total": total,
        "more": total > dashboard.COUNT_CAP,
        "cap": dashboard.COUNT_CAP,
        "page": page,
        "pages": max(1, -(-min(total, dashboard.COUNT_CAP) // PER_PAGE)),
        "filters": {
            "state": state or "",
            "agent": _none(agent) or "",
            "dialog": _none(dialog) or "",
        },
        "state_names": [s.value for s in HopState],
    }
    return render(request, "hops.html", context)


def _digest(text: str) -> bytes:
    try:
        return parse_digest_text(text, what="offer digest")
    except MalformedError as exc:
        raise PageError(404, "That is not an offer digest (43 characters of base64url).") from exc


@router.get("/hops/{offer_digest}")
def hop_page(request: Request, offer_digest: str, user: Viewer, service: ServiceDep) -> Response:
    offer = _digest(offer_digest)
    now = service.clock()
    with _read(service) as session:
        listing = hop_for_offer(session, offer=offer)
        if listing is None:
            return _element_page(request, service, session, offer)
        h = listing.hop
        stored = hop_elements(session, iss=h.iss, hop=h.hop)
        judged = {e.digest: dashboard.verdicts_of(session, digest=e.digest) for e in stored}
        flags = list_flags(session, now=now, iss=h.iss, hop=h.hop)
        refused = refused_of_hop(session, iss=h.iss, hop=h.hop)
        aimed = dashboard.filed_elsewhere(session, offer=h.offer, iss=h.iss, hop=h.hop)
        judged.update({e.digest: dashboard.verdicts_of(session, digest=e.digest) for e in aimed})
        parent, below = dashboard.hop_neighbours(session, offer=h.offer)
        parent_hop = None if parent is None else hop_for_offer(session, offer=parent)
    from app.web.evidence import decode

    offers = [e for e in stored if e.type == "offer"]
    statuses = [e for e in stored if e.type == "status"]
    canonical = next((e for e in offers if e.digest == h.offer), offers[0] if offers else None)
    context = {
        "nav": "hops",
        "now": now,
        "hop": h,
        "flags_open": listing.flags,
        "a2a": A2A_STATE.get(HopState(h.state)),
        "offer": canonical,
        "decoded": None if canonical is None else decode(canonical),
        "payloads": {e.digest: decode(e).payload for e in stored},
        "other_offers": [e for e in offers if canonical is None or e.digest != h.offer],
        "statuses": statuses,
        "judged": judged,
        "flags": flags,
        "refused": refused,
        "aimed": aimed,
        "parent": parent,
        "parent_hop": parent_hop,
        "below": below,
        "offer_checks": OFFER_CHECKS,
        "status_checks": STATUS_CHECKS,
        "trusted": {h.iss: h.iss in service.trust, h.aud: h.aud in service.trust},
    }
    return render(request, "hop.html", context)


def _element_page(request: Request, service: Service, session: Any, digest: bytes) -> Response:
    """A stored element that belongs to no hop (a rejected offer, a status whose offer is
    unknown): its verdicts, decoded payload and octets, and the flags that name it."""
    from app.web.evidence import decode

    row = get_element(session, digest=digest)
    if row is None:
        return _refused_page(request, service, session, digest)
    flags = [
        f
        for f in list_flags(session, now=service.clock(), iss=row.hop_iss, hop=row.hop)
        if digest_text(digest) in f.flag.evidence
    ]
    context = {
        "nav": "hops",
        "now": service.clock(),
        "element": row,
        "decoded": decode(row),
        "payloads": {row.digest: decode(row).payload},
        "judged": {row.digest: dashboard.verdicts_of(session, digest=row.digest)},
        "flags": flags,
        "hop_offer": None,
        "show_payload": False,
    }
    return render(request, "element.html", context)


def _refused_page(request: Request, service: Service, session: Any, digest: bytes) -> Response:
    """Octets refused before they became an element (malformed, a key in the header): each
    receipt's verdict, the octets, and the flags that name them."""
    row = get_refused(session, digest=digest)
    if row is None:
        raise PageError(404, "No stored hop or element has that digest.")
    flags = []
    if row.hop_iss is not None and row.hop is not None:
        found = list_flags(session, now=service.clock(), iss=row.hop_iss, hop=row.hop)
        flags = [f for f in found if digest_text(digest) in f.flag.evidence]
    context = {
        "nav": "hops",
        "now": service.clock(),
        "refused": row,
        "receipts": receipts_of(session, digest=digest),
        "flags": flags,
        "hop_offer": filed_under(session, row),
    }
    return render(request, "refused.html", context)


@router.get("/elements/{digest}")
def element_octets(
    digest: str,
    user: Viewer,
    service: ServiceDep,
    download: Annotated[int, Query(ge=0, le=1)] = 0,
) -> Response:
    """A stored element's signed octets (the API's ``/api/v1/elements`` route takes a bearer
    token; this one the dashboard session). A JWS is shown in the browser as text (its
    compact form is ASCII); a COSE element is binary, so a browser is sent to its page,
    which shows it decoded with a download link; ``?download=1`` is always a download."""
    wanted = _digest(digest)
    with service.reading() as session:
        row = get_element(session, digest=wanted)
    if row is None:
        raise PageError(404, "No element has that digest.")
    name = f"{digest_text(row.digest)}.{row.form}"
    if row.form == "jws" and not download:
        headers = {"Content-Disposition": f'inline; filename="{name}"'}
        return secure(
            Response(row.octets, media_type="text/plain; charset=us-ascii", headers=headers)
        )
    if not download:
        target = f"/hops/{digest_text(row.digest)}"
        return secure(RedirectResponse(target, status_code=303))
    media = "application/jose" if row.form == "jws" else "application/cose"
    headers = {"Content-Disposition": f'attachment; filename="{name}"'}
    return secure(Response(row.octets, media_type=media, headers=headers))


# --- agents, trust, search ----------------------------------------------------------------


@router.get("/agents")
def agents(request: Request, user: Viewer, service: ServiceDep) -> Response:
    now = service.clock()
    with _read(service) as session:
        listed = list_agents(session)
        signed, flagged = dashboard.agent_counts(session, now=now)
    rows = [
        {
            "agent": a.agent,
            "issued": a.issued,
            "received": a.received,
            "signed": signed.get(a.agent, 0),
            "flags": flagged.get(a.agent, 0),
            "keys": service.trust.keys_for(a.agent) or (),
        }
        for a in listed
    ]
    context = {"nav": "agents", "now": now, "rows": rows}
    return render(request, "agents.html", context)


@router.get("/trust")
def trust(request: Request, user: Viewer, service: ServiceDep) -> Response:
    with service.reading() as session:
        seen = {a.agent for a in list_agents(session)}
        events = key_history.recent_events(session, limit=50)
    trust = service.trust
    sources = service.sources
    # Listed keys (the trust file's issuers) here; the sources' keys below, with their
    # windows, since one source key may speak for many identifiers.
    issuers = sorted(
        (ident, tuple(k for k in keys if k.source is None)) for ident, keys in trust.issuers.items()
    )
    context = {
        "nav": "trust",
        "now": service.clock(),
        "issuers": [(ident, keys) for ident, keys in issuers if keys],
        "seen": seen,
        "unknown": sorted(a for a in seen if a not in trust),
        "fingerprint": trust.fingerprint,
        "trust_file": service.settings.trust_file,
        "sources": sources.status(),
        "windows": sources.windows(),
        "revocations": sources.revocations(),
        "events": events,
    }
    return render(request, "trust.html", context)


@router.get("/search")
def search(request: Request, user: Viewer, service: ServiceDep, q: Text = None) -> Response:
    text = (q or "").strip()
    found = None
    cases: list[Any] = []
    if text:
        with service.reading() as session:
            # An exact offer digest goes straight to its hop.
            if len(text) == 43:
                try:
                    listing = hop_for_offer(session, offer=parse_digest_text(text, what="q"))
                except MalformedError:
                    listing = None
                if listing is not None:
                    return secure(RedirectResponse(f"/hops/{text}", status_code=303))
            # An OTLP trace id goes to its dialog, a span id to its hop (docs/otlp.md).
            found_trace = _trace_target(session, text)
            if found_trace is not None:
                return secure(RedirectResponse(found_trace, status_code=303))
            # A flag number (#145 or 145) goes straight to its flag.
            number = text.removeprefix("#")
            if number.isdigit() and len(number) < 16:
                flag = get_flag(session, flag_id=int(number), now=service.clock())
                if flag is not None:
                    return secure(RedirectResponse(f"/flags/{int(number)}", status_code=303))
            found = dashboard.search(session, text=text)
            cases = list_cases(session, q=text, limit=20)
    context = {"nav": "", "now": service.clock(), "q": text, "found": found, "cases": cases}
    return render(request, "search.html", context)


def _trace_target(session: Any, text: str) -> str | None:
    """Where an OTLP trace id (32 hex digits: a dialog) or span id (16: a hop's offer) of
    the export leads, if the store holds it (app/otlp/ids.py)."""
    from app.otlp.ids import SPAN_ID_HEX, TRACE_ID_HEX, trace_id
    from app.store.otlp import dialog_for_trace, hops_for_span

    hexed = text.lower()
    if TRACE_ID_HEX.fullmatch(hexed):
        dialog = dialog_for_trace(session, bytes.fromhex(hexed), trace_id)
        return None if dialog is None else f"/dialogs/{quote(dialog)}"
    if SPAN_ID_HEX.fullmatch(hexed):
        hops = hops_for_span(session, bytes.fromhex(hexed), limit=2)
        return f"/hops/{digest_text(hops[0].offer)}" if len(hops) == 1 else None
    return None


# --- installation ----------------------------------------------------------------------


def install(app: FastAPI) -> None:
    """Add the dashboard to the app: pages, login, static files and their error pages."""
    from app.web import (
        actions,
        assets,
        cases,
        dialogs,
        notifications,
        oidc,
        sessions,
        triage,
        upload,
    )

    app.include_router(sessions.router)
    app.include_router(oidc.router)
    app.include_router(router)
    app.include_router(dialogs.router)
    app.include_router(cases.router)
    app.include_router(triage.router)
    app.include_router(actions.router)
    app.include_router(notifications.router)
    app.include_router(upload.router)
    app.include_router(assets.router)
    app.add_exception_handler(LoginRequired, login_redirect)
    app.add_exception_handler(PageError, page_error)
    # After errors.install: an unknown route gets the designed page in a browser.
    app.add_exception_handler(HTTPException, not_found)
