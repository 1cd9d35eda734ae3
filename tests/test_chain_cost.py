"""Chains cost linear work (issue 13): a capture of k bundles, bundle i carrying the i-1
offers before it, needs k signature verifications in ``verify`` (the verifier's own
signature cache, keyed by digest and trust fingerprint) as in ``ingest`` (the store's)."""

from __future__ import annotations

import json
from typing import Any

import handoff_context._signature as signature_module
import pytest
from handoff_context import Signer, TrustStore, handoff_object, make_chain, trust_document
from sqlalchemy import Engine, event

from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions, verify_inputs

T0 = 1_793_000_000
K = 8


def chain_capture(k: int) -> tuple[TrustStore, bytes]:
    signers = [Signer.generate(f"spiffe://t.example/a{i}", "Ed25519") for i in range(k + 1)]
    offers = make_chain(
        signers[:k], dialog="ctx-chain", iat=T0, step=5, lifetime=120, final_aud=signers[k].iss
    )
    lines = [
        json.dumps(
            {
                "received_at": T0 + i * 5 + 1,
                "received_by": signers[i + 1].iss,
                "dialog": "ctx-chain",
                "payload": handoff_object(offer, offers[:i]),
            }
        )
        for i, offer in enumerate(offers)
    ]
    return TrustStore.from_mapping(trust_document(signers)), "\n".join(lines).encode()


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

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO ELEMENT "):
            element_inserts.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        report = ingest(pipeline, [("chain.jsonl", capture)], now=T0 + 100)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert [v.outcome.value for v in report.verdicts] == ["accept"] * K
    assert len(raw_verifications) == K
    # Carried chain elements already stored are recognised and not inserted again.
    assert len(element_inserts) == K
