"""The CBOR form (profile §3): round trips, COSE WG vectors, one test per rejection, properties."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import cbor2
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from handoff_context import Form, Offer, Status, b64url_decode
from handoff_context import _cose as cose
from handoff_context.errors import CheckFailed, MalformedError, Reason
from hypothesis import given, settings
from hypothesis import strategies as st
from joserfc.jwk import ECKey, OKPKey

# The COSE WG examples, vendored with their provenance (vectors/public/README.md beside this).
COSE_VECTORS = Path(__file__).resolve().parent / "vectors" / "public" / "cose"

EC_KEY = ECKey.generate_key("P-256", private=True)
OKP_KEY = OKPKey.generate_key("Ed25519", private=True)
KEYS = {"ES256": EC_KEY, "Ed25519": OKP_KEY, "EdDSA": OKP_KEY}

HOP = "hop-0123456789abcdefABCD"
DIGEST = bytes(range(32))
ES256_SIG = bytes(64)


def offer_payload(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "v": 1,
        "type": "offer",
        "hop": HOP,
        "dialog": "ctx-42",
        "iss": "spiffe://a.example/agent/planner",
        "aud": "spiffe://b.example/agent/coder",
        "iat": 1_800_000_000,
        "exp": 1_800_000_300,
        "prev": DIGEST,
        "refs": [{"kind": "digest", "digest": DIGEST, "name": "plan.md"}],
    }
    payload.update(changes)
    return payload


def status_payload(**changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "v": 1,
        "type": "status",
        "hop": HOP,
        "offer": DIGEST,
        "iss": "spiffe://b.example/agent/coder",
        "aud": "spiffe://a.example/agent/planner",
        "iat": 1_800_000_010,
        "state": "failed",
        "reason": "policy",
        "detail": "quota exceeded – try later",
    }
    payload.update(changes)
    return payload


def protected_map(changes: dict[Any, Any] | None = None) -> dict[Any, Any]:
    """The profile's protected header {alg ES256, offer content type, kid "p1"}, changed."""
    return {1: -7, 3: cose.OFFER_CONTENT_TYPE, 4: b"p1", **(changes or {})}


def build(
    protected: dict[Any, Any] | bytes | None = None,
    unprotected: dict[Any, Any] | None = None,
    payload: dict[str, Any] | bytes | str | None = "default",
    signature: bytes = ES256_SIG,
    tag: int | None = cose.COSE_SIGN1_TAG,
) -> bytes:
    """A COSE_Sign1 with whatever members a test needs; the signature is not real."""
    if protected is None:
        protected = protected_map()
    if isinstance(protected, dict):
        protected = cbor2.dumps(protected)
    if payload == "default":
        payload = offer_payload()
    if isinstance(payload, dict):
        payload = cbor2.dumps(payload)
    body = [protected, unprotected or {}, payload, signature]
    return cbor2.dumps(body if tag is None else cbor2.CBORTag(tag, body))


def raw_map(pairs: list[tuple[Any, Any]]) -> bytes:
    """Encode a CBOR map from pairs as given, duplicates included (cbor2 cannot)."""
    assert len(pairs) < 24
    return bytes([0xA0 + len(pairs)]) + b"".join(cbor2.dumps(k) + cbor2.dumps(v) for k, v in pairs)


def verifies(alg: str, public: Any, data: bytes, signature: bytes) -> bool:
    try:
        if alg == "ES256":
            if len(signature) != 64:
                return False
            r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
            public.verify(encode_dss_signature(r, s), data, ec.ECDSA(hashes.SHA256()))
        else:
            public.verify(signature, data)
    except InvalidSignature:
        return False
    return True


def malformed(octets: bytes, match: str) -> MalformedError:
    with pytest.raises(MalformedError, match=match) as info:
        cose.parse(octets)
    assert info.value.reason is Reason.MALFORMED
    return info.value


def vector(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((COSE_VECTORS / f"{name}.json").read_text())
    return data


# -- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("alg", ["ES256", "Ed25519", "EdDSA"])
@pytest.mark.parametrize("make", [offer_payload, status_payload])
def test_round_trip(alg: str, make: Any) -> None:
    payload = make()
    octets = cose.sign(payload, key=KEYS[alg], alg=alg, kid="k1")
    element = cose.parse(octets)

    assert element.form is Form.COSE
    assert element.octets == octets
    assert element.digest == hashlib.sha256(octets).digest()
    assert element.raw_payload == payload
    model = Offer if payload["type"] == "offer" else Status
    assert element.payload == model.from_mapping(payload, form=Form.COSE)
    assert element.header.alg == alg
    assert element.header.kid == "k1"
    content_type = cose.OFFER_CONTENT_TYPE if model is Offer else cose.STATUS_CONTENT_TYPE
    assert element.header.content_type == content_type
    assert element.raw_header == {"alg": alg, "content_type": content_type, "kid": "k1"}
    public = KEYS[alg].get_op_key("verify")
    assert verifies(alg, public, element.signing_input, element.signature)
    assert not verifies(alg, public, element.signing_input + b"x", element.signature)


def test_sign_without_kid_and_protected_header_layout() -> None:
    element = cose.parse(cose.sign(offer_payload(), key=EC_KEY, alg="ES256"))
    assert element.header.kid is None
    assert "kid" not in element.raw_header
    sign1 = cose.decode_sign1(element.octets)
    assert sign1.protected_map == {1: -7, 3: cose.OFFER_CONTENT_TYPE}
    assert sign1.unprotected == {}
    assert len(sign1.signature) == 64


def test_resigning_changes_octets_but_not_signed_content() -> None:
    # ECDSA signatures are randomised: the same header and payload signed twice give two
    # elements that differ only in their signature (profile §6.4 "signature-only").
    first = cose.parse(cose.sign(offer_payload(), key=EC_KEY, alg="ES256", kid="p1"))
    second = cose.parse(cose.sign(offer_payload(), key=EC_KEY, alg="ES256", kid="p1"))
    assert first.octets != second.octets
    assert first.digest != second.digest
    assert first.signed_content == second.signed_content
    assert first.signing_input == second.signing_input
    other = cose.parse(cose.sign(offer_payload(dialog="other"), key=EC_KEY, alg="ES256"))
    assert other.signed_content != first.signed_content


def test_sign_encodes_deterministically() -> None:
    reordered = dict(reversed(list(offer_payload().items())))
    a = cose.decode_sign1(cose.sign(offer_payload(), key=OKP_KEY, alg="Ed25519"))
    b = cose.decode_sign1(cose.sign(reordered, key=OKP_KEY, alg="Ed25519"))
    assert a.payload == b.payload
    assert a.signature == b.signature


def test_sign_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="alg"):
        cose.sign(offer_payload(), key=EC_KEY, alg="HS256")
    with pytest.raises(ValueError, match="P-256"):
        cose.sign(offer_payload(), key=OKP_KEY, alg="ES256")
    with pytest.raises(ValueError, match="Ed25519"):
        cose.sign(offer_payload(), key=EC_KEY, alg="Ed25519")
    with pytest.raises(ValueError, match="type"):
        cose.sign(offer_payload(type="other"), key=EC_KEY, alg="ES256")
    public = ECKey.import_key(EC_KEY.as_dict(private=False))
    with pytest.raises(ValueError, match="private key"):
        cose.sign(offer_payload(), key=public, alg="ES256")


def test_alg_tables_agree() -> None:
    assert cose.ALG_BY_LABEL == {-7: "ES256", -8: "EdDSA", -19: "Ed25519"}
    assert {v: k for k, v in cose.LABEL_BY_ALG.items()} == cose.ALG_BY_LABEL


# -- COSE WG vectors ----------------------------------------------------------------------


def test_ecdsa_sig_01_verifies_over_our_sig_structure() -> None:
    data = vector("ecdsa-sig-01")
    sign1 = cose.decode_sign1(bytes.fromhex(data["output"]["cbor"]))
    to_be_signed = cose.sig_structure(sign1.protected, sign1.payload)
    assert to_be_signed == bytes.fromhex(data["intermediates"]["ToBeSign_hex"])
    jwk = data["input"]["sign0"]["key"]
    public = ec.EllipticCurvePublicNumbers(
        int.from_bytes(b64url_decode(jwk["x"], what="x"), "big"),
        int.from_bytes(b64url_decode(jwk["y"], what="y"), "big"),
        ec.SECP256R1(),
    ).public_key()
    assert verifies("ES256", public, to_be_signed, sign1.signature)
    assert sign1.protected_map == {1: -7, 3: 0}
    assert sign1.unprotected == {4: b"11"}


def test_ecdsa_sig_01_is_outside_the_profile() -> None:
    # kid in the unprotected bucket and content type 0 are both refused by the profile.
    malformed(bytes.fromhex(vector("ecdsa-sig-01")["output"]["cbor"]), "unprotected")


def test_eddsa_sig_01_verifies_over_our_sig_structure() -> None:
    data = vector("eddsa-sig-01")
    octets = bytes.fromhex(data["output"]["cbor"])
    sign1 = cose.decode_sign1(octets)
    to_be_signed = cose.sig_structure(sign1.protected, sign1.payload)
    assert to_be_signed == bytes.fromhex(data["intermediates"]["ToBeSign_hex"])
    key = data["input"]["sign0"]["key"]
    public = ed25519.Ed25519PublicKey.from_public_bytes(bytes.fromhex(key["x_hex"]))
    assert verifies("EdDSA", public, to_be_signed, sign1.signature)
    assert cose.ALG_BY_LABEL[sign1.protected_map[1]] == "EdDSA"
    malformed(octets, "unprotected")


def test_sign_fail_01_wrong_tag_is_refused_by_structure() -> None:
    data = vector("sign-fail-01")
    octets = bytes.fromhex(data["output"]["cbor"])
    # The signature itself is valid: only the structure check can catch this vector.
    inner = cbor2.loads(octets).value
    jwk = ECKey.import_key({k: v for k, v in data["input"]["sign0"]["key"].items() if k != "d"})
    to_be_signed = cose.sig_structure(inner[0], inner[2])
    assert verifies("ES256", jwk.get_op_key("verify"), to_be_signed, inner[3])
    with pytest.raises(MalformedError, match="tag 18 is required, found tag 998"):
        cose.decode_sign1(octets)
    malformed(octets, "found tag 998")


def test_sign_fail_02_altered_payload_fails_verification() -> None:
    data = vector("sign-fail-02")
    sign1 = cose.decode_sign1(bytes.fromhex(data["output"]["cbor"]))
    jwk = ECKey.import_key({k: v for k, v in data["input"]["sign0"]["key"].items() if k != "d"})
    to_be_signed = cose.sig_structure(sign1.protected, sign1.payload)
    assert to_be_signed != bytes.fromhex(data["intermediates"]["ToBeSign_hex"])
    assert not verifies("ES256", jwk.get_op_key("verify"), to_be_signed, sign1.signature)


# -- rejections: the envelope -------------------------------------------------------------


def test_baseline_built_element_parses() -> None:
    # Guards the rejection tests below: each changes exactly one thing from this.
    assert cose.parse(build()).header.kid == "p1"


def test_rejects_wrong_tag() -> None:
    malformed(build(tag=998), "found tag 998")


def test_rejects_untagged() -> None:
    malformed(build(tag=None), "untagged")


def test_rejects_trailing_bytes() -> None:
    malformed(build() + b"\x00", "trailing bytes")


def test_rejects_trailing_bytes_inside_the_payload() -> None:
    malformed(build(payload=cbor2.dumps(offer_payload()) + b"\xf6"), "payload: trailing bytes")


def test_rejects_detached_payload() -> None:
    malformed(build(payload=None), "detached payload")


def test_rejects_extra_array_member() -> None:
    body = [cbor2.dumps(protected_map()), {}, cbor2.dumps(offer_payload()), ES256_SIG, b""]
    malformed(cbor2.dumps(cbor2.CBORTag(18, body)), "array of exactly 4")


def test_rejects_missing_array_member() -> None:
    body = [cbor2.dumps(protected_map()), {}, cbor2.dumps(offer_payload())]
    malformed(cbor2.dumps(cbor2.CBORTag(18, body)), "array of exactly 4")


def test_rejects_indefinite_length() -> None:
    octets = build()
    assert octets[1] == 0x84
    malformed(octets[:1] + b"\x9f" + octets[2:] + b"\xff", "indefinite-length")


def test_rejects_indefinite_length_payload_map() -> None:
    encoded = cbor2.dumps(offer_payload())
    payload = b"\xbf" + encoded[1:] + b"\xff"
    malformed(build(payload=payload), "payload: indefinite-length")


def test_rejects_oversize_before_decoding() -> None:
    big = build(payload=offer_payload(pad="x" * (65 * 1024)))
    assert len(big) > 65 * 1024
    malformed(big, "larger than 65536")
    # Refused on size alone: garbage of that length gets the same answer, not a decode error.
    malformed(b"\xff" * (65 * 1024), "larger than 65536")


def test_rejects_non_shortest_envelope_head() -> None:
    # A relay could re-encode the unsigned envelope (here the signature's length head)
    # to change the handoff digest without touching the signature.
    octets = build()
    assert octets.endswith(b"\x58\x40" + ES256_SIG)
    longer = octets[: -len(ES256_SIG) - 2] + b"\x59\x00\x40" + ES256_SIG
    malformed(longer, "shortest CBOR heads")
    malformed(b"\xd8\x12" + build()[1:], "shortest CBOR heads")


@pytest.mark.parametrize(
    ("index", "value", "match"),
    [
        (0, "text", "protected header must be a byte string"),
        (0, b"\x81\x01", "protected header: must encode a CBOR map"),
        (1, [], "unprotected header must be a map"),
        (2, "text", "payload must be a byte string"),
        (3, "sig", "signature must be a byte string"),
        (3, cbor2.CBORTag(2, b"\x01"), "signature must be a byte string"),
    ],
)
def test_rejects_wrong_member_types(index: int, value: Any, match: str) -> None:
    body: list[Any] = [cbor2.dumps(protected_map()), {}, cbor2.dumps(offer_payload()), ES256_SIG]
    body[index] = value
    malformed(cbor2.dumps(cbor2.CBORTag(18, body)), match)


def test_signature_length_is_not_a_parse_error() -> None:
    # A 63-byte ES256 signature is the signature layer's bad-signature, not malformed.
    assert cose.parse(build(signature=bytes(63))).signature == bytes(63)


# -- rejections: duplicate keys -----------------------------------------------------------


def test_rejects_duplicate_key_in_protected() -> None:
    protected = raw_map([(1, -7), (3, cose.OFFER_CONTENT_TYPE), (1, -8)])
    malformed(build(protected=protected), "protected header: duplicate map key 1")


def test_rejects_duplicate_key_in_unprotected() -> None:
    octets = build(unprotected={99: 1})
    assert b"\xa1\x18\x63\x01" in octets
    dup = octets.replace(b"\xa1\x18\x63\x01", b"\xa2\x18\x63\x01\x18\x63\x02")
    malformed(dup, "COSE_Sign1: duplicate map key 99")


def test_rejects_duplicate_key_in_payload() -> None:
    pairs = [*offer_payload().items(), ("aud", "spiffe://evil.example/agent")]
    malformed(build(payload=raw_map(pairs)), "payload: duplicate map key 'aud'")


def test_rejects_duplicate_key_with_a_longer_encoding() -> None:
    # The same key twice in two encodings: caught because keys compare after decoding.
    pairs = list(offer_payload().items())
    body = b"".join(cbor2.dumps(k) + cbor2.dumps(v) for k, v in pairs)
    payload = bytes([0xA0 + len(pairs) + 1]) + body + b"\x78\x03aud" + cbor2.dumps("x")
    malformed(build(payload=payload), "duplicate map key 'aud'")


def test_rejects_duplicate_key_in_nested_ref_map() -> None:
    ref = raw_map([("kind", "digest"), ("digest", DIGEST), ("digest", bytes(32))])
    encoded = cbor2.dumps(offer_payload(refs=["REF"]))
    payload = encoded.replace(cbor2.dumps("REF"), ref)
    malformed(build(payload=payload), "payload: duplicate map key 'digest'")


# -- rejections: headers ------------------------------------------------------------------


def test_rejects_alg_in_unprotected_bucket() -> None:
    protected = {3: cose.OFFER_CONTENT_TYPE}
    malformed(build(protected=protected, unprotected={1: -7}), "alg must be in the protected")


def test_rejects_any_unprotected_member() -> None:
    malformed(build(unprotected={4: b"p1"}), "unprotected header must be empty")


def test_rejects_empty_protected_header() -> None:
    malformed(build(protected=b""), "protected header is empty")
    malformed(build(protected=b"\xa0"), "protected header is empty")


def test_rejects_crit() -> None:
    malformed(build(protected={**protected_map(), 2: [4]}), "crit is not allowed")


def test_rejects_unknown_header_label() -> None:
    malformed(build(protected={**protected_map(), 16: "x"}), "label 16 is not allowed")


@pytest.mark.parametrize("bucket", ["protected", "unprotected"])
@pytest.mark.parametrize("label", [33, 32, 34, 35, "x5chain"])
def test_x5chain_is_untrusted_key(bucket: str, label: int | str) -> None:
    value = [b"0\x82\x01\x00certificate"]
    if bucket == "protected":
        octets = build(protected={**protected_map(), label: value})
    else:
        octets = build(unprotected={label: value})
    with pytest.raises(CheckFailed) as info:
        cose.parse(octets)
    assert info.value.reason is Reason.UNTRUSTED_KEY
    assert "shows nothing about who signed" in info.value.detail


@pytest.mark.parametrize("bucket", ["protected", "unprotected"])
@pytest.mark.parametrize("label", [-1, -2, 13, 14, "jwk"])
def test_embedded_cose_key_is_untrusted_key(bucket: str, label: int | str) -> None:
    public = EC_KEY.get_op_key("verify").public_numbers()
    cose_key = {1: 2, -1: 1, -2: public.x.to_bytes(32, "big"), -3: public.y.to_bytes(32, "big")}
    if bucket == "protected":
        octets = build(protected={**protected_map(), label: cose_key})
    else:
        # A key beside alg in the unprotected bucket still gets the untrusted-key reason.
        octets = build(unprotected={label: cose_key, 1: -7})
    with pytest.raises(CheckFailed) as info:
        cose.parse(octets)
    assert info.value.reason is Reason.UNTRUSTED_KEY


def test_rejects_hmac_alg() -> None:
    malformed(build(protected=protected_map({1: 5})), "HMAC algorithms are not allowed")


@pytest.mark.parametrize("alg", [-35, -257, 0, "ES256", b"\x26", None])
def test_rejects_unknown_alg(alg: Any) -> None:
    malformed(build(protected=protected_map({1: alg})), "alg")


def test_rejects_missing_alg() -> None:
    malformed(build(protected={3: cose.OFFER_CONTENT_TYPE}), "alg .1. is required")


@pytest.mark.parametrize("content_type", ["application/cbor", 0, None, b"x"])
def test_rejects_wrong_content_type(content_type: Any) -> None:
    malformed(build(protected=protected_map({3: content_type})), "content type .3. must be")


def test_rejects_missing_content_type() -> None:
    malformed(build(protected={1: -7}), "content type .3. must be")


def test_rejects_content_type_payload_type_mismatch() -> None:
    octets = build(protected=protected_map({3: cose.STATUS_CONTENT_TYPE}))
    malformed(octets, "does not match the payload type 'offer'")
    malformed(build(payload=status_payload()), "does not match the payload type 'status'")


@pytest.mark.parametrize("kid", [b"p 1", b"\xff\xfe", b"", b"k" * 129, "p1"])
def test_rejects_bad_kid(kid: Any) -> None:
    malformed(build(protected=protected_map({4: kid})), "kid")


# -- rejections: the payload --------------------------------------------------------------


def test_rejects_deep_nesting() -> None:
    nested: Any = 1
    for _ in range(40):
        nested = [nested]
    malformed(build(payload=offer_payload(extra=nested)), "nests deeper than 32 levels")


def test_accepts_nesting_of_exactly_32_levels() -> None:
    nested: Any = 1
    for _ in range(31):  # the payload map itself is the first level
        nested = [nested]
    assert cose.parse(build(payload=offer_payload(extra=nested))).raw_payload["extra"]
    malformed(build(payload=offer_payload(extra=[nested])), "nests deeper than 32 levels")


def test_rejects_deep_nesting_in_the_unprotected_header() -> None:
    nested: Any = 1
    for _ in range(40):
        nested = [nested]
    malformed(build(unprotected={99: nested}), "nests deeper")


def test_rejects_tags_in_payload() -> None:
    payload = offer_payload(iat=cbor2.CBORTag(1, 1_800_000_000))
    malformed(build(payload=payload), "CBOR tags are not allowed")
    malformed(build(payload=offer_payload(x=cbor2.CBORTag(28, [1]))), "tags are not allowed")


def test_rejects_non_text_payload_key() -> None:
    pairs: list[tuple[Any, Any]] = [*offer_payload().items(), (7, "x")]
    malformed(build(payload=raw_map(pairs)), "map keys must be text strings")


def test_rejects_payload_that_is_not_a_map() -> None:
    malformed(build(payload=cbor2.dumps([1, 2])), "payload: must be a CBOR map")
    malformed(build(payload=b""), "payload: the CBOR ends")


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (cbor2.undefined, "simple value 23"),
        (float("nan"), "NaN"),
        (float("inf"), "NaN and infinite"),
    ],
)
def test_rejects_values_outside_the_json_model(value: Any, match: str) -> None:
    malformed(build(payload=offer_payload(x=value)), match)


def test_float_where_an_int_is_needed_is_caught_by_the_model() -> None:
    malformed(build(payload=offer_payload(iat=1_800_000_000.0)), "iat must be an integer")


def test_bad_text_utf8_is_malformed() -> None:
    payload = cbor2.dumps(offer_payload(dialog="ctx-42"))
    malformed(build(payload=payload.replace(b"ctx-42", b"ctx\xed\xa0\x80")), "UTF-8")


# -- properties ---------------------------------------------------------------------------

VALID = [
    cose.sign(offer_payload(), key=EC_KEY, alg="ES256", kid="p1"),
    cose.sign(status_payload(), key=OKP_KEY, alg="Ed25519"),
]
DECLARED = (MalformedError, CheckFailed)


def parse_or_declared_error(octets: bytes) -> None:
    try:
        cose.parse(octets)
    except DECLARED as exc:
        assert exc.detail
        assert isinstance(exc, CheckFailed) is (exc.reason is Reason.UNTRUSTED_KEY)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_declared_errors(octets: bytes) -> None:
    parse_or_declared_error(octets)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(VALID).flatmap(
        lambda v: st.tuples(st.just(v), st.integers(0, len(v) - 1), st.integers(0, 255))
    )
)
def test_single_byte_mutations_raise_only_declared_errors(case: tuple[bytes, int, int]) -> None:
    octets, index, byte = case
    parse_or_declared_error(octets[:index] + bytes([byte]) + octets[index + 1 :])


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(VALID).flatmap(lambda v: st.tuples(st.just(v), st.integers(0, len(v)))))
def test_truncations_are_malformed(case: tuple[bytes, int]) -> None:
    octets, length = case
    if length == len(octets):
        cose.parse(octets)
    else:
        with pytest.raises(MalformedError):
            cose.parse(octets[:length])


JSON_LIKE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(JSON_LIKE)
def test_unknown_members_decode_like_cbor2(value: Any) -> None:
    # Differential check of the strict reader against cbor2 on well-formed input.
    payload = cbor2.dumps(offer_payload(extra=value))
    element = cose.parse(build(payload=payload))
    assert element.raw_payload == cbor2.loads(payload)


# --- cbor2's C decoder where the strict reader would read the same (``_plain_cbor``) -----

CBOR_LIKE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**66), 2**66)  # beyond 64 bits cbor2 writes a bignum tag
    | st.floats()  # NaN and infinities too: the strict reader refuses them
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.sampled_from([cbor2.undefined, cbor2.CBORSimpleValue(16), cbor2.CBORTag(24, b"\x01")]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(max_size=4) | st.integers(-3, 3) | st.booleans(), inner, max_size=4
        )
        | st.builds(cbor2.CBORTag, st.sampled_from([1, 2, 18, 28, 55799]), inner)
    ),
    max_leaves=12,
)


def _strictly(data: bytes, *, text_keys: bool, tags: bool) -> Any:
    """What the pure-Python reader alone makes of ``data``: its value, typed all the way
    down (True is not 1, -0.0 is not 0.0), or the detail it raises."""
    try:
        reader = cose._Reader(data, what="x", tags=tags, text_keys=text_keys)
        value = reader.item()
        reader.end()
    except MalformedError as exc:
        return ("raises", exc.detail)
    return _typed(value)


def _typed(value: Any) -> Any:
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(v) for v in value])
    if isinstance(value, cbor2.CBORTag):
        return ("tag", value.tag, _typed(value.value))
    return (type(value).__name__, repr(value))


def _decoded(data: bytes, *, text_keys: bool, tags: bool) -> Any:
    try:
        return _typed(cose._decode_one(data, what="x", tags=tags, text_keys=text_keys))
    except MalformedError as exc:
        return ("raises", exc.detail)


def _encodings(value: Any) -> st.SearchStrategy[bytes]:
    try:
        plain = cbor2.dumps(value)
        canonical = cbor2.dumps(value, canonical=True)
    except (cbor2.CBOREncodeError, TypeError, ValueError):
        return st.binary(max_size=40)
    return st.sampled_from(
        [plain, canonical]
    ).flatmap(
        lambda octets: st.one_of(
            st.just(octets),
            st.just(octets + b"\x00"),  # trailing bytes
            st.tuples(st.integers(0, max(0, len(octets) - 1)), st.integers(0, 255)).map(
                lambda m: octets[: m[0]] + bytes([m[1]]) + octets[m[0] + 1 :]
            ),
        )
    )


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(st.binary(max_size=60), CBOR_LIKE.flatmap(_encodings)),
    st.booleans(),
    st.booleans(),
)
def test_the_fast_decoder_reads_exactly_what_the_strict_reader_reads(
    data: bytes, text_keys: bool, tags: bool
) -> None:
    assert _decoded(data, text_keys=text_keys, tags=tags) == _strictly(
        data, text_keys=text_keys, tags=tags
    )


@pytest.mark.parametrize(
    "data",
    [
        bytes.fromhex("a2616101616102"),  # {"a": 1, "a": 2}: cbor2 would keep the last
        bytes.fromhex("c249010000000000000000"),  # a bignum tag cbor2 writes back the same
        bytes.fromhex("d9d9f7a0"),  # the self-described CBOR tag around {}
        bytes.fromhex("d81c81d81d00"),  # a shared reference to itself: a cycle
        bytes.fromhex("fb7ff8000000000000"),  # NaN, written as cbor2 writes it
        bytes.fromhex("a0a0"),  # trailing bytes
        bytes.fromhex("1801"),  # a longer head than needed: fine inside the payload
        bytes.fromhex("a1f500"),  # a boolean key
    ],
)
def test_the_fast_decoder_leaves_the_edge_cases_to_the_strict_reader(data: bytes) -> None:
    for text_keys in (False, True):
        assert _decoded(data, text_keys=text_keys, tags=False) == _strictly(
            data, text_keys=text_keys, tags=False
        )
    assert cose._plain_cbor(data, text_keys=False) is cose._NOT_PLAIN


def test_the_fast_decoder_reads_a_plain_payload() -> None:
    payload = cbor2.dumps(offer_payload(extra={"n": [1, -2, 2.5, b"x", None, True]}))
    assert cose._plain_cbor(payload, text_keys=True) == cbor2.loads(payload)
