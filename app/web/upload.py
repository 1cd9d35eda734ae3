"""Upload and verify (``/upload``): a capture file (JSON, JSON Lines, HAR, CBOR) or one
pasted handoff object or JWS, verified only (``app.ingest.verifying.verify_inputs``, nothing
stored) or verified and stored (``app.ingest.pipeline.ingest``, the one pipeline).

The report is a table of verdicts and can be downloaded as the JSON that ``verify --json``
prints. Reports are kept in the database for ``HANDOFF_TRACE_UPLOAD_REPORT_SECONDS``, per
user, behind an unguessable id (``app.store.reports``), so any instance or worker serves
the download.
"""

from __future__ import annotations

import json
import time
import unicodedata
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, UploadFile
from fastapi.responses import Response
from handoff_context import Outcome
from starlette.concurrency import run_in_threadpool

from app.ingest.pipeline import ingest
from app.store import db
from app.store.reports import get_report, keep_report
from app.web.auth import GRANTS, Permission
from app.web.inspect import CHECK_SENTENCES, MAX_KEYS_TEXT, KeysError, own_trust, read_paste
from app.web.observe import observe_ingest
from app.web.render import render, secure
from app.web.service import ServiceDep
from app.web.sessions import PageError, Verifier, Viewer

router = APIRouter(include_in_schema=False)
KEEP_REPORTS = 32
MAX_REPORT = 32 * 1024 * 1024
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
def upload_page(request: Request, user: Viewer, service: ServiceDep) -> Response:
    context = _context(service, user, report=None)
    return render(request, "upload.html", context)


def _context(service: Any, user: Any, **extra: Any) -> dict[str, Any]:
    return {
        "nav": "upload",
        "now": service.clock(),
        "max_bytes": _limit(service),
        "can_verify": user.role in GRANTS[Permission.VERIFY],
        "can_store": user.role in GRANTS[Permission.INGEST],
        "error": None,
        "pasted": [],
        "sentences": CHECK_SENTENCES,
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
    s = service.settings
    options = s.verify_options(at=now)
    errors: list[Any] = []
    envelope_errors: list[Any] = []
    if store:
        result = await run_in_threadpool(ingest, service.pipeline(options), [(name, data)], now=now)
        observe_ingest("upload", result)
        verdicts, skipped, errors = result.verdicts, result.skipped, result.errors
        envelope_errors = result.envelopes.errors
    else:
        report = await run_in_threadpool(
            service.verify, [(name, data)], options, content_type=None, trust=trust
        )
        verdicts, skipped = report.verdicts, report.skipped
    counts = {o.value: sum(1 for v in verdicts if v.outcome is o) for o in Outcome}
    body = json.dumps(
        {
            "verdicts": [v.to_json() for v in verdicts],
            "counts": {**counts, "verdicts": len(verdicts), "skipped": skipped},
            "errors": [{"source": e.source, "detail": e.detail} for e in errors],
            "envelope_errors": [{"source": e.source, "detail": e.detail} for e in envelope_errors],
        },
        indent=2,
    ).encode()
    key = await run_in_threadpool(_keep, service, user.id, body)
    context = _context(
        service,
        user,
        report={
            "name": name,
            "size": len(data),
            "stored": store,
            "verdicts": verdicts,
            "counts": counts,
            "skipped": skipped,
            "errors": errors,
            "key": key,
            "own_keys": None if trust is None else sorted(trust.issuers),
        },
        pasted=pasted,
        sentences=CHECK_SENTENCES,
    )
    return render(request, "upload.html", context)


@router.get("/upload/reports/{key}.json")
def report_json(key: str, user: Viewer, service: ServiceDep) -> Response:
    with service.reading() as session:
        body = get_report(session, user_id=user.id, key=key[:64], now=int(time.time()))
    if body is None:
        raise PageError(404, "That report is no longer kept; upload the capture again.")
    headers = {"Content-Disposition": 'attachment; filename="handoff-trace-report.json"'}
    return secure(Response(body, media_type="application/json", headers=headers))
