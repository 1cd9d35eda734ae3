"""The evidence log's routes (docs/evidence-log.md): the checkpoint, the tiles and entry
bundles at the C2SP tlog-tiles paths under ``/api/v1/log/``, and each element's inclusion proof as
a tlog-proof file or an RFC 9942 receipt. Like every other route they need a token (any
role that may read): an auditor is given a ``read`` token."""

from __future__ import annotations

import io
import zipfile
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Response
from handoff_context import digest_text, parse_digest_text
from handoff_context.errors import MalformedError

from app.log import prove
from app.log.errors import FormatError, NotInLog
from app.log.runner import EvidenceLog
from app.log.tiles import parse_path
from app.store.queries import get_element
from app.web.auth import Reader
from app.web.errors import ApiError, documented
from app.web.params import DigestPath, parse_digest, reject_unknown_query
from app.web.render import secure
from app.web.service import Service, ServiceDep
from app.web.sessions import PageError, Viewer

router = APIRouter(dependencies=[Depends(reject_unknown_query)], tags=["evidence log"])
# Tiles never change once written (a partial tile of a given width neither); the
# checkpoint moves every few seconds.
IMMUTABLE = "private, max-age=31536000, immutable"
BRIEF = "private, max-age=2"
PROOF_TYPES = {"tlog-proof": "text/plain; charset=utf-8", "receipt": "application/cose"}


def _evidence(service: Service) -> EvidenceLog:
    if service.evidence is None:
        raise ApiError(
            404,
            "this deployment keeps no evidence log (HANDOFF_TRACE_LOG_KEY_FILE is not set)",
            code="log-disabled",
        )
    return service.evidence


@router.get(
    "/api/v1/log/checkpoint",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}, **documented(401, 403, 404, 503)},
)
def get_checkpoint(who: Reader, service: ServiceDep) -> Response:
    """The latest checkpoint: a signed note (C2SP tlog-checkpoint) of the log key."""
    _evidence(service)
    with service.reading() as session:
        note = prove.latest_note(session)
    if note is None:
        raise ApiError(404, "the log has no checkpoint yet", code="not-found")
    return Response(note, media_type="text/plain; charset=utf-8", headers={"Cache-Control": BRIEF})


@router.get(
    "/api/v1/log/tile/{tile:path}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}}, **documented(401, 403, 404)},
)
def get_tile(who: Reader, service: ServiceDep, tile: str) -> Response:
    """A tile (``tile/<L>/<N>[.p/<W>]``) or entry bundle (``tile/entries/<N>[.p/<W>]``)."""
    _evidence(service)
    try:
        ref = parse_path("tile/" + tile)
    except FormatError as exc:
        raise ApiError(404, str(exc), code="not-found") from exc
    with service.reading() as session:
        try:
            data = prove.read_tile(session, ref)
        except prove.TileNotFound as exc:
            raise ApiError(404, str(exc), code="not-found") from exc
    return Response(
        data, media_type="application/octet-stream", headers={"Cache-Control": IMMUTABLE}
    )


@router.get(
    "/api/v1/elements/{digest}/proof",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}, "application/cose": {}}},
        **documented(401, 403, 404, 422, 503),
    },
)
def get_proof(
    who: Reader,
    service: ServiceDep,
    digest: DigestPath,
    format: Annotated[Literal["tlog-proof", "receipt"], Query()] = "tlog-proof",
) -> Response:
    """The element's inclusion in the latest checkpoint: a C2SP tlog-proof file (default)
    or an RFC 9942 COSE receipt (``format=receipt``)."""
    evidence = _evidence(service)
    wanted = parse_digest(digest)
    with service.reading() as session:
        try:
            included = prove.inclusion(session, digest=wanted)
        except NotInLog as exc:
            raise ApiError(404, str(exc), code="not-in-log") from exc
    body: str | bytes = (
        included.tlog_proof() if format == "tlog-proof" else included.receipt(evidence.signer)
    )
    return Response(body, media_type=PROOF_TYPES[format], headers={"Cache-Control": BRIEF})


# --- the dashboard's download: the evidence bundle of one element ----------------------------

pages = APIRouter(include_in_schema=False)
BUNDLE_README = """\
The evidence bundle of one element (handoff-trace, docs/evidence-log.md):

  {name}            the signed octets exactly as stored
  proof.tlog-proof  its inclusion in the log (C2SP tlog-proof, with the signed checkpoint)
  receipt.cose      the same inclusion as an RFC 9942 COSE receipt
  checkpoint        the checkpoint the proof is for (C2SP tlog-checkpoint, signed note)
  leaf              the element's 44-octet leaf (version, source, form, type, first seen,
                    SHA-256 of the octets)

Check it with the log's verifier key ({vkey}): the SHA-256 of the octets is the leaf's
last 32 octets, and the proof leads from SHA-256(0x00 || leaf) to the checkpoint's root.
"""


@pages.get("/elements/{digest}/evidence")
def evidence_bundle(digest: str, user: Viewer, service: ServiceDep) -> Response:
    """One element's octets, inclusion proof, receipt and checkpoint, as a zip download."""
    if service.evidence is None:
        raise PageError(404, "This deployment keeps no evidence log.")
    try:
        wanted = parse_digest_text(digest, what="digest")
    except MalformedError:
        raise PageError(404, "No element has that digest.") from None
    with service.reading() as session:
        row = get_element(session, digest=wanted)
        try:
            included = None if row is None else prove.inclusion(session, digest=wanted)
        except NotInLog:
            included = None
    if row is None:
        raise PageError(404, "No element has that digest.")
    if included is None:
        raise PageError(404, "That element is not in the log yet; try again in a few seconds.")
    name = f"{digest_text(row.digest)}.{row.form}"
    signer = service.evidence.signer
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr(name, row.octets)
        bundle.writestr("proof.tlog-proof", included.tlog_proof())
        bundle.writestr("receipt.cose", included.receipt(signer))
        bundle.writestr("checkpoint", included.checkpoint)
        bundle.writestr("leaf", included.leaf)
        bundle.writestr("README.txt", BUNDLE_README.format(name=name, vkey=signer.verifier.text()))
    headers = {
        "Content-Disposition": f'attachment; filename="{digest_text(row.digest)}.evidence.zip"'
    }
    return secure(Response(buffer.getvalue(), media_type="application/zip", headers=headers))
