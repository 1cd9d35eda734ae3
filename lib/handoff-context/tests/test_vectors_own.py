"""The published vectors (handoff_context/vectors/): each stored file produces exactly its
verdicts.

The files are what other implementations test against, so they are checked as stored, with the
conformance kit's own runner (``handoff_context.conformance``); the generator's ``--check``
(run here too) proves the stored files are what the generator writes. The service's tests judge
them again through ``handoff-trace verify``'s path (tests/test_vectors_service.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from handoff_context import TrustStore, b64url_decode
from handoff_context.conformance import check_vector
from handoff_context.vectors import DIRECTORY, stored_vectors

VECTORS = stored_vectors()

# The rules the vector set must keep covering (named after the attack or rule).
REQUIRED = [
    "alg-none",
    "hmac-with-public-key",
    "embedded-jwk",
    "jku",
    "x5u",
    "x5c",
    "crit",
    "b64-false",
    "zip",
    "extra-header-member",
    "json-serialization-general",
    "json-serialization-flattened",
    "padding",
    "plus-slash-base64",
    "unused-bits",
    "bom-header",
    "utf16-payload",
    "duplicate-header-member",
    "duplicate-payload-member",
    "missing-typ",
    "typ-mismatch",
    "der-signature",
    "r-zero",
    "s-zero",
    "r-equals-n",
    "high-s-valid",
    "truncated-signature",
    "kid-unknown",
    "kid-other-key",
    "alg-key-mismatch",
    "untrusted-issuer",
    "small-order-ed25519",
    "nan",
    "infinity",
    "huge-number",
    "float-iat",
    "bool-v",
    "string-iat",
    "deep-nesting",
    "oversize-element",
    "nul-in-identifier",
    "bidi-in-identifier",
    "space-in-identifier",
    "bad-hop",
    "iat-after-exp",
    "wrong-audience",
    "stale-expired",
    "stale-future",
    "lifetime-policy",
    "replay-retransmission",
    "equivocation-content",
    "equivocation-signature-only",
    "dialog-mismatch",
    "broken-chain-prev",
    "broken-chain-continuity",
    "broken-chain-timing",
    "dropped-middle",
    "swapped",
    "duplicated-element",
    "partial-chain",
    "prev-without-chain",
    "cycle-repeat-issuer",
    "cycle-receiver",
    "too-deep",
    "chain-element-bad-signature",
    "ref-mismatch",
    "unverifiable-ref",
    "verified-ref",
    "salted-ref",
    "uri-kind-ref",
    "unknown-ref-kind",
    "status-accepted",
    "status-pending",
    "status-wrong-parties",
    "status-hop-mismatch",
    "status-canceled-by-delegator",
    "status-reason-on-accepted",
    "offer-and-status-both",
    "cose-valid-offer",
    "cose-tag-998",
    "cose-duplicate-key",
    "cose-alg-unprotected",
    "cose-x5chain",
]


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_bytes())
    return doc


def test_every_required_vector_is_stored() -> None:
    stored = {p.stem for p in VECTORS}
    assert not set(REQUIRED) - stored, f"missing vectors: {sorted(set(REQUIRED) - stored)}"


def test_folder_says_whether_anything_is_rejected() -> None:
    for path in VECTORS:
        doc = load(path)
        rejected = "expect_trust_error" in doc or any(
            e["outcome"] == "reject" for e in doc["expect"]
        )
        assert path.parent.name == ("invalid" if rejected else "valid"), path.name
        assert doc["name"] == path.stem


@pytest.mark.parametrize("path", VECTORS, ids=lambda p: p.stem)
def test_vector_produces_its_verdicts(path: Path) -> None:
    assert check_vector(load(path)) == []


def test_shared_trust_file_loads_from_disk() -> None:
    store = TrustStore.load(DIRECTORY / "trust.json")
    assert "spiffe://evil.example/agent/mallory" not in store
    assert len(store.keys_for("spiffe://a.example/agent/planner") or ()) == 2


def test_small_order_vector_carries_a_real_forgery() -> None:
    """The refused key is not a formality: its input verifies under plain cryptography."""
    doc = load(DIRECTORY / "invalid" / "small-order-ed25519.json")
    jwk = doc["trust"]["issuers"][0]["keys"][0]
    public = Ed25519PublicKey.from_public_bytes(b64url_decode(jwk["x"], what="x"))
    head, payload, sig = doc["input"][0]["offer"].split(".")
    public.verify(b64url_decode(sig, what="sig"), f"{head}.{payload}".encode())


def test_generator_check_passes() -> None:
    """The same command `make test` runs: regenerating changes nothing, every vector holds."""
    done = subprocess.run(
        [sys.executable, str(DIRECTORY / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "vectors checked: ok" in done.stdout
