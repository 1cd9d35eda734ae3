"""Building captures for the store and ingest tests, and reading back what was stored."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from handoff_context import (
    Form,
    Signer,
    StatusState,
    Timing,
    TrustStore,
    handoff_digest,
    handoff_object,
    make_offer,
    make_status,
    parse_element,
    sign_payload,
    status_object,
)
from handoff_context.carry import A2A_EXTENSION_URI
from sqlalchemy import Engine, func, select

from app.envelope.ledger import CaseRules
from app.ingest.pipeline import IngestReport, Pipeline, ingest
from app.ingest.sweep import sweep
from app.ingest.verifying import VerifyOptions
from app.store.db import transaction
from app.store.models import ElementRow, FlagRow, HopRow, ObservationRow
from tests.conftest import T0

DIALOG = "ctx-7c1e"
TIMING = Timing()


def rec(payload: Any, at: int, by: str | None = None, dialog: str | None = None) -> dict[str, Any]:
    """A profile §10 capture record."""
    record: dict[str, Any] = {"received_at": at, "payload": payload}
    if by is not None:
        record["received_by"] = by
    if dialog is not None:
        record["dialog"] = dialog
    return record


def jsonl(records: Sequence[Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def offer(signer: Signer, aud: Signer | str, *, iat: int = T0, **fields: Any) -> bytes:
    to = aud if isinstance(aud, str) else aud.iss
    return make_offer(signer, aud=to, dialog=fields.pop("dialog", DIALOG), iat=iat, **fields)


def resign(signer: Signer, octets: bytes) -> bytes:
    """The same payload signed again: ECDSA is randomised, so only the signature differs."""
    element = parse_element(octets, Form.JWS)
    return sign_payload(dict(element.raw_payload), signer)


def twin(signer: Signer, octets: bytes, **changes: Any) -> bytes:
    """Another offer for the same (iss, hop) with some members changed (content split)."""
    payload = dict(parse_element(octets, Form.JWS).raw_payload)
    payload.update(changes)
    return sign_payload(payload, signer)


def status(signer: Signer, of: bytes, state: str, *, iat: int, **fields: Any) -> bytes:
    # check=False: the store's tests need statuses from any party, as hostile agents send.
    return make_status(
        signer, offer_octets=of, state=StatusState(state), iat=iat, check=False, **fields
    )


def bundle(current: bytes, *chain: bytes) -> dict[str, Any]:
    return handoff_object(current, chain)


def st(octets: bytes) -> dict[str, Any]:
    return status_object(octets)


def a2a_task(status_octets: bytes, state: str, *, task: str = "task-1") -> dict[str, Any]:
    """A bare A2A 1.0 Task whose status message carries a status object."""
    return {
        "id": task,
        "contextId": DIALOG,
        "status": {
            "state": state,
            "message": {
                "messageId": f"m-{task}",
                "role": "ROLE_AGENT",
                "contextId": DIALOG,
                "metadata": {A2A_EXTENSION_URI: status_object(status_octets)},
                "extensions": [A2A_EXTENSION_URI],
            },
        },
    }


def pipeline(engine: Engine, trust: TrustStore, *, at: int = T0 + 30, **options: Any) -> Pipeline:
    return Pipeline(
        engine=engine, trust=trust, options=VerifyOptions(at=at, **options), timing=TIMING
    )


def run(
    engine: Engine, trust: TrustStore, records: Sequence[Any], *, now: int = T0 + 30, **kw: Any
) -> IngestReport:
    """Ingest ``records`` as one JSON Lines capture at store clock ``now``; ``kw`` are
    VerifyOptions (``at`` defaults to T0 + 30)."""
    return ingest(pipeline(engine, trust, **kw), [("capture.jsonl", jsonl(records))], now=now)


def hop_of(octets: bytes) -> tuple[str, str]:
    """The (iss, hop) key of an offer."""
    p = parse_element(octets, Form.JWS).payload
    return (p.iss, p.hop)


def outcomes(report: IngestReport) -> list[str]:
    return [v.outcome.value for v in report.verdicts]


def digest(octets: bytes) -> bytes:
    return handoff_digest(octets)


def count(engine: Engine, model: Any, *where: Any) -> int:
    with transaction(engine) as session:
        return int(
            session.execute(select(func.count()).select_from(model).where(*where)).scalar_one()
        )


def hops(engine: Engine, *, now: int | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """Every hop's derived columns, after a sweep at ``now`` when given (without its place
    in the OTLP exporter's change sequence, which counts derivations)."""
    with transaction(engine) as session:
        if now is not None:
            sweep(session, now=now, timing=TIMING, cases=CaseRules())
        rows = session.execute(select(HopRow)).scalars()
        return {(h.iss, h.hop): h.model_dump(exclude={"change"}) for h in rows}


def flags(engine: Engine) -> list[dict[str, Any]]:
    """Every flag without its row id and bookkeeping times, in key order."""
    with transaction(engine) as session:
        rows = session.execute(select(FlagRow).order_by(FlagRow.key)).scalars()
        return [f.model_dump(exclude={"id", "updated_at"}) for f in rows]


def kinds(engine: Engine) -> list[tuple[str, str | None]]:
    return sorted((f["kind"], f["variant"]) for f in flags(engine))


def snapshot(engine: Engine) -> tuple[Any, Any]:
    """What must not depend on ingest order: every hop and every flag."""
    return hops(engine), flags(engine)


def elements(engine: Engine) -> dict[bytes, tuple[bytes, int]]:
    with transaction(engine) as session:
        rows = session.execute(select(ElementRow.digest, ElementRow.octets, ElementRow.first_seen))
        return {d: (o, t) for d, o, t in rows}


def observations(engine: Engine, of: bytes) -> int:
    return count(engine, ObservationRow, ObservationRow.digest == digest(of))
