"""The library's published vectors, judged through the service's own verify path
(``app.ingest.verifying.verify_inputs``, behind ``handoff-trace verify`` and
``POST /api/v1/verify``): capture reading and carrier extraction included, each vector must
produce exactly its verdicts, as it does with the library alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from handoff_context import RefPolicy, TrustStore
from handoff_context.conformance import (
    Answer,
    Refused,
    capture_of,
    check_vector,
    objects_of,
    trust_of,
)
from handoff_context.errors import TrustConfigError
from handoff_context.vectors import stored_vectors

from app.ingest.verifying import VerifyOptions, verify_inputs

VECTORS = stored_vectors()


def service_verdicts(doc: dict[str, Any], directory: Path) -> Answer:
    try:
        trust = TrustStore.from_mapping(trust_of(doc, directory))
    except TrustConfigError as exc:
        return Refused(str(exc))
    policy = doc["policy"]
    options = VerifyOptions(
        at=doc["at"],
        receiver=doc["receiver"],
        dialog=doc["dialog"],
        skew=policy["skew"],
        max_lifetime=policy["max_lifetime"],
        max_chain=policy["max_chain"],
        ref_policy=RefPolicy(policy["ref_policy"]),
    )
    report = verify_inputs([capture_of(doc)], trust=trust, options=options, objects=objects_of(doc))
    return [v.to_json() for v in report.verdicts]


def test_the_vectors_are_there() -> None:
    assert len(VECTORS) > 90


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_produces_its_verdicts_through_the_service(path: Path) -> None:
    assert check_vector(json.loads(path.read_bytes()), run=service_verdicts) == []
