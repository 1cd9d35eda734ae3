"""Third-party vectors (Wycheproof) through our signature layer, JWS codec and trust store.

The vectors are vendored in ``vectors/public/`` beside this file (provenance, commits,
licences and what each must produce: ``vectors/public/README.md``). They are required:
when a file is missing the module fails to collect with a message saying where it looked,
instead of skipping. The COSE WG examples are covered by test_cose.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from handoff_context import TrustStore, b64url_decode
from handoff_context import _jws as jws
from handoff_context._signature import verify_element, verify_raw
from handoff_context._trust import ed25519_key_problem
from handoff_context.errors import CheckFailed, MalformedError, TrustConfigError
from joserfc.jwk import ECKey, OKPKey

SHARED = Path(__file__).resolve().parent / "vectors" / "public"
WYCHEPROOF = SHARED / "wycheproof"

# vectors/public/README.md: the Wycheproof files at commit dac1dd47 (C2SP/wycheproof).
SHA256 = {
    "ecdsa_secp256r1_sha256_p1363_test.json": (
        "c60de693930e386c3a5472d08081623ef8504decc54b38ac01ec6b2a2575c986"
    ),
    "ed25519_test.json": ("752d2ea7d7c6cf4736381b6cbacb61f8182b126ab7cd9b058f00c50084975536"),
    "json_web_signature_test.json": (
        "8e687a06fe8359f4ec51480f1a9f73c8faebd6f4c01b818b843b44eee54fd5d9"
    ),
}


def _load(name: str) -> dict[str, Any]:
    path = WYCHEPROOF / name
    if not path.is_file():
        # Collection fails (not a skip): these vectors are part of the test suite.
        pytest.fail(
            f"public test vector {path} is missing. The vectors are vendored in "
            "lib/handoff-context/tests/vectors/public/wycheproof/; restore them from git.",
            pytrace=False,
        )
    doc: dict[str, Any] = json.loads(path.read_bytes())
    return doc


def _cases(doc: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return [(g, test) for g, group in enumerate(doc["testGroups"]) for test in group["tests"]]


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_public_vectors_are_the_recorded_files() -> None:
    for name, digest in SHA256.items():
        assert hashlib.sha256((WYCHEPROOF / name).read_bytes()).hexdigest() == digest, name


# --- ECDSA P-256 / SHA-256, IEEE P1363 (raw r||s): the ES256 signature format -------------

ECDSA = _load("ecdsa_secp256r1_sha256_p1363_test.json")
ECDSA_CASES = _cases(ECDSA)


@cache
def ecdsa_key(group: int) -> Any:
    return ECKey.import_key(ECDSA["testGroups"][group]["publicKeyPem"])


def test_ecdsa_counts() -> None:
    results = [t["result"] for _, t in ECDSA_CASES]
    assert (len(results), results.count("valid"), results.count("invalid")) == (262, 173, 89)


@pytest.mark.parametrize(
    ("group", "test"), ECDSA_CASES, ids=[f"tc{t['tcId']}" for _, t in ECDSA_CASES]
)
def test_wycheproof_ecdsa_p1363(group: int, test: dict[str, Any]) -> None:
    # verify_raw must return, never raise, whatever the signature octets are.
    verified = verify_raw(
        "ES256", ecdsa_key(group), bytes.fromhex(test["msg"]), bytes.fromhex(test["sig"])
    )
    assert verified is (test["result"] == "valid"), test["comment"]


# --- Ed25519 ------------------------------------------------------------------------------

ED25519 = _load("ed25519_test.json")
ED25519_CASES = _cases(ED25519)


@cache
def ed25519_key(group: int) -> Any:
    pk = bytes.fromhex(ED25519["testGroups"][group]["publicKey"]["pk"])
    return OKPKey.import_key({"kty": "OKP", "crv": "Ed25519", "x": b64u(pk)})


def test_ed25519_counts() -> None:
    results = [t["result"] for _, t in ED25519_CASES]
    assert (len(results), results.count("valid"), results.count("invalid")) == (151, 88, 63)


@pytest.mark.parametrize(
    ("group", "test"), ED25519_CASES, ids=[f"tc{t['tcId']}" for _, t in ED25519_CASES]
)
def test_wycheproof_ed25519(group: int, test: dict[str, Any]) -> None:
    verified = verify_raw(
        "Ed25519", ed25519_key(group), bytes.fromhex(test["msg"]), bytes.fromhex(test["sig"])
    )
    assert verified is (test["result"] == "valid"), test["comment"]


def test_wycheproof_ed25519_keys_are_accepted_by_the_trust_store() -> None:
    """The refusals below are specific: every ordinary Wycheproof key loads."""
    for group in ED25519["testGroups"]:
        pk = bytes.fromhex(group["publicKey"]["pk"])
        assert ed25519_key_problem(pk) is None
        TrustStore.from_mapping(
            {
                "issuers": [
                    {
                        "id": "urn:example:wycheproof",
                        "keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "k1", "x": b64u(pk)}],
                    }
                ]
            }
        )


# Small-order and non-canonical Ed25519 public keys, computed here with an independent
# implementation of the curve (RFC 8032 5.1), not taken from the code under test.
_P = 2**255 - 19
_D = -121665 * pow(121666, -1, _P) % _P
_L = 2**252 + 27742317777372353535851937790883648493
_IDENTITY = (0, 1)


def _add(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    (x1, y1), (x2, y2) = a, b
    t = _D * x1 * x2 * y1 * y2
    return (
        (x1 * y2 + x2 * y1) * pow(1 + t, -1, _P) % _P,
        (y1 * y2 + x1 * x2) * pow(1 - t, -1, _P) % _P,
    )


def _mul(k: int, point: tuple[int, int]) -> tuple[int, int]:
    out = _IDENTITY
    while k:
        if k & 1:
            out = _add(out, point)
        point = _add(point, point)
        k >>= 1
    return out


def _point_with_y(y: int) -> tuple[int, int] | None:
    x2 = (y * y - 1) * pow(_D * y * y + 1, -1, _P) % _P
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P:
        x = x * pow(2, (_P - 1) // 4, _P) % _P
    return (x, y) if (x * x - x2) % _P == 0 else None


def _encode(point: tuple[int, int]) -> bytes:
    x, y = point
    return (y | (x & 1) << 255).to_bytes(32, "little")


def _order(point: tuple[int, int]) -> int:
    order = 1
    while point != _IDENTITY:
        point = _add(point, point)
        order *= 2
    return order


def small_order_encodings() -> list[bytes]:
    """The 8 points of the torsion subgroup: multiples of a point of order 8 (found as
    L * P for a curve point P whose torsion component has order 8)."""
    y = 2
    while True:
        point = _point_with_y(y)
        if point is not None and _order(torsion := _mul(_L, point)) == 8:
            return [_encode(_mul(k, torsion)) for k in range(8)]
        y += 1


SMALL_ORDER = small_order_encodings()
# y >= p: every non-canonical y encoding, with both sign bits, plus x = 0 with the sign bit.
NON_CANONICAL = [
    (y | sign << 255).to_bytes(32, "little") for y in range(_P, 2**255) for sign in (0, 1)
] + [(1 | 1 << 255).to_bytes(32, "little"), ((_P - 1) | 1 << 255).to_bytes(32, "little")]


def test_small_order_encodings_are_the_known_eight() -> None:
    # The well-known list (e.g. libsodium's blocklist, "Taming the many EdDSAs" table 6).
    known = {
        bytes.fromhex(h)
        for h in (
            "0100000000000000000000000000000000000000000000000000000000000000",
            "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
            "0000000000000000000000000000000000000000000000000000000000000000",
            "0000000000000000000000000000000000000000000000000000000000000080",
            "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
            "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
            "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
            "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
        )
    }
    assert set(SMALL_ORDER) == known


def _trust_with(x: bytes) -> dict[str, Any]:
    return {
        "issuers": [
            {
                "id": "spiffe://evil.example/agent/small",
                "keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "bad-1", "x": b64u(x)}],
            }
        ]
    }


@pytest.mark.parametrize("encoded", SMALL_ORDER, ids=lambda b: b.hex()[:8] + b.hex()[-2:])
def test_trust_store_refuses_small_order_ed25519_key(encoded: bytes) -> None:
    assert ed25519_key_problem(encoded) is not None
    with pytest.raises(TrustConfigError, match=r"small order|non-canonical"):
        TrustStore.from_mapping(_trust_with(encoded))


@pytest.mark.parametrize("encoded", NON_CANONICAL, ids=lambda b: b.hex()[:4] + b.hex()[-2:])
def test_trust_store_refuses_non_canonical_ed25519_key(encoded: bytes) -> None:
    assert ed25519_key_problem(encoded) is not None
    with pytest.raises(TrustConfigError, match=r"non-canonical|not a point|small order"):
        TrustStore.from_mapping(_trust_with(encoded))


def test_identity_key_forgery_verifies_below_the_trust_store_but_the_key_is_refused() -> None:
    """README: with the identity point as public key, (R = identity, S = 0) verifies over any
    message under cryptography and our signature layer; only the trust store stops it."""
    identity = SMALL_ORDER[0]
    assert identity == (1).to_bytes(32, "little")
    forged = identity + bytes(32)
    for message in (b"", b"any message at all", b"eyJhbGciOiJFZDI1NTE5In0.e30"):
        Ed25519PublicKey.from_public_bytes(identity).verify(forged, message)
        key = OKPKey.import_key({"kty": "OKP", "crv": "Ed25519", "x": b64u(identity)})
        assert verify_raw("Ed25519", key, message, forged) is True
    with pytest.raises(TrustConfigError, match="small order"):
        TrustStore.from_mapping(_trust_with(identity))


# --- Wycheproof JWS ------------------------------------------------------------------------

JWS = _load("json_web_signature_test.json")
JWS_CASES = _cases(JWS)
RELEVANT_GROUPS = ("es256", "SpecialCaseEs256")
WYCHEPROOF_ISS = "urn:example:wycheproof"
# Upstream quirks in the HS256 "base64" group (vectors/public/README.md): 367 and 370 are
# byte-identical to the valid tcId 357 yet marked invalid; 372 and 373 contain a "?" yet are
# marked valid. This profile refuses HS256 whatever the token, so they test nothing here.
QUIRKS = {
    367: "upstream quirk: byte-identical to the valid tcId 357 but marked invalid (HS256)",
    370: "upstream quirk: byte-identical to the valid tcId 357 but marked invalid (HS256)",
    372: "upstream quirk: contains '?' but marked valid (HS256)",
    373: "upstream quirk: contains '?' but marked valid (HS256)",
}


def _jws_params(relevant: bool) -> list[Any]:
    params = []
    for g, test in JWS_CASES:
        if (JWS["testGroups"][g]["comment"] in RELEVANT_GROUPS) is not relevant:
            continue
        # The four upstream quirks (QUIRKS) need no skip: whatever upstream expects of them,
        # they are HS256 and this profile refuses them, which is what the test asserts.
        params.append(pytest.param(g, test, id=f"tc{test['tcId']}"))
    return params


def _group_jwk(group: int) -> dict[str, Any]:
    doc = JWS["testGroups"][group]
    jwk: dict[str, Any] = doc.get("public") or doc["private"]
    return jwk


@cache
def _trust_for(group: int) -> TrustStore:
    jwk = _group_jwk(group)
    return TrustStore.from_mapping({"issuers": [{"id": WYCHEPROOF_ISS, "keys": [jwk]}]})


def signature_layer_accepts(token: str, key: Any) -> bool:
    """Our ES256 signature check alone over header.payload. A token that does not have three
    base64url parts has no signature to check, so it counts as not accepted."""
    parts = token.split(".")
    if len(parts) != 3:
        return False
    try:
        signature = b64url_decode(parts[2], what="signature")
        for part in parts[:2]:
            b64url_decode(part, what="part")
    except MalformedError:
        return False
    return verify_raw("ES256", key, f"{parts[0]}.{parts[1]}".encode(), signature)


def full_verdict(token: str, trust: TrustStore) -> str:
    """'parse' (refused by jws.parse), 'signature' (refused by verify_element) or 'accepted'."""
    try:
        element = jws.parse(token.encode("utf-8"))
    except (MalformedError, CheckFailed):
        return "parse"
    try:
        verify_element(element, trust)
    except CheckFailed:
        return "signature"
    return "accepted"


def test_relevant_jws_groups_are_the_expected_tests() -> None:
    ids = {
        name: sorted(t["tcId"] for g, t in JWS_CASES if JWS["testGroups"][g]["comment"] == name)
        for name in RELEVANT_GROUPS
    }
    assert ids == {"es256": list(range(18, 33)), "SpecialCaseEs256": list(range(378, 402))}
    assert all(
        JWS["testGroups"][g]["comment"] == "base64" for g, t in JWS_CASES if t["tcId"] in QUIRKS
    )


@pytest.mark.parametrize(("group", "test"), _jws_params(relevant=True))
def test_wycheproof_jws_es256(group: int, test: dict[str, Any]) -> None:
    token = test["jws"]
    trust = _trust_for(group)
    key = trust.keys_for(WYCHEPROOF_ISS)[0].key  # type: ignore[index]
    if test["result"] == "valid":
        # The signature is good, and our signature layer says so ...
        assert signature_layer_accepts(token, key)
        # ... but the token has no typ (and its payload "foo" is no offer), so this profile
        # refuses it at parse as malformed: it is a valid JWS, not a valid handoff element.
        with pytest.raises(MalformedError, match="typ"):
            jws.parse(token.encode())
    else:
        assert not signature_layer_accepts(token, key)
        assert full_verdict(token, trust) != "accepted"


@pytest.mark.parametrize(("group", "test"), _jws_params(relevant=False))
def test_wycheproof_jws_other_groups_are_refused(group: int, test: dict[str, Any]) -> None:
    """HS*/RS*/PS*/ES512 and key-use groups: the algorithm or key is not in the profile."""
    try:
        trust = _trust_for(group)
    except TrustConfigError:
        # The group's key cannot even be configured (private, RSA, oct, P-521). Judge the
        # token against the es256 key instead: it must still be refused.
        jwk = _group_jwk(group)
        assert jwk["kty"] != "EC" or jwk.get("crv") != "P-256" or "d" in jwk
        trust = _trust_for(
            next(g for g, _ in JWS_CASES if JWS["testGroups"][g]["comment"] == "es256")
        )
    assert full_verdict(test["jws"], trust) != "accepted"
