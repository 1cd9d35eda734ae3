"""Upload and verify (``/upload``): a capture file (JSON, JSON Lines, HAR, CBOR) or one
pasted handoff object or JWS, verified only (``app.ingest.verifying.verify_inputs``, nothing
stored) or verified and stored (``app.ingest.pipeline.ingest``, the one pipeline).

A pasted element is shown as jwt.io shows a token, each step apart and in order: decoded
(header and payload, times readable), the signature (valid, and by which key), then each
further check, then the verdict; the form sets the judging time (now, the element's own
``iat``, or a time given) and the receiver (unset: the audience is not checked).

The report is a table of verdicts, paged (``PER_PAGE`` a page, ``?report=KEY&page=N``) and
filtered to rejections or to everything not accepted (``only=``), so an answer stays bounded
whatever was uploaded: one page of verdicts, at most ``MAX_ERRORS`` item errors and the
counts (docs/profile.md §12). Verdicts are handed on as they are made, never all held at
once: the kept report lists every verdict up to ``REPORT_LISTED`` of them or
``REPORT_BYTES`` of JSON, past that only those not accepted, with ``item`` (each verdict's
position) and ``left_out`` (how many were not listed); the counts cover all. It can be
downloaded as JSON in the shape of the API's bounded answer. Reports are kept in the
database for ``HANDOFF_TRACE_UPLOAD_REPORT_SECONDS``, per user, behind an unguessable id
(``app.store.reports``), so any instance or worker serves the download and the pages.
"""

from __future__ import annotations

import calendar
import json
import time
import unicodedata
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request, UploadFile
from fastapi.responses import Response
from handoff_context import Outcome, digest_text
from starlette.concurrency import run_in_threadpool

from app.ingest.build import verify_options
from app.ingest.pipeline import ingest
from app.store import db
from app.store.reports import get_report, keep_report
from app.web import answers
from app.web.auth import GRANTS, Permission
from app.web.inspect import (
    CHECK_SENTENCES,
    MAX_KEYS_TEXT,
    KeysError,
    Pasted,
    own_trust,
    read_paste,
)
from app.web.observe import observe_ingest
from app.web.params import storable
from app.web.render import render, secure
from app.web.service import ServiceDep
from app.web.sessions import PageError, Verifier, Viewer

router = APIRouter(include_in_schema=False)
KEEP_REPORTS = 32
# A kept report lists every verdict up to these bounds, then only those not accepted (the
# counts cover all): its JSON stays near 4 MiB, so a page of it is read quickly.
REPORT_LISTED = 20_000
REPORT_BYTES = 4 * 1024 * 1024
MAX_REPORT = 8 * 1024 * 1024  # a report larger than this (many item errors) is not kept
PER_PAGE = 100  # verdicts on one page of a report
MAX_ERRORS = 20  # item errors shown (all are counted, and in the JSON)
FILTERS = {"": "all", "not-accept": "not accepted", "reject": "rejections only"}
_MULTIPART_SLACK = 64 * 1024  # room for the form's other fields and boundaries


def _keep(service: Any, user_id: int, body: bytes) -> str | None:
    """Store the report for download; None when it is too large to keep."""
    if len(body) > MAX_REPORT:
        return None
    lifetime = service.settings.upload_report_seconds
    now = int(time.time())
    return db.run(  # type: ignore[no-any-return]
        service.engine,
        lambda session: keep_report(
            session, user_id=user_id, body=body, now=now, lifetime=lifetime, keep=KEEP_REPORTS
        ),
    )


def _limit(service: Any) -> int:
    return int(service.settings.max_request_bytes) - _MULTIPART_SLACK


@router.get("/upload")
def upload_page(
    request: Request,
    user: Viewer,
    service: ServiceDep,
    report: Annotated[str | None, Query(max_length=64)] = None,
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    only: Annotated[str, Query(max_length=16)] = "",
) -> Response:
    """The form; with ``report``, a page of a kept report (``only``: a filter)."""
    shown = None
    if report:
        with service.reading() as session:
            body = get_report(session, user_id=user.id, key=report, now=int(time.time()))
        if body is None:
            raise PageError(404, "That report is no longer kept; upload the capture again.")
        kept = json.loads(body)
        meta = kept.get("upload", {})
        shown = {
            **meta,
            "counts": {o.value: kept["counts"].get(o.value, 0) for o in Outcome},
            "skipped": kept["counts"].get("skipped", 0),
            "errors": kept.get("errors", [])[:MAX_ERRORS],
            "error_count": kept.get("error_count", len(kept.get("errors", []))),
            "key": report,
            "left_out": kept.get("left_out", 0),
            **_page(kept["verdicts"], page=page, only=only),
        }
    context = _context(service, user, report=shown)
    return render(request, "upload.html", context)


def _page(verdicts: list[dict[str, Any]], *, page: int, only: str) -> dict[str, Any]:
    """One page of a report's verdicts (JSON shape, numbered from 1), filtered by ``only``."""
    only = only if only in FILTERS else ""
    numbered = [
        (v.get("item", n), v)
        for n, v in enumerate(verdicts, 1)
        if only == ""
        or (only == "reject" and v["outcome"] == Outcome.REJECT.value)
        or (only == "not-accept" and v["outcome"] != Outcome.ACCEPT.value)
    ]
    pages = max(1, -(-len(numbered) // PER_PAGE))
    page = min(page, pages)
    return {
        "rows": numbered[(page - 1) * PER_PAGE : page * PER_PAGE],
        "matching": len(numbered),
        "page": page,
        "pages": pages,
        "only": only,
        "filters": FILTERS,
    }


def judging_time(when: str, at: str, pasted: list[Pasted], now: int) -> int:
    """When the upload is judged: now, the pasted element's own ``iat`` or a time given
    (NumericDate seconds, or ``YYYY-MM-DDTHH:MM[:SS]`` in UTC). Raises PageError."""
    if when == "own":
        stamps = [p.payload.get("iat") for p in pasted if isinstance(p.payload, dict)]
        own = [t for t in stamps if isinstance(t, int) and not isinstance(t, bool)]
        if not own:
            raise PageError(
                422,
                "“Its own time” is the pasted element's iat: paste an element whose payload "
                "has one, or give a time.",
            )
        return own[0]
    if when != "at" or not at.strip():
        return now
    text = at.strip()
    if text.isdigit() and len(text) <= 12:
        return int(text)
    for shape in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"):
        try:
            return calendar.timegm(time.strptime(text.rstrip("Z"), shape))
        except ValueError:
            continue
    raise PageError(
        422,
        "The judging time must be seconds since 1970 (1793000462) or a UTC time "
        "(2026-10-26T07:41:02).",
    )


def _context(service: Any, user: Any, **extra: Any) -> dict[str, Any]:
    return {
        "nav": "upload",
        "now": service.clock(),
        "max_bytes": _limit(service),
        "can_verify": user.role in GRANTS[Permission.VERIFY],
        "can_store": user.role in GRANTS[Permission.INGEST],
        "error": None,
        "pasted": [],
        "steps": [],
        "sentences": CHECK_SENTENCES,
        "form": {"when": "now", "at": "", "receiver": ""},
        **extra,
    }


@router.post("/upload")
async def upload(
    request: Request,
    user: Verifier,
    service: ServiceDep,
    file: UploadFile | None = None,
    paste: Annotated[str, Form(max_length=1024 * 1024)] = "",
    mode: Annotated[str, Form(max_length=16)] = "verify",
    keys: Annotated[str, Form(max_length=MAX_KEYS_TEXT)] = "",
    keys_file: UploadFile | None = None,
    issuer: Annotated[str, Form(max_length=2048)] = "",
    when: Annotated[str, Form(max_length=8)] = "now",
    at: Annotated[str, Form(max_length=40)] = "",
    receiver: Annotated[str, Form(max_length=2048)] = "",
) -> Response:
    limit = _limit(service)
    pasted: list[Any] = []
    if keys_file is not None and keys_file.filename:
        keys = (await keys_file.read(MAX_KEYS_TEXT + 1)).decode("utf-8", "replace")
    try:
        trust = own_trust(keys[: MAX_KEYS_TEXT + 1], issuer)
    except KeysError as exc:
        raise PageError(422, str(exc)) from exc
    if file is not None and file.filename:
        data = await file.read(limit + 1)
        # The name labels every verdict's source and is stored with each receipt: no NUL,
        # control character or lone surrogate reaches a log or the store. Format characters
        # (bidi overrides) stay, and the pages show them as visible badges.
        name = "".join(
            "?" if unicodedata.category(c) in ("Cc", "Cs") else c for c in file.filename[:200]
        )
    elif paste.strip():
        name, data, pasted = read_paste(paste)
    else:
        raise PageError(422, "Choose a capture file or paste a handoff object or JWS.")
    if len(data) > limit:
        raise PageError(413, f"The file is larger than {limit} octets, the most one upload may be.")
    store = mode == "store"
    if store and user.role not in GRANTS[Permission.INGEST]:
        raise PageError(403, "Only an admin may store uploads; choose “verify only”.")
    if store and trust is not None:
        # What is stored is judged against the service's trust store alone, so the verdicts
        # in the store never depend on keys someone brought to one upload.
        raise PageError(
            422, "Your own keys verify only: choose “verify only”, or remove the keys to store."
        )
    now = service.clock()
    judged_at = judging_time(when, at, pasted, now)
    try:
        storable(receiver)
    except ValueError as exc:
        raise PageError(422, "The receiver must be plain text.") from exc
    chosen = receiver.strip() or None
    if store and (judged_at != now or chosen):
        raise PageError(
            422,
            "A judging time or receiver of your own verifies only: choose “verify only”, "
            "or leave them at “now” and unset to store.",
        )
    s = service.settings
    options = verify_options(s, at=judged_at, receiver=chosen)
    errors: list[Any] = []
    envelope_errors: list[Any] = []
    # Verdicts are handed on one by one as they are made, never all held: the report keeps
    # what its bounds allow (``Listing``), the pasted elements' own verdicts are kept apart.
    listing = answers.Listing(max_listed=REPORT_LISTED, max_bytes=REPORT_BYTES, numbered=True)
    wanted = {p.digest for p in pasted}
    by_digest: dict[bytes, Any] = {}

    def each(verdict: Any) -> None:
        listing.add(verdict)
        if verdict.digest is not None and digest_text(verdict.digest) in wanted:
            by_digest[verdict.digest] = verdict

    if store:
        result = await run_in_threadpool(
            ingest, service.pipeline(options), [(name, data)], now=now, on_verdict=each
        )
        observe_ingest("upload", result)
        skipped, errors = result.skipped, result.errors
        envelope_errors = result.envelopes.errors
    else:
        report = await run_in_threadpool(
            service.verify, [(name, data)], options, content_type=None, trust=trust, on_verdict=each
        )
        skipped = report.skipped
    counts = {o.value: listing.outcomes[o.value] for o in Outcome}
    meta = {
        "name": name,
        "size": len(data),
        "stored": store,
        "own_keys": None if trust is None else sorted(trust.issuers),
        "at": judged_at,
        "receiver": chosen,
    }
    listed_errors = answers.problems(errors)
    left_out = listing.omitted
    body = listing.body(
        {
            "counts": listing.counts(skipped),
            "errors": listed_errors,
            "error_count": len(errors),
            "envelope_errors": answers.problems(envelope_errors),
            "upload": meta,
            "left_out": left_out,
        }
    )
    key = await run_in_threadpool(_keep, service, user.id, body)
    steps = [_steps(p, by_digest, judged_at) for p in pasted]
    context = _context(
        service,
        user,
        report={
            **meta,
            "counts": counts,
            "skipped": skipped,
            "errors": listed_errors[:MAX_ERRORS],
            "error_count": len(errors),
            "key": key,
            "left_out": left_out,
            **_page([json.loads(line) for _, line in listing.lines], page=1, only=""),
        },
        pasted=pasted,
        steps=steps,
        sentences=CHECK_SENTENCES,
        form={"when": when, "at": at, "receiver": receiver},
    )
    return render(request, "upload.html", context)


def _steps(pasted: Pasted, by_digest: dict[bytes, Any], at: int) -> dict[str, Any]:
    """A pasted element's checks in the order jwt.io shows them: decoded, the signature (and
    by which key), each further check, then the verdict judged at ``at``."""
    verdict = next((v for d, v in by_digest.items() if digest_text(d) == pasted.digest), None)
    checks = list(verdict.checks) if verdict is not None else []
    signature = next((c for c in checks if c.check == "signature"), None)
    header = pasted.header if isinstance(pasted.header, dict) else {}
    payload = pasted.payload if isinstance(pasted.payload, dict) else {}
    times = [
        (name, payload[name], payload[name] - at)
        for name in ("iat", "nbf", "exp")
        if isinstance(payload.get(name), int) and not isinstance(payload.get(name), bool)
    ]
    return {
        "verdict": verdict,
        "signature": signature,
        "kid": header.get("kid") if isinstance(header.get("kid"), str) else None,
        "alg": header.get("alg") if isinstance(header.get("alg"), str) else None,
        "iss": payload.get("iss") if isinstance(payload.get("iss"), str) else None,
        "further": [c for c in checks if c.check != "signature"],
        "times": times,
        "at": at,
    }


@router.get("/upload/reports/{key}.json")
def report_json(key: str, user: Viewer, service: ServiceDep) -> Response:
    with service.reading() as session:
        body = get_report(session, user_id=user.id, key=key[:64], now=int(time.time()))
    if body is None:
        raise PageError(404, "That report is no longer kept; upload the capture again.")
    headers = {"Content-Disposition": 'attachment; filename="handoff-trace-report.json"'}
    return secure(Response(body, media_type="application/json", headers=headers))
