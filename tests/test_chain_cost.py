"""Chains cost linear work (issue 13): a capture of k bundles, bundle i carrying the i-1
offers before it, needs k signature verifications in ``verify`` (the verifier's own
signature cache, keyed by digest and trust fingerprint) as in ``ingest`` (the store's)."""

from __future__ import annotations

from typing import Any

import handoff_context._signature as signature_module
import pytest
from sqlalchemy import Engine, event

from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions, verify_inputs
from tests.chains import T0, chain_capture

K = 8


@pytest.fixture
def raw_verifications(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = signature_module.verify_raw

    def counting(*args: Any) -> bool:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(signature_module, "verify_raw", counting)
    return calls


def test_verify_checks_each_signature_of_a_chain_once(raw_verifications: list[int]) -> None:
    trust, capture = chain_capture(K)
    report = verify_inputs(
        [("chain.jsonl", capture)], trust=trust, options=VerifyOptions(at=T0 + 100)
    )
    assert [v.outcome.value for v in report.verdicts] == ["accept"] * K
    assert len(raw_verifications) == K  # not K(K+1)/2


def test_a_retransmitted_chain_costs_no_verification(raw_verifications: list[int]) -> None:
    trust, capture = chain_capture(K)
    report = verify_inputs(
        [("a.jsonl", capture), ("b.jsonl", capture)], trust=trust, options=VerifyOptions(at=T0)
    )
    assert [v.outcome.value for v in report.verdicts] == ["accept"] * K + ["duplicate"] * K
    assert len(raw_verifications) == K


def test_ingest_checks_each_signature_of_a_chain_once(
    engine: Engine, raw_verifications: list[int]
) -> None:
    trust, capture = chain_capture(K)
    pipeline = Pipeline(engine=engine, trust=trust, options=VerifyOptions(at=T0))
    element_inserts: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, params: Any, _c: Any, many: bool) -> None:
        # Element rows written: a batch writes its new elements with one executemany
        # (app.store.writebehind), a row per parameter set, or on PostgreSQL one statement
        # of a column's values in each array parameter.
        if statement.lstrip().upper().startswith("INSERT INTO ELEMENT "):
            rows = len(params) if many else len(params[0]) if "unnest(" in statement else 1
            element_inserts.extend([statement] * rows)

    event.listen(engine, "before_cursor_execute", count)
    try:
        report = ingest(pipeline, [("chain.jsonl", capture)], now=T0 + 100)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert [v.outcome.value for v in report.verdicts] == ["accept"] * K
    assert len(raw_verifications) == K
    # Carried chain elements already stored are recognised and not inserted again.
    assert len(element_inserts) == K
