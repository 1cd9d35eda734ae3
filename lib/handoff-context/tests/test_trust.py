"""The trust configuration (profile §4): what loads, and every refusal with a clear message."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from handoff_context import Signer, TrustStore, b64url_encode, trust_document
from handoff_context._trust import ed25519_key_problem
from handoff_context.errors import TrustConfigError
from parties import World

PLANNER = "spiffe://a.example/agent/planner"


@pytest.fixture(scope="module")
def ec() -> Signer:
    return Signer.generate(PLANNER, "ES256", kid="p-es1")


@pytest.fixture(scope="module")
def ed() -> Signer:
    return Signer.generate("spiffe://b.example/agent/coder", "Ed25519", kid="c-ed1")


def jwk(signer: Signer, **changes: Any) -> dict[str, Any]:
    key: dict[str, Any] = signer.trust_entry()["keys"][0]
    key.update(changes)
    return {k: v for k, v in key.items() if v is not None}


def doc_with(*keys: dict[str, Any], ident: str = PLANNER) -> dict[str, Any]:
    return {"issuers": [{"id": ident, "keys": list(keys)}]}


def refused(doc: Any, *words: str) -> str:
    with pytest.raises(TrustConfigError) as info:
        TrustStore.from_mapping(doc)
    message = str(info.value)
    for word in words:
        assert word in message, message
    return message


def write(tmp_path: Path, doc: Any, mode: int = 0o644) -> Path:
    path = tmp_path / "trust.json"
    path.write_text(json.dumps(doc))
    path.chmod(mode)
    return path


# --- what loads ---------------------------------------------------------------------------------


def test_loads_ec_and_okp_keys(world: World) -> None:
    store = world.trust
    planner = store.keys_for(world.planner.iss)
    assert planner is not None and [k.kid for k in planner] == ["p-ed1", "p-ed2"]
    assert [k.kty for k in store.keys_for(world.coder.iss) or ()] == ["EC"]
    assert world.coder.iss in store and world.mallory.iss not in store
    assert store.keys_for(world.mallory.iss) is None


def test_loaded_keys_are_public_only(ec: Signer, ed: Signer) -> None:
    store = TrustStore.from_mapping({"issuers": [ec.trust_entry(), ed.trust_entry()]})
    for keys in store.issuers.values():
        for key in keys:
            assert "d" not in key.key.as_dict(private=False)
            assert not key.key.is_private


def test_load_from_file(tmp_path: Path, ec: Signer) -> None:
    store = TrustStore.load(write(tmp_path, {"issuers": [ec.trust_entry()]}))
    assert PLANNER in store


@pytest.mark.parametrize("alg", ["ES256", None])
def test_ec_key_with_fitting_or_no_alg(ec: Signer, alg: str | None) -> None:
    TrustStore.from_mapping(doc_with(jwk(ec, alg=alg, use="sig")))


@pytest.mark.parametrize("alg", ["Ed25519", "EdDSA", None])
def test_okp_key_with_fitting_or_no_alg(ed: Signer, alg: str | None) -> None:
    TrustStore.from_mapping(doc_with(jwk(ed, alg=alg)))


def test_fingerprint_is_stable_and_follows_every_change(ec: Signer, ed: Signer) -> None:
    doc = {"issuers": [ec.trust_entry(), ed.trust_entry()]}
    first = TrustStore.from_mapping(doc).fingerprint
    assert TrustStore.from_mapping({"issuers": doc["issuers"][::-1]}).fingerprint == first
    renamed = {"issuers": [ec.trust_entry(), {**ed.trust_entry(), "id": "urn:example:other"}]}
    assert TrustStore.from_mapping(renamed).fingerprint != first
    other = Signer.generate(ed.iss, "Ed25519", kid="c-ed1")
    assert (
        TrustStore.from_mapping({"issuers": [ec.trust_entry(), other.trust_entry()]}).fingerprint
        != first
    )


# --- refusals, each with a message that says what to fix -----------------------------------------


@pytest.mark.parametrize("member", ["d", "p", "q", "dp", "dq", "qi", "k"])
def test_private_key_material_is_refused(ec: Signer, member: str) -> None:
    key = jwk(ec, **{member: "AAAA"})
    message = refused(doc_with(key), "private key material", member, PLANNER)
    assert "public keys only" in message


def test_real_private_jwk_is_refused(ec: Signer) -> None:
    private = dict(ec.key.as_dict(private=True))
    refused(doc_with(private), "private key material", "d")


def test_small_order_ed25519_key_is_refused() -> None:
    identity = (1).to_bytes(32, "little")
    key = {"kty": "OKP", "crv": "Ed25519", "kid": "bad", "x": b64url_encode(identity)}
    refused(doc_with(key), "small order", "forged", PLANNER)


def test_non_canonical_ed25519_key_is_refused() -> None:
    y = (2**255 - 19 + 1).to_bytes(32, "little")  # y = p + 1
    key = {"kty": "OKP", "crv": "Ed25519", "kid": "bad", "x": b64url_encode(y)}
    refused(doc_with(key), "non-canonical")


def test_ed25519_encoding_that_is_no_point_is_refused() -> None:
    # y = 2 has no x on the curve.
    assert ed25519_key_problem((2).to_bytes(32, "little")) == "not a point on Ed25519"
    key = {
        "kty": "OKP",
        "crv": "Ed25519",
        "kid": "bad",
        "x": b64url_encode((2).to_bytes(32, "little")),
    }
    refused(doc_with(key), "not a point")


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"kty": "RSA", "crv": None}, ("unsupported", "RSA")),
        ({"kty": "oct"}, ("unsupported", "oct")),
        ({"crv": "P-384"}, ("unsupported", "P-384")),
        ({"crv": "secp256k1"}, ("unsupported",)),
        ({"kty": None}, ("unsupported",)),
        ({"alg": "EdDSA"}, ("does not fit", "EdDSA")),
        ({"alg": "ES384"}, ("does not fit",)),
        ({"alg": "HS256"}, ("does not fit",)),
    ],
)
def test_ec_key_of_wrong_type_or_alg_is_refused(
    ec: Signer, changes: dict[str, Any], words: tuple[str, ...]
) -> None:
    refused(doc_with(jwk(ec, **changes)), *words)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"crv": "X25519"}, ("unsupported", "X25519")),
        ({"crv": "Ed448"}, ("unsupported",)),
        ({"alg": "ES256"}, ("does not fit", "ES256")),
    ],
)
def test_okp_key_of_wrong_curve_or_alg_is_refused(
    ed: Signer, changes: dict[str, Any], words: tuple[str, ...]
) -> None:
    refused(doc_with(jwk(ed, **changes)), *words)


def test_ec_point_not_on_the_curve_is_refused(ec: Signer) -> None:
    key = jwk(ec)
    y = bytearray(32)
    y[-1] = 1
    key["y"] = b64url_encode(bytes(y))
    refused(doc_with(key), "not on P-256")


@pytest.mark.parametrize(
    ("member", "value", "word"),
    [
        ("x", None, "missing"),
        ("x", "AAAA", "32 octets"),
        ("x", "AA==", "base64url"),
        ("y", None, "missing"),
    ],
)
def test_key_members_are_checked(ec: Signer, member: str, value: Any, word: str) -> None:
    refused(doc_with(jwk(ec, **{member: value})), word)


@pytest.mark.parametrize(
    "doc",
    [
        {"issuers": []},
        {},
        {"keys": []},
        [],
        {"issuers": {}},
        "issuers",
        None,
    ],
)
def test_no_issuer_at_all_is_refused(doc: Any) -> None:
    with pytest.raises(TrustConfigError, match="issuer"):
        TrustStore.from_mapping(doc)


def test_empty_issuer_list_fails_closed() -> None:
    refused({"issuers": []}, "no issuer", "refusing")


def test_duplicate_kid_is_refused(ec: Signer) -> None:
    twin = Signer.generate(PLANNER, "ES256", kid="p-es1")
    refused(doc_with(jwk(ec), jwk(twin)), "two keys with one kid", PLANNER)


def test_issuer_listed_twice_is_refused(ec: Signer, ed: Signer) -> None:
    doc = {"issuers": [ec.trust_entry(), {**ed.trust_entry(), "id": PLANNER}]}
    refused(doc, "listed twice", PLANNER)


def test_issuer_without_keys_is_refused() -> None:
    refused({"issuers": [{"id": PLANNER, "keys": []}]}, "at least one key", PLANNER)
    refused({"issuers": [{"id": PLANNER}]}, "at least one key")


@pytest.mark.parametrize("kid", [None, "", "a b", "k" * 129, 5])
def test_key_without_valid_kid_is_refused(ec: Signer, kid: Any) -> None:
    key = jwk(ec)
    key.pop("kid")
    if kid is not None:
        key["kid"] = kid
    refused(doc_with(key), "kid")


@pytest.mark.parametrize("ident", ["", "a b", "spiffe://x\u202e", None, 7])
def test_bad_issuer_identifier_is_refused(ec: Signer, ident: Any) -> None:
    refused(doc_with(jwk(ec), ident=ident), "issuers[0]")


def test_entry_and_key_that_are_not_objects_are_refused() -> None:
    refused({"issuers": ["spiffe://a"]}, "must be an object")
    refused({"issuers": [{"id": PLANNER, "keys": ["AAAA"]}]}, "JWK object")


# --- the file itself ------------------------------------------------------------------------------


def test_world_writable_file_is_refused(tmp_path: Path, ec: Signer) -> None:
    path = write(tmp_path, {"issuers": [ec.trust_entry()]}, mode=0o666)
    with pytest.raises(TrustConfigError, match="writable by every user") as info:
        TrustStore.load(path)
    assert "chmod o-w" in str(info.value)


def test_group_readable_file_is_fine(tmp_path: Path, ec: Signer) -> None:
    TrustStore.load(write(tmp_path, {"issuers": [ec.trust_entry()]}, mode=0o640))


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TrustConfigError, match="cannot read trust file"):
        TrustStore.load(tmp_path / "nope.json")


def test_unreadable_file_is_refused(
    tmp_path: Path, ec: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, {"issuers": [ec.trust_entry()]}, mode=0o000)
    if os.geteuid() == 0:
        # root reads through mode 000, so simulate the permission error the OS would give.
        def deny(self: Path) -> bytes:
            raise PermissionError(13, "Permission denied", str(self))

        monkeypatch.setattr(Path, "read_bytes", deny)
    with pytest.raises(TrustConfigError, match=r"cannot read trust file.*Permission denied"):
        TrustStore.load(path)


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TrustConfigError, match="not a regular file"):
        TrustStore.load(tmp_path)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b"\xef\xbb\xbf{}",
        b'{"issuers": [], "issuers": []}',
        b"\xff\xfe{\x00}\x00",
    ],
)
def test_file_that_is_not_strict_json_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "trust.json"
    path.write_bytes(content)
    path.chmod(stat.S_IRUSR | stat.S_IWUSR)
    with pytest.raises(TrustConfigError):
        TrustStore.load(path)


def test_trust_document_helper_round_trips(world: World) -> None:
    doc = trust_document([world.coder, world.tester])
    store = TrustStore.from_mapping(json.loads(json.dumps(doc)))
    assert set(store.issuers) == {world.coder.iss, world.tester.iss}
