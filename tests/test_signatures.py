"""The signature step on every core (app.ingest.signatures): verifying ahead in threads
changes no verdict, byte for byte, and a signature that fails is still reported by the
in-order check exactly as a serial run reports it."""

from __future__ import annotations

import json
import os
import signal

import pytest
from handoff_context import (
    Form,
    Signer,
    TrustStore,
    Verifier,
    handoff_object,
    make_offer,
    parse_element,
    trust_document,
)

from app.ingest import signatures
from app.ingest.verifying import VerifyOptions, verify_inputs

T0 = 1_793_000_000


def capture() -> tuple[TrustStore, bytes]:
    """40 offers: most good, some forged (signed with a key the trust file does not hold
    for that issuer), some from an issuer the trust file does not know at all."""
    signers = [Signer.generate(f"spiffe://t.example/a{i}", "ES256") for i in range(4)]
    mallory = Signer.generate(signers[0].iss, "ES256")  # the same iss, another key
    stranger = Signer.generate("spiffe://t.example/stranger", "ES256")
    lines = []
    for i in range(40):
        by = mallory if i % 7 == 3 else stranger if i % 11 == 5 else signers[i % 4]
        offer = make_offer(by, aud=signers[(i + 1) % 4].iss, dialog=f"d{i}", iat=T0)
        lines.append(json.dumps({"received_at": T0 + 1, "payload": handoff_object(offer)}))
    return TrustStore.from_mapping(trust_document(signers)), "\n".join(lines).encode()


def verdicts(trust: TrustStore, data: bytes) -> list[dict[str, object]]:
    report = verify_inputs([("c.jsonl", data)], trust=trust, options=VerifyOptions(at=T0))
    return [v.to_json() for v in report.verdicts]


def test_verifying_ahead_changes_no_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    trust, data = capture()
    monkeypatch.setattr(signatures, "workers", lambda: 2)
    ahead = verdicts(trust, data)
    monkeypatch.setattr(signatures, "MIN_PARALLEL", 10**9)  # the serial path only
    serial = verdicts(trust, data)
    assert json.dumps(ahead) == json.dumps(serial)
    reasons = {v["reason"] for v in serial}
    assert reasons == {None, "bad-signature", "untrusted-key"}


def test_only_what_verifies_is_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    trust, data = capture()
    monkeypatch.setattr(signatures, "workers", lambda: 2)
    elements = [
        e
        for line in data.splitlines()
        for e in signatures.elements_of(json.loads(line)["payload"], max_element=65536)
    ]
    cache = Verifier(trust=trust).signature_cache
    assert cache is not None
    assert signatures.verify_ahead(elements, trust, cache) == len(elements)
    marked = [e for e in elements if cache.verified(e.digest, trust.fingerprint)]
    serial_ok = []
    for e in elements:
        try:
            Verifier(trust=trust).check_signature(parse_element(e.octets, Form.JWS))
        except Exception:
            continue
        serial_ok.append(e)
    assert marked == serial_ok
    assert 0 < len(marked) < len(elements)


def test_a_forked_helper_changes_no_verdict_and_is_reaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.ingest import forked

    trust, data = capture()
    serial = verdicts(trust, data)
    monkeypatch.setattr(forked, "workers", lambda: 2)
    monkeypatch.setattr(forked, "MIN_OCTETS", 0)
    monkeypatch.setattr(forked, "batched", lambda items: batches_of_7(items))
    marked: list[int] = []
    helpers: list[forked.Helper] = []
    real_before, real_start = forked.Helper.before, forked.Helper.start.__func__  # type: ignore[attr-defined]

    def start(cls: type[forked.Helper], *args: object, **kw: object) -> forked.Helper | None:
        helper = real_start(cls, *args, **kw)
        helpers.append(helper)
        return helper

    def before(self: forked.Helper, cache: object) -> int:
        marked.append(real_before(self, cache))  # type: ignore[arg-type]
        return marked[-1]

    monkeypatch.setattr(forked.Helper, "start", classmethod(start))
    monkeypatch.setattr(forked.Helper, "before", before)
    import app.ingest.verifying as verifying

    monkeypatch.setattr(verifying, "batched", lambda items: batches_of_7(items))
    report = verify_inputs(
        [("c.jsonl", data)], trust=trust, options=VerifyOptions(at=T0), fork=True
    )
    assert json.dumps([v.to_json() for v in report.verdicts]) == json.dumps(serial)
    # Six batches of 7 items (the last of 5); the child verified two items in three of
    # each, only those whose signature verifies.
    assert len(marked) == 6 and all(marked)
    assert sum(marked) < sum(v["outcome"] == "accept" for v in serial)
    with pytest.raises(ChildProcessError):
        os.waitpid(helpers[0].pid, os.WNOHANG)  # reaped: no zombie left behind


def test_a_forked_helper_that_dies_leaves_the_work_to_the_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.ingest import forked

    trust, data = capture()
    serial = verdicts(trust, data)
    monkeypatch.setattr(forked, "workers", lambda: 2)
    monkeypatch.setattr(forked, "MIN_OCTETS", 0)
    real_start = forked.Helper.start.__func__  # type: ignore[attr-defined]

    def start_and_kill(cls: type[forked.Helper], *args: object, **kw: object) -> object:
        helper = real_start(cls, *args, **kw)
        os.kill(helper.pid, signal.SIGKILL)
        return helper

    monkeypatch.setattr(forked.Helper, "start", classmethod(start_and_kill))
    report = verify_inputs(
        [("c.jsonl", data)], trust=trust, options=VerifyOptions(at=T0), fork=True
    )
    assert json.dumps([v.to_json() for v in report.verdicts]) == json.dumps(serial)


def batches_of_7(items: object) -> object:
    from app.ingest.batches import batched

    return batched(items, 7)  # type: ignore[arg-type]
