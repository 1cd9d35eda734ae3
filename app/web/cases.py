"""The case pages (docs/envelopes.md): ``/cases``, every case an envelope handoff named, and
``/cases/{case_id}``, one case's ownership timeline, its envelopes and its flags.

Like the other pages, routes only translate: the ledger, the reference outcomes and the
flags come from ``app.ingest.cases``; this module sorts them for reading (verified facts
apart from claimed ones) and never judges anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.ingest.cases import CaseDetail, Envelope, Fact, case_detail
from app.store.cases import list_cases
from app.web import charts
from app.web.render import render
from app.web.service import ServiceDep
from app.web.sessions import Viewer

router = APIRouter(include_in_schema=False)
Page = Annotated[int, Query(ge=1, le=1_000_000)]
Text = Annotated[str | None, Query(max_length=2048)]
PER_PAGE = 50
MAX_CASE_ID = 1024


@dataclass(frozen=True)
class EnvelopeView:
    """One envelope as the page shows it: its facts in two groups, so a claim can never
    be read as an established value."""

    envelope: Envelope
    verified: tuple[Fact, ...]
    claimed: tuple[Fact, ...]
    unsourced: int


def envelope_view(envelope: Envelope) -> EnvelopeView:
    verified = tuple(f for f in envelope.facts if f.verified)
    claimed = tuple(f for f in envelope.facts if not f.verified)
    unsourced = sum(1 for f in envelope.facts if not f.source)
    return EnvelopeView(envelope, verified, claimed, unsourced)


@router.get("/cases")
def cases(
    request: Request,
    user: Viewer,
    service: ServiceDep,
    q: Text = None,
    flagged: Text = None,
    page: Page = 1,
) -> Response:
    text = (q or "").strip() or None
    only_flagged = flagged in ("1", "on", "true")
    with service.reading() as session:
        found = list_cases(
            session,
            q=text,
            flagged=only_flagged,
            limit=PER_PAGE + 1,
            offset=(page - 1) * PER_PAGE,
        )
    context = {
        "nav": "cases",
        "now": service.clock(),
        "cases": found[:PER_PAGE],
        "page": page,
        "more": len(found) > PER_PAGE,
        "filters": {"q": text or "", "flagged": "1" if only_flagged else ""},
    }
    return render(request, "cases.html", context)


@router.get("/cases/{case_id:path}")
def case_page(request: Request, case_id: str, user: Viewer, service: ServiceDep) -> Response:
    detail: CaseDetail | None = None
    if len(case_id) <= MAX_CASE_ID:
        with service.reading() as session:
            detail = case_detail(session, case_id)
    if detail is None:
        context = {"nav": "cases", "now": service.clock(), "case_id": case_id[:MAX_CASE_ID]}
        return render(request, "case_missing.html", context, status=404)
    stale = [ev for ev in detail.events if charts.is_stale(ev, detail.epochs)]
    context = {
        "nav": "cases",
        "now": service.clock(),
        "case": detail,
        "figure": charts.case_figure(detail),
        "envelopes": [envelope_view(e) for e in detail.envelopes],
        "stale": stale,
        "open_flags": [f for f in detail.flags if f.status != "resolved"],
    }
    return render(request, "case.html", context)
