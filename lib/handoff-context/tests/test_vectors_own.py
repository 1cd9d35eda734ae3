"""The project's own vectors (tests/vectors/): each stored file produces exactly its verdicts.

The files are what other implementations test against, so they are checked as stored, through
the same path as ``handoff-trace verify`` (``app.ingest.verifying.verify_inputs``); the generator's
``--check`` (run here too) proves the stored files are what the generator writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from handoff_context.encoding import b64url_decode
from handoff_context.trust import TrustStore

from tests.vectors import generate

VECTORS = generate.stored_vectors()

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
    assert generate.check_document(load(path)) == []


def test_shared_trust_file_loads_from_disk() -> None:
    store = TrustStore.load(generate.HERE / "trust.json")
    assert "spiffe://evil.example/agent/mallory" not in store
    assert len(store.keys_for("spiffe://a.example/agent/planner") or ()) == 2


def test_small_order_vector_carries_a_real_forgery() -> None:
    """The refused key is not a formality: its input verifies under plain cryptography."""
    doc = load(generate.HERE / "invalid" / "small-order-ed25519.json")
    jwk = doc["trust"]["issuers"][0]["keys"][0]
    public = Ed25519PublicKey.from_public_bytes(b64url_decode(jwk["x"], what="x"))
    head, payload, sig = doc["input"][0]["offer"].split(".")
    public.verify(b64url_decode(sig, what="sig"), f"{head}.{payload}".encode())


def test_generator_check_passes() -> None:
    """The same command `make test` runs: regenerating changes nothing, every vector holds."""
    done = subprocess.run(
        [sys.executable, str(generate.HERE / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "vectors checked: ok" in done.stdout


# --- the example captures that `make run` verifies (examples/) -------------------------------

EXAMPLES = generate.HERE.parents[1] / "examples"
EXAMPLE_VERDICTS = [
    ("capture.jsonl:1", "accept", None),
    ("capture.jsonl:2", "accept", None),
    ("capture.jsonl:3", "accept", None),
    ("capture.jsonl:4", "accept", None),
    ("capture.jsonl:5", "accept", None),
    ("capture.jsonl:6", "duplicate", None),
    ("capture.jsonl:7", "accept", None),
    ("capture.jsonl:8", "pending", None),
    ("capture.jsonl:9", "accept", None),
    ("capture.jsonl:10", "accept", None),
    ("broken.jsonl:1", "reject", "broken-chain"),
    ("broken.jsonl:2", "accept", None),
    ("broken.jsonl:3", "reject", "equivocation"),
    ("broken.jsonl:4", "reject", "stale"),
    ("broken.jsonl:5", "reject", "untrusted-key"),
    ("broken.jsonl:6", "reject", "wrong-audience"),
    ("broken.jsonl:7", "reject", "bad-signature"),
    ("broken.jsonl:8", "reject", "policy"),
    ("broken.jsonl:9", "reject", "malformed"),
]


def test_examples_are_what_make_examples_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_examples.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_make_run_shows_the_documented_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    """The command line of `make run`, through the CLI, exits 1 (some rejections)."""
    from app.cli import main

    status = main(
        [
            "verify",
            "--json",
            "--trust",
            str(EXAMPLES / "trust.json"),
            "--at",
            "1793000030",
            str(EXAMPLES / "capture.jsonl"),
            str(EXAMPLES / "broken.jsonl"),
        ]
    )
    verdicts = json.loads(capsys.readouterr().out)
    got = [(Path(v["source"]).name, v["outcome"], v["reason"]) for v in verdicts]
    assert got == EXAMPLE_VERDICTS
    assert status == 1
    equivocation = verdicts[12]["equivocation"]
    assert equivocation is not None and equivocation["variant"] == "content"
    assert verdicts[4]["chain"]["length"] == 3 and not verdicts[4]["chain"]["partial"]
