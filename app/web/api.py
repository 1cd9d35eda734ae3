"""The JSON API under ``/api/v1`` (issue 3, section 4; profile §11 and §12).

Routes only translate: HTTP in, the ingest pipeline or a store query, HTTP out. Nothing
here verifies or writes SQL. Who may call what is in ``app.web.auth``; how errors look is
in ``app.web.errors``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from handoff_context import MAX_SAFE_INT, HopState, Verdict
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from app.envelope.flags import FlagKind
from app.ingest.cases import case_detail
from app.ingest.pipeline import IngestReport, ingest
from app.store import db
from app.store.cases import list_cases
from app.store.queries import (
    FlagActionError,
    FlagStatus,
    act_on_flag,
    dialog_tree,
    flag_actions,
    get_element,
    get_flag,
    hop_elements,
    hop_for_offer,
    list_agents,
    list_dialogs,
    list_flags,
    list_hops,
    store_counts,
)
from app.web import answers, metrics
from app.web.auth import (
    Credentials,
    CurrentOperator,
    Ingester,
    Permission,
    Reader,
    TrustAdmin,
    VerifyCaller,
    requires,
)
from app.web.errors import RETRY_AFTER, ApiError, documented
from app.web.observe import observe_ingest
from app.web.params import (
    CAPTURE_BODY,
    Cursor,
    DigestPath,
    Limit,
    Text,
    VerifyQuery,
    decode_cursor,
    paginate,
    parse_digest,
    read_capture,
    reject_unknown_query,
)
from app.web.schemas import (
    AgentList,
    AgentPublic,
    CaseDetailPublic,
    CasePage,
    CasePublic,
    DialogPage,
    DialogPublic,
    DialogTree,
    ElementPublic,
    FlagDetail,
    FlagPage,
    FlagPublic,
    FlagUpdate,
    Health,
    HopDetail,
    HopPage,
    HopPublic,
    IngestResponse,
    Readiness,
    RevocationCreate,
    RevocationPublic,
    VerifyResponse,
)
from app.web.service import ServiceDep, get_service

router = APIRouter(prefix="/api/v1", dependencies=[Depends(reject_unknown_query)])
_ERRORS = documented(401, 403, 422, 503)
# Elements travel with these media types (RFC 7515 section 9.2.1; RFC 9052 section 9).
ELEMENT_TYPES = {"jws": "application/jose", "cose": "application/cose"}


# --- ingest and verify (profile §11, §12) ----------------------------------------------------

# JSON ingests a worker runs at once; the others wait their turn in their worker thread.
# With more, the one that holds SQLite's write lock (or a PostgreSQL batch's locks) shares
# the worker's GIL with the others' parsing and waits for it while holding the lock: two
# gave 5 to 30 % more elements/s and a third lower p99 than eight, and one more again
# than two, with less CPU per element (the other worker prepares while this one writes;
# BENCHMARKS.md, "HTTP ingest"). NDJSON answers are not limited: a slow reader of its
# stream would hold a turn.
INGESTS_PER_WORKER = 1
_INGESTS = threading.BoundedSemaphore(INGESTS_PER_WORKER)


@router.post(
    "/ingest",
    response_model=IngestResponse,
    responses={
        **documented(401, 403, 413, 415, 422),
        503: {
            "model": IngestResponse,
            "description": "Not everything was stored: the database could not be written (or "
            "is not answering). The answer lists what was (``verdicts``) and what was not "
            "(``errors``, ``not_stored_from``); send that again after ``Retry-After``.",
        },
    },
    openapi_extra=CAPTURE_BODY,
    summary="Verify a capture file and store it",
    tags=["ingest"],
)
async def post_ingest(
    request: Request, who: Ingester, service: ServiceDep, params: VerifyQuery
) -> Response:
    """Verify every element of the capture (profile §6, §7, §5) and store it: elements, receipts,
    verdicts, hop states and flags. One verdict per element, in input order (profile §11).

    **200 means stored**: every item was committed (or refused, with its verdict, which is
    stored as evidence). When anything was not stored the answer is **503** with
    ``Retry-After``, and still says what became of each item: a verdict listed was stored;
    ``errors`` names the items the database did not store; ``not_stored_from`` names the
    first capture record from which on nothing was stored, when the database could not be
    written at all (an outage, a full disk, a read-only database) and the request stopped
    there. A bad item never spoils the rest: it gets its verdict.

    Bounded: ``verdicts`` lists every verdict while there are at most 1,000 in 1 MiB; past
    that only those that are not ``accept``, within the same bounds, and
    ``verdicts_omitted`` counts the rest (``counts`` covers all). ``Accept:
    application/x-ndjson`` streams every verdict instead, one a line, then one
    ``{"summary": ...}`` line with the rest of this answer and ``"status"``.

    Observation ids: a capture record may carry ``"id"`` (1 to 128 printable ASCII
    characters, unique per sender, e.g. a UUID; the handoff-context ``Reporter`` sets one).
    Each id is stored once: a record whose id is already stored is skipped, counted in
    ``counts.redelivered``, and gets no verdict, so a batch retried after a lost answer is
    stored once and never counted as a retransmission."""
    try:
        body, media = await read_capture(request, service.settings.max_request_bytes)
    except ApiError as exc:  # PayloadTooLarge among them
        metrics.count_ingest("ingest", exc.status)
        raise
    now = service.clock()
    pipeline = service.pipeline(params.options(service.settings, now=now))

    def summary(report: IngestReport) -> dict[str, Any]:
        return {
            "counts": report.counts,
            "errors": answers.problems(report.errors),
            "envelope_errors": answers.problems(report.envelopes.errors, mark=True),
            "stored": report.complete,
            "not_stored_from": report.cut,
        }

    if _wants_ndjson(request):
        # The status line goes out before the work: only the final summary line says
        # whether everything was stored. A database that cannot be written now gets its
        # 503 before anything is streamed.
        try:
            await run_in_threadpool(service.ready)
        except Exception as exc:
            raise _not_stored("the database cannot be written now") from exc

        def stream(lines: answers.Lines) -> None:
            report = ingest(
                pipeline, [("request", body)], now=now, content_type=media, on_verdict=lines.verdict
            )
            observe_ingest("ingest", report, 200 if report.complete else 503)
            lines.end({"summary": summary(report)})

        return _ndjson(stream)

    def answer() -> tuple[IngestReport, bytes]:
        listing = answers.Listing()
        with _INGESTS:
            report = ingest(
                pipeline, [("request", body)], now=now, content_type=media, on_verdict=listing.add
            )
        return report, listing.body(summary(report))

    report, content = await run_in_threadpool(answer)
    status = 200 if report.complete else 503
    observe_ingest("ingest", report, status)
    headers = {} if status == 200 else {"Retry-After": str(RETRY_AFTER)}
    return Response(content, status_code=status, media_type="application/json", headers=headers)


def _wants_ndjson(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return any(part.split(";")[0].strip() == answers.NDJSON for part in accept.split(","))


def _not_stored(message: str) -> ApiError:
    return ApiError(503, message, code="not-stored", headers={"Retry-After": str(RETRY_AFTER)})


def _ndjson(work: Callable[[answers.Lines], None]) -> StreamingResponse:
    """Run ``work`` in a worker thread, streaming the lines it makes as they come."""
    lines = answers.Lines()

    def run() -> None:
        try:
            work(lines)
        except answers.ClientGone:
            return
        except BaseException:
            lines.close()
            raise

    async def body() -> AsyncIterator[bytes]:
        task = asyncio.ensure_future(run_in_threadpool(run))
        try:
            while (chunk := await run_in_threadpool(lines.next_chunk)) is not None:
                yield chunk
        finally:
            lines.close()
            await task

    return StreamingResponse(body(), media_type=answers.NDJSON)


def _status_of(exc: Exception) -> int:
    return int(getattr(exc, "status", None) or getattr(exc, "status_code", 0))


@router.post(
    "/verify",
    response_model=VerifyResponse,
    responses=documented(401, 403, 413, 415, 422, 503),
    openapi_extra=CAPTURE_BODY,
    summary="Verify a capture file; store nothing",
    tags=["ingest"],
)
async def post_verify(
    request: Request, who: VerifyCaller, service: ServiceDep, params: VerifyQuery
) -> Response:
    """What ``handoff-trace verify --json`` says about the capture: one replay memory for
    the request, nothing read from or written to the store. Bounded as ``/ingest`` is
    (``verdicts_omitted``), or streamed as NDJSON when asked."""
    try:
        body, media = await read_capture(request, service.settings.max_request_bytes)
    except ApiError as exc:  # PayloadTooLarge among them
        metrics.count_ingest("verify", exc.status)
        raise
    options = params.options(service.settings, now=service.clock())

    if _wants_ndjson(request):

        def stream(lines: answers.Lines) -> None:
            listing = answers.Listing()  # counts only: nothing is listed from it

            def each(verdict: Verdict) -> None:
                listing.outcomes[verdict.outcome.value] += 1
                lines.verdict(verdict)

            report = service.verify(
                [("request", body)], options, content_type=media, on_verdict=each
            )
            metrics.count_ingest("verify", 200, listing.outcomes)
            lines.end({"summary": {"counts": listing.counts(report.skipped)}})

        return _ndjson(stream)

    def answer() -> bytes:
        listing = answers.Listing()
        report = service.verify(
            [("request", body)], options, content_type=media, on_verdict=listing.add
        )
        metrics.count_ingest("verify", 200, listing.outcomes)
        return listing.body({"counts": listing.counts(report.skipped)})

    content = await run_in_threadpool(answer)
    return Response(content, media_type="application/json")


# --- hops and dialogs -------------------------------------------------------------------


@router.get(
    "/hops", response_model=HopPage, responses=documented(401, 403, 422, 503), tags=["hops"]
)
def get_hops(
    who: Reader,
    service: ServiceDep,
    state: HopState | None = None,
    flag: Annotated[FlagKind | None, Query(description="only hops with an unresolved flag")] = None,
    dialog: Text = None,
    agent: Annotated[
        str | None, Query(min_length=1, max_length=2048, description="iss or aud")
    ] = None,
    since: Annotated[int | None, Query(ge=0, le=MAX_SAFE_INT, description="offer iat >=")] = None,
    until: Annotated[int | None, Query(ge=0, le=MAX_SAFE_INT, description="offer iat <=")] = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> HopPage:
    """Hops in (iat, iss, hop) order, with keyset pagination: pass ``next`` as ``cursor``."""
    after = decode_cursor(cursor, (int, str, str))
    service.sweep()
    with service.reading() as session:
        listings = list_hops(
            session,
            state=state,
            flag=flag,
            dialog=dialog,
            agent=agent,
            since=since,
            until=until,
            after=None if after is None else tuple(after),  # type: ignore[arg-type]
            limit=limit + 1,
        )
    shown, following = paginate(listings, limit, lambda h: [h.hop.iat, h.hop.iss, h.hop.hop])
    return HopPage(hops=[HopPublic.from_listing(h) for h in shown], next=following)


@router.get(
    "/hops/{offer_digest}",
    response_model=HopDetail,
    responses=documented(401, 403, 404, 422, 503),
    tags=["hops"],
)
def get_hop_detail(who: Reader, service: ServiceDep, offer_digest: DigestPath) -> HopDetail:
    """The hop of an offer (its canonical offer, or any other offer signed for it), with
    its stored elements and every flag."""
    offer = parse_digest(offer_digest)
    service.sweep()
    with service.reading() as session:
        listing = hop_for_offer(session, offer=offer)
        if listing is None:
            raise ApiError(404, f"no hop has the offer {offer_digest}")
        h = listing.hop
        elements = hop_elements(session, iss=h.iss, hop=h.hop)
        flags = list_flags(session, now=service.clock(), iss=h.iss, hop=h.hop)
    return HopDetail.model_validate(
        {
            **HopPublic.from_listing(listing).model_dump(),
            "elements": [ElementPublic.from_row(e) for e in elements],
            "flag_details": [FlagPublic.from_listing(f) for f in flags],
        }
    )


@router.get(
    "/dialogs",
    response_model=DialogPage,
    responses=documented(401, 403, 422, 503),
    tags=["hops"],
)
def get_dialogs(
    who: Reader, service: ServiceDep, limit: Limit = 100, cursor: Cursor = None
) -> DialogPage:
    """Dialogs with hops, in dialog order, with keyset pagination."""
    after = decode_cursor(cursor, (str,))
    with service.reading() as session:
        summaries = list_dialogs(
            session, after=None if after is None else after[0], limit=limit + 1
        )
    shown, following = paginate(summaries, limit, lambda d: [d.dialog])
    return DialogPage(dialogs=[DialogPublic.from_summary(d) for d in shown], next=following)


@router.get(
    "/dialogs/{dialog:path}",
    response_model=DialogTree,
    responses=documented(401, 403, 404, 422, 503),
    tags=["hops"],
)
def get_dialog(
    who: Reader, service: ServiceDep, dialog: Annotated[str, Path(min_length=1, max_length=1024)]
) -> DialogTree:
    """The hops of one dialog as a tree (profile §7 chain links): ``roots`` and, per node, its
    ``parent`` and ``children`` offers."""
    service.sweep()
    with service.reading() as session:
        nodes = dialog_tree(session, dialog=dialog)
    if not nodes:
        raise ApiError(404, "no hop in that dialog")
    return DialogTree.from_nodes(dialog, nodes)


@router.get("/agents", response_model=AgentList, responses=_ERRORS, tags=["hops"])
def get_agents(who: Reader, service: ServiceDep) -> AgentList:
    """Every identifier that issued or received a hop, and whether the trust configuration
    knows its keys."""
    with service.reading() as session:
        agents = list_agents(session)
    return AgentList(
        agents=[AgentPublic.from_summary(a, trusted=a.agent in service.trust) for a in agents]
    )


@router.get(
    "/elements/{digest}",
    response_class=Response,
    responses={
        200: {
            "description": "The element's octets exactly as received",
            "content": {
                "application/jose": {"schema": {"type": "string"}},
                "application/cose": {"schema": {"type": "string", "format": "binary"}},
            },
        },
        **documented(401, 403, 404, 422, 503),
    },
    tags=["hops"],
)
def get_element_octets(who: Reader, service: ServiceDep, digest: DigestPath) -> Response:
    """The signed element with this handoff digest, byte for byte as first received:
    ``application/jose`` (JWS compact) or ``application/cose`` (COSE_Sign1)."""
    wanted = parse_digest(digest)
    with service.reading() as session:
        row = get_element(session, digest=wanted)
    if row is None:
        raise ApiError(404, f"no element has the digest {digest}")
    # Elements are append-only, so a digest's octets never change.
    headers = {"Cache-Control": "private, max-age=31536000, immutable"}
    return Response(row.octets, media_type=ELEMENT_TYPES[row.form], headers=headers)


# --- envelope cases (docs/envelopes.md) --------------------------------------------------


@router.get(
    "/cases", response_model=CasePage, responses=documented(401, 403, 422, 503), tags=["cases"]
)
def get_cases(
    who: Reader,
    service: ServiceDep,
    q: Annotated[str | None, Query(min_length=1, max_length=2048, description="in case id")] = None,
    flagged: Annotated[bool, Query(description="only cases with an open flag")] = False,
    limit: Limit = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_SAFE_INT)] = 0,
) -> CasePage:
    """Envelope cases, most recent activity first, with their owner and epoch by the
    ownership ledger."""
    service.sweep()
    with service.reading() as session:
        found = list_cases(session, q=q, flagged=flagged, limit=limit + 1, offset=offset)
    following = offset + limit if len(found) > limit else None
    return CasePage(
        cases=[CasePublic.from_summary(c) for c in found[:limit]], next_offset=following
    )


@router.get(
    "/cases/{case_id:path}",
    response_model=CaseDetailPublic,
    responses=documented(401, 403, 404, 422, 503),
    tags=["cases"],
)
def get_case(
    who: Reader, service: ServiceDep, case_id: Annotated[str, Path(min_length=1, max_length=2048)]
) -> CaseDetailPublic:
    """One case: its ownership epochs, the timeline of handoffs, acceptances and case
    events, each envelope with its facts and reference outcomes, and its flags."""
    service.sweep()
    with service.reading() as session:
        detail = case_detail(session, case_id)
        if detail is None:
            raise ApiError(404, "no such case")
        flags = list_flags(session, now=service.clock(), case_id=case_id)
    return CaseDetailPublic.from_detail(detail, flags)


# --- flags ------------------------------------------------------------------------------


@router.get(
    "/flags", response_model=FlagPage, responses=documented(401, 403, 422, 503), tags=["flags"]
)
def get_flags(
    who: Reader,
    service: ServiceDep,
    kind: FlagKind | None = None,
    status: Annotated[FlagStatus | None, Query(description="as of now")] = None,
    iss: Text = None,
    hop: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    case_id: Annotated[str | None, Query(min_length=1, max_length=2048)] = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> FlagPage:
    """Flags in id order, with keyset pagination."""
    after = decode_cursor(cursor, (int,))
    service.sweep()
    with service.reading() as session:
        listings = list_flags(
            session,
            now=service.clock(),
            kind=kind,
            status=status,
            iss=iss,
            hop=hop,
            case_id=case_id,
            after=None if after is None else after[0],
            limit=limit + 1,
        )
    shown, following = paginate(listings, limit, lambda f: [f.flag.id])
    return FlagPage(flags=[FlagPublic.from_listing(f) for f in shown], next=following)


FlagId = Annotated[int, Path(ge=1, le=MAX_SAFE_INT)]


@router.get(
    "/flags/{flag_id}",
    response_model=FlagDetail,
    responses=documented(401, 403, 404, 422, 503),
    tags=["flags"],
)
def get_flag_detail(who: Reader, service: ServiceDep, flag_id: FlagId) -> FlagDetail:
    """One flag and its audit log."""
    service.sweep()
    with service.reading() as session:
        listing = get_flag(session, flag_id=flag_id, now=service.clock())
        if listing is None:
            raise ApiError(404, f"no flag {flag_id}")
        actions = flag_actions(session, flag_id=flag_id)
    return FlagDetail.from_parts(listing, actions)


@router.patch(
    "/flags/{flag_id}",
    response_model=FlagDetail,
    responses=documented(401, 403, 404, 413, 422, 503),
    tags=["flags"],
)
def patch_flag(
    who: CurrentOperator, service: ServiceDep, flag_id: FlagId, update: FlagUpdate
) -> FlagDetail:
    """Acknowledge, resolve (with a note), reopen, assign, snooze or annotate a flag. The
    action is written to the flag's audit log with who (``token:NAME``) and when."""
    now = service.clock()

    def work(session: Session) -> FlagDetail:
        if get_flag(session, flag_id=flag_id, now=now) is None:
            raise ApiError(404, f"no flag {flag_id}")
        try:
            listing = act_on_flag(
                session,
                flag_id=flag_id,
                actor=f"token:{who.name}",
                action=update.action,
                now=now,
                note=update.note,
                assignee=update.assignee,
                snoozed_until=update.snoozed_until,
            )
        except FlagActionError as exc:
            raise ApiError(422, str(exc), code="invalid-action") from exc
        return FlagDetail.from_parts(listing, flag_actions(session, flag_id=flag_id))

    return db.run(service.engine, work)


# --- trust (issue 21) --------------------------------------------------------------------


@router.post(
    "/trust/revocations",
    response_model=RevocationPublic,
    status_code=201,
    responses=documented(401, 403, 413, 422, 503),
    tags=["trust"],
)
def post_revocation(
    who: TrustAdmin, service: ServiceDep, revocation: RevocationCreate
) -> RevocationPublic:
    """Revoke a key from ``at`` on, on every instance (admin tokens only). It is written to
    the trust audit log; new elements under the key are ``untrusted-key`` at once, and the
    store is judged again within a trust check (stored elements issued after ``at`` get a
    ``rejected-element`` flag; those before are untouched)."""
    done = service.revoke(
        at=service.clock() if revocation.at is None else revocation.at,
        thumbprint=revocation.thumbprint,
        kid=revocation.kid,
        reason=revocation.reason,
        actor=f"token:{who.name}",
    )
    return RevocationPublic(
        thumbprint=done.thumbprint, kid=done.kid, at=done.at, reason=done.reason, by=done.by
    )


# --- the service itself -----------------------------------------------------------------


@router.get("/healthz", response_model=Health, tags=["service"])
async def healthz() -> Health:
    """Liveness: the process answers. Anonymous. Answered on the event loop itself, with no
    hop to a worker thread: while a large request's work holds the GIL in a worker, each such
    hop waits for a switch interval, and a liveness probe should not."""
    return Health(status="ok")


@router.get("/readyz", response_model=Readiness, responses=documented(503), tags=["service"])
def readyz(request: Request) -> Readiness:
    """Readiness: the database answers and takes a write (a small probe write, and on an
    SQLite file enough free disk), and the trust configuration is loaded, with its
    fingerprint (so a rollout can see every instance on the new trust file). Not ready
    while the database cannot be written (an outage, a full disk, read-only), ready again
    as soon as a probe succeeds. Anonymous: it says nothing else."""
    service = get_service(request)
    try:
        service.ready()
    except Exception as exc:
        raise ApiError(
            503, "the database does not answer or cannot be written", code="not-ready"
        ) from exc
    return Readiness(
        status="ready", database="ok", trust="loaded", trust_fingerprint=service.trust.fingerprint
    )


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition format 0.0.4",
            "content": {metrics.CONTENT_TYPE: {"schema": {"type": "string"}}},
        },
        **_ERRORS,
    },
    tags=["service"],
)
def get_metrics(request: Request, service: ServiceDep, credentials: Credentials) -> Response:
    """Request, latency and ingest counters (summed over this instance's workers), process
    metrics, and gauges read from the database (the same on every instance). Needs a token
    of any role unless HANDOFF_TRACE_METRICS_REQUIRE_TOKEN is false."""
    if service.settings.metrics_require_token:
        requires(Permission.METRICS)(request, service, credentials)
    with service.reading() as session:
        counts = store_counts(session, now=service.clock())
    exporter = getattr(request.app.state, "otlp_exporter", None)
    body = metrics.exposition(
        counts,
        workers=request.app.state.metrics_multiprocess,
        sources=service.sources.status(),
        otlp=None if exporter is None else exporter.status(),
    )
    return Response(body, media_type=metrics.CONTENT_TYPE)
