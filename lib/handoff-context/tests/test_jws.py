"""The JSON form (profile §2) and the payload model behind it (profile §1): one test per rule.

Elements are forged with correct signatures wherever possible, so that each refusal is the
rule under test and not a broken signature.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from handoff_context import (
    Form,
    Offer,
    Signer,
    Status,
    StatusState,
    b64url_decode,
    b64url_encode,
    offer_payload,
    sign_payload,
    strict_json_loads,
)
from handoff_context import _jws as jws
from handoff_context._signature import sign_raw
from handoff_context.errors import CheckFailed, MalformedError, Reason
from parties import T0, World

HOP = "aG9wLWlkZW50aWZpZXItMDE"  # 23 characters
DIGEST = hashlib.sha256(b"previous offer").digest()


def offer(world: World, **changes: Any) -> dict[str, Any]:
    payload = offer_payload(
        iss=world.planner.iss, aud=world.coder.iss, dialog="ctx-1", iat=T0, hop=HOP
    )
    payload.update(changes)
    return payload


def status(world: World, **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "v": 1,
        "type": "status",
        "hop": HOP,
        "offer": b64url_encode(DIGEST),
        "iss": world.coder.iss,
        "aud": world.planner.iss,
        "iat": T0 + 5,
        "state": "accepted",
    }
    payload.update(changes)
    return payload


def _octets(value: dict[str, Any] | bytes) -> bytes:
    if isinstance(value, bytes):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def forge(
    signer: Signer,
    payload: dict[str, Any] | bytes,
    header: dict[str, Any] | bytes | None = None,
    **header_changes: Any,
) -> bytes:
    """A compact JWS correctly signed by ``signer`` over any header and payload octets."""
    if header is None:
        typ = (
            jws.STATUS_TYP
            if isinstance(payload, dict) and payload.get("type") == "status"
            else jws.OFFER_TYP
        )
        header = {"alg": signer.alg, "typ": typ, "kid": signer.kid}
        header.update(header_changes)
        header = {k: v for k, v in header.items() if v is not None}
    signing_input = f"{b64url_encode(_octets(header))}.{b64url_encode(_octets(payload))}"
    signature = sign_raw(signer.alg, signer.key, signing_input.encode())
    return f"{signing_input}.{b64url_encode(signature)}".encode()


def malformed(octets: bytes, match: str) -> None:
    with pytest.raises(MalformedError, match=match) as info:
        jws.parse(octets)
    assert info.value.reason is Reason.MALFORMED


# --- what parse returns ---------------------------------------------------------------------


def test_parse_round_trip_keeps_octets_and_digest(world: World) -> None:
    octets = sign_payload(
        offer_payload(
            iss=world.planner.iss,
            aud=world.coder.iss,
            dialog="ctx-1",
            iat=T0,
            hop=HOP,
            prev=DIGEST,
            task="t-1",
            obo="mailto:a@example.com",
        ),
        world.planner,
    )
    element = jws.parse(octets)
    assert element.octets == octets
    assert element.digest == hashlib.sha256(octets).digest()
    assert element.signing_input == octets.rsplit(b".", 1)[0]
    assert element.signed_content == element.signing_input
    # Each part where it belongs (``parse`` builds the element positionally).
    header_b64, payload_b64, sig_b64 = octets.decode().split(".")
    assert element.form is Form.JWS
    assert element.raw_header == json.loads(b64url_decode(header_b64, what="header"))
    assert element.raw_payload == json.loads(b64url_decode(payload_b64, what="payload"))
    assert element.signature == b64url_decode(sig_b64, what="signature")
    assert isinstance(element.payload, Offer)
    assert element.payload.prev == DIGEST and element.payload.task == "t-1"
    assert element.header.alg == "Ed25519" and element.header.kid == "p-ed1"
    assert element.header.content_type == jws.OFFER_TYP


def test_parse_status(world: World) -> None:
    element = jws.parse(
        forge(
            world.coder, status(world, state="failed", reason="policy", detail="quota – try later")
        )
    )
    assert isinstance(element.payload, Status)
    assert element.payload.state is StatusState.FAILED
    assert element.payload.offer == DIGEST
    assert element.header.content_type == jws.STATUS_TYP


def test_a_known_header_parses_as_a_new_one(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Headers that passed are remembered by their text (``_KNOWN_HEADERS``): the second
    element with the same header parses exactly as if it were the first, each element gets
    a header map of its own, and a header that fails is refused every time, not kept."""
    monkeypatch.setattr(jws, "_KNOWN_HEADERS", {})
    first, second = (
        forge(world.planner, offer(world)),
        forge(world.planner, offer(world, hop=HOP + "x")),
    )
    fresh = jws.parse(second)
    jws._KNOWN_HEADERS.clear()
    cold = [jws.parse(first), jws.parse(second)]  # the second one from the memo
    assert len(jws._KNOWN_HEADERS) == 1
    assert cold[1] == fresh and cold[1].raw_header == fresh.raw_header
    assert cold[0].raw_header is not cold[1].raw_header
    bad = forge(world.mallory, offer(world), jwk={"kty": "OKP"})
    for _ in range(2):
        with pytest.raises(CheckFailed):
            jws.parse(bad)
    assert len(jws._KNOWN_HEADERS) == 1
    # A known header does not hide what is wrong after it.
    payload_b64 = second.split(b".")[1]
    malformed(second.replace(payload_b64, payload_b64 + b"="), "payload is not base64url")


def test_signature_facts_are_what_parse_reads(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``signature_facts`` (what ``verify --jobs``'s helper reads ahead) gives, wherever
    ``parse`` accepts the octets, the facts the signature check reads from the parsed
    element; it gives nothing for a header not met before, and never raises."""
    monkeypatch.setattr(jws, "_KNOWN_HEADERS", {})
    good = [
        forge(world.planner, offer(world)),
        forge(world.coder, offer(world, iss=world.coder.iss, hop=HOP + "y")),
        forge(world.coder, status(world)),
    ]
    assert [jws.signature_facts(o) for o in good] == [None, None, None]  # headers unknown
    for octets in good:
        element = jws.parse(octets)
        assert jws.signature_facts(octets) == (
            element.payload.iss,
            element.payload.iat,
            element.header.alg,
            element.header.kid,
            element.signing_input,
            element.signature,
        )
    header_b64, payload_b64, sig_b64 = good[0].split(b".")
    odd = [
        b"\xff" + good[0],
        header_b64 + b"." + payload_b64,
        header_b64 + b".!!." + sig_b64,
        header_b64 + b"." + b64url_encode(b"[1]").encode() + b"." + sig_b64,
        header_b64 + b"." + b64url_encode(b'{"iss":1,"iat":2}').encode() + b"." + sig_b64,
        header_b64 + b"." + b64url_encode(b'{"iss":"a","iat":true}').encode() + b"." + sig_b64,
        header_b64 + b"." + b64url_encode(b"{").encode() + b"." + sig_b64,
    ]
    assert [jws.signature_facts(o) for o in odd] == [None] * len(odd)


def test_sign_writes_only_alg_typ_kid_and_no_padding(world: World) -> None:
    octets = sign_payload(offer(world), world.coder)
    assert b"=" not in octets
    header = json.loads(base64.urlsafe_b64decode(octets.split(b".")[0] + b"=="))
    assert header == {"alg": "ES256", "typ": jws.OFFER_TYP, "kid": "c-es1"}
    assert len(base64.urlsafe_b64decode(octets.split(b".")[2] + b"==")) == 64


@pytest.mark.parametrize("alg", ["Ed25519", "EdDSA"])
def test_both_names_of_ed25519_are_accepted(world: World, alg: str) -> None:
    assert jws.parse(forge(world.planner, offer(world), alg=alg)).header.alg == alg


# --- the protected header (profile §2) ------------------------------------------------------------


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
def test_alg_none_is_malformed(world: World, alg: str) -> None:
    header = b64url_encode(_octets({"alg": alg, "typ": jws.OFFER_TYP}))
    malformed(f"{header}.{b64url_encode(_octets(offer(world)))}.".encode(), "none")


@pytest.mark.parametrize("alg", ["HS256", "HS512", "RS256", "PS256", "ES384", "ES256K", "es256"])
def test_other_algorithms_are_malformed(world: World, alg: str) -> None:
    malformed(forge(world.coder, offer(world), alg=alg), "not allowed")


def test_missing_alg_is_malformed(world: World) -> None:
    malformed(forge(world.coder, offer(world), header={"typ": jws.OFFER_TYP}), "alg")


@pytest.mark.parametrize("member", ["jwk", "jku", "x5u", "x5c"])
def test_key_carrying_header_is_untrusted_key(world: World, member: str) -> None:
    octets = forge(world.mallory, offer(world), **{member: "https://evil.example/k"})
    with pytest.raises(CheckFailed) as info:
        jws.parse(octets)
    assert info.value.reason is Reason.UNTRUSTED_KEY
    assert member in info.value.detail


def test_key_carrying_member_wins_over_other_refusals(world: World) -> None:
    """A header with jwk and crit says untrusted-key: the reason should name the key."""
    octets = forge(world.mallory, offer(world), jwk={"kty": "OKP"}, crit=["exp"])
    with pytest.raises(CheckFailed) as info:
        jws.parse(octets)
    assert info.value.reason is Reason.UNTRUSTED_KEY


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("crit", ["exp"]),
        ("crit", []),
        ("b64", False),
        ("b64", True),
        ("zip", "DEF"),
        ("cty", "json"),
        ("x-extra", 1),
        ("exp", T0),
    ],
)
def test_header_member_outside_alg_typ_kid_is_malformed(
    world: World, member: str, value: Any
) -> None:
    malformed(forge(world.planner, offer(world), **{member: value}), member)


def test_missing_typ_is_malformed(world: World) -> None:
    malformed(forge(world.planner, offer(world), typ=None), "typ")


@pytest.mark.parametrize("typ", ["JWT", "jose", "handoff-offer", "application/handoff-offer+jws"])
def test_unknown_typ_is_malformed(world: World, typ: str) -> None:
    malformed(forge(world.planner, offer(world), typ=typ), "typ")


def test_offer_under_status_typ_is_malformed(world: World) -> None:
    malformed(forge(world.planner, offer(world), typ=jws.STATUS_TYP), "typ")


def test_status_under_offer_typ_is_malformed(world: World) -> None:
    malformed(forge(world.coder, status(world), typ=jws.OFFER_TYP), "typ")


@pytest.mark.parametrize("kid", ["", "a b", "k\x00", "k\u202e", "ключ", "k" * 129, 7])
def test_bad_kid_is_malformed(world: World, kid: Any) -> None:
    malformed(forge(world.planner, offer(world), kid=kid), "kid")


def test_kid_of_128_characters_is_allowed(world: World) -> None:
    assert jws.parse(forge(world.planner, offer(world), kid="k" * 128)).header.kid == "k" * 128


# --- serialization and base64url (profile §2, §1.3) -----------------------------------------------


@pytest.mark.parametrize("parts", [1, 2, 4, 5])
def test_not_three_parts_is_malformed(world: World, parts: int) -> None:
    pieces = forge(world.planner, offer(world)).split(b".")
    pieces = (pieces * 2)[:parts]
    malformed(b".".join(pieces), "parts")


@pytest.mark.parametrize("flattened", [True, False])
def test_json_serialization_is_malformed(world: World, flattened: bool) -> None:
    h, p, s = forge(world.planner, offer(world)).decode().split(".")
    doc = (
        {"protected": h, "payload": p, "signature": s}
        if flattened
        else {"payload": p, "signatures": [{"protected": h, "signature": s}]}
    )
    malformed(json.dumps(doc).encode(), "Serialization")
    malformed(b"  \n" + json.dumps(doc).encode(), "Serialization")


@pytest.mark.parametrize("part", [0, 1, 2])
def test_padding_in_any_part_is_malformed(world: World, part: int) -> None:
    pieces = forge(world.planner, offer(world)).split(b".")
    pieces[part] += b"=" * (-len(pieces[part]) % 4 or 4)
    malformed(b".".join(pieces), "base64url")


@pytest.mark.parametrize("part", [0, 1, 2])
def test_standard_alphabet_is_malformed(world: World, part: int) -> None:
    pieces = forge(world.planner, offer(world)).split(b".")
    pieces[part] = pieces[part][:-1] + b"+"
    malformed(b".".join(pieces), "base64url")
    pieces[part] = pieces[part][:-1] + b"/"
    malformed(b".".join(pieces), "base64url")


def test_unused_bits_in_signature_are_malformed(world: World) -> None:
    octets = forge(world.planner, offer(world))
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(octets[-1:])
    assert last & 0x0F == 0  # 64 octets leave 4 unused bits, all zero
    for bit in (1, 2, 4, 8):
        malformed(octets[:-1] + alphabet[last | bit : (last | bit) + 1], "canonical")


def test_impossible_base64url_length_is_malformed(world: World) -> None:
    h, p, s = forge(world.planner, offer(world)).split(b".")
    assert (len(s) + 3) % 4 == 1
    malformed(b".".join([h, p, s + b"AAA"]), "length")


def test_non_ascii_octets_are_malformed(world: World) -> None:
    malformed(forge(world.planner, offer(world)) + "é".encode(), "ASCII")


def test_oversize_element_is_refused_before_decoding() -> None:
    malformed(b"\xff" * (64 * 1024 + 1), "larger")


# --- header and payload JSON (profile §1.2, §2) ---------------------------------------------------


def test_bom_in_header_is_malformed(world: World) -> None:
    header = b"\xef\xbb\xbf" + _octets({"alg": "Ed25519", "typ": jws.OFFER_TYP})
    malformed(forge(world.planner, offer(world), header=header), "byte order mark")


def test_bom_in_payload_is_malformed(world: World) -> None:
    malformed(forge(world.planner, b"\xef\xbb\xbf" + _octets(offer(world))), "byte order mark")


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-32"])
def test_utf16_payload_is_malformed(world: World, codec: str) -> None:
    payload = json.dumps(offer(world)).encode(codec)
    # Without a BOM, UTF-16-LE ASCII text is valid UTF-8 (with NULs) that is not JSON.
    malformed(forge(world.planner, payload), "UTF-8|not valid JSON")


def test_invalid_utf8_payload_is_malformed(world: World) -> None:
    payload = _octets(offer(world)).replace(b'"ctx-1"', b'"ctx-\xc0\xaf"')
    malformed(forge(world.planner, payload), "UTF-8")


def test_duplicate_header_member_is_malformed(world: World) -> None:
    header = b'{"alg":"Ed25519","typ":"handoff-offer+jws","kid":"p-ed2","kid":"p-ed1"}'
    malformed(forge(world.planner, offer(world), header=header), "duplicate")


@pytest.mark.parametrize("member", ["aud", "iss", "iat", "hop", "v"])
def test_duplicate_payload_member_is_malformed(world: World, member: str) -> None:
    payload = offer(world)
    text = _octets(payload).decode()
    twin = json.dumps({member: payload[member]}, separators=(",", ":"))[1:-1]
    malformed(forge(world.planner, (text[:-1] + "," + twin + "}").encode()), "duplicate")


@pytest.mark.parametrize(
    ("member", "raw"),
    [
        ("iat", "NaN"),
        ("exp", "Infinity"),
        ("exp", "-Infinity"),
    ],
)
def test_non_finite_numbers_are_malformed(world: World, member: str, raw: str) -> None:
    text = _octets(offer(world, **{member: "@"})).decode().replace('"@"', raw)
    malformed(forge(world.planner, text.encode()), raw.lstrip("-"))


def test_header_that_is_not_an_object_is_malformed(world: World) -> None:
    malformed(forge(world.planner, offer(world), header=b'["Ed25519"]'), "object")


@pytest.mark.parametrize("payload", [b"[]", b'"offer"', b"1", b"null", b"foo", b""])
def test_payload_that_is_not_an_object_is_malformed(world: World, payload: bytes) -> None:
    with pytest.raises(MalformedError):
        jws.parse(forge(world.planner, payload))


def test_nesting_deeper_than_32_is_malformed(world: World) -> None:
    deep: list[Any] = []
    for _ in range(32):
        deep = [deep]
    malformed(forge(world.planner, offer(world, x=deep)), "deeper")


def test_nesting_of_32_levels_is_allowed(world: World) -> None:
    deep: list[Any] = []
    for _ in range(30):  # the payload object plus 31 arrays: 32 levels
        deep = [deep]
    assert jws.parse(forge(world.planner, offer(world, x=deep)))


def test_depth_scanner_skips_brackets_inside_strings() -> None:
    assert strict_json_loads(b'{"a":"' + b"[" * 100 + b'\\"' + b"{" * 100 + b'"}', what="x") == {
        "a": "[" * 100 + '"' + "{" * 100
    }


# --- payload members (profile §1.1, §1.2) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("v", 2),
        ("v", True),
        ("v", 1.0),
        ("v", "1"),
        ("type", "Offer"),
        ("type", None),
    ],
)
def test_v_and_type(world: World, member: str, value: Any) -> None:
    malformed(forge(world.planner, offer(world, **{member: value})), member)


@pytest.mark.parametrize(
    "hop",
    [
        "a" * 21,
        "a" * 65,
        "a" * 21 + "=",
        "a" * 21 + ".",
        "a" * 21 + "+",
        "a" * 21 + " ",
        12345678901234567890123,
    ],
)
def test_bad_hop_is_malformed(world: World, hop: Any) -> None:
    malformed(forge(world.planner, offer(world, hop=hop)), "hop")


@pytest.mark.parametrize("hop", ["a" * 22, "Z_-9" * 16])
def test_hop_of_22_to_64_characters(world: World, hop: str) -> None:
    assert jws.parse(forge(world.planner, offer(world, hop=hop))).payload.hop == hop


@pytest.mark.parametrize("member", ["dialog", "iss", "aud", "task", "obo"])
@pytest.mark.parametrize(
    "value",
    [
        "",
        "a b",
        "tab\there",
        "nul\x00",
        "del\x7f",
        "bidi\u202e",
        "lri\u2066",
        "zwsp\u200b",
        "homoglyph\u0430",
        "x" * 2049,
        42,
        None,
    ],
    ids=[
        "empty",
        "space",
        "tab",
        "nul",
        "del",
        "rlo",
        "lri",
        "zwsp",
        "cyrillic-a",
        "2049",
        "int",
        "null",
    ],
)
def test_identifier_rules(world: World, member: str, value: Any) -> None:
    malformed(forge(world.planner, offer(world, **{member: value})), member)


def test_identifier_of_2048_characters_is_allowed(world: World) -> None:
    dialog = "d" * 2048
    assert jws.parse(forge(world.planner, offer(world, dialog=dialog))).payload.dialog == dialog


@pytest.mark.parametrize("member", ["dialog", "iss", "aud", "iat", "exp"])
def test_missing_required_offer_member(world: World, member: str) -> None:
    payload = offer(world)
    del payload[member]
    malformed(forge(world.planner, payload), member)


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("iat", True),
        ("iat", float(T0)),
        ("iat", str(T0)),
        ("iat", -1),
        ("exp", 2**53),
        ("exp", 2**64),
        ("iat", None),
        ("exp", [T0]),
    ],
)
def test_integer_rules(world: World, member: str, value: Any) -> None:
    malformed(forge(world.planner, offer(world, **{member: value})), member)


def test_largest_safe_exp_is_allowed(world: World) -> None:
    assert jws.parse(forge(world.planner, offer(world, exp=2**53 - 1))).payload.exp == 2**53 - 1


@pytest.mark.parametrize("exp", [T0, T0 - 1])
def test_iat_must_be_before_exp(world: World, exp: int) -> None:
    malformed(forge(world.planner, offer(world, exp=exp)), "exp")


@pytest.mark.parametrize("member", ["prev", "grant"])
@pytest.mark.parametrize(
    "value",
    [
        b64url_encode(DIGEST)[:-1],
        b64url_encode(DIGEST) + "A",
        b64url_encode(DIGEST) + "=",
        base64.b64encode(DIGEST).decode(),
        b64url_encode(DIGEST)[:-1] + "B",
        7,
        b64url_encode(DIGEST[:31]),
    ],
    ids=["42-chars", "44-chars", "padded", "std-alphabet", "unused-bits", "int", "31-octets"],
)
def test_digest_rules(world: World, member: str, value: Any) -> None:
    with pytest.raises(MalformedError, match=member):
        jws.parse(forge(world.planner, offer(world, **{member: value})))


@pytest.mark.parametrize(
    ("refs", "match"),
    [
        ({"kind": "digest"}, "array"),
        (["digest"], "object"),
        ([{"kind": "blob", "digest": b64url_encode(DIGEST)}], "kind"),
        ([{"kind": 1, "digest": b64url_encode(DIGEST)}], "kind"),
        ([{"kind": "digest"}], "digest"),
        ([{"kind": "digest", "digest": "abc"}], "digest"),
        ([{"kind": "digest", "digest": b64url_encode(DIGEST), "uri": "a b"}], "uri"),
        ([{"kind": "digest", "digest": b64url_encode(DIGEST), "name": "n\x00"}], "NUL"),
    ],
)
def test_ref_rules(world: World, refs: Any, match: str) -> None:
    malformed(forge(world.planner, offer(world, refs=refs)), match)


def test_known_and_uri_ref_kinds_parse(world: World) -> None:
    kinds = [
        "digest",
        "salted-digest",
        "scitt-receipt",
        "learnlog-head",
        "urn:example:kind",
        "https://example.org/kinds/ticket",
    ]
    refs = [{"kind": k, "digest": b64url_encode(DIGEST)} for k in kinds]
    element = jws.parse(forge(world.planner, offer(world, refs=refs)))
    assert [r.kind for r in element.payload.refs] == kinds


def test_unknown_payload_member_is_ignored(world: World) -> None:
    assert jws.parse(forge(world.planner, offer(world, **{"x-new": {"a": [1, 2]}})))


# --- statuses (profile §1.2) ----------------------------------------------------------------------


@pytest.mark.parametrize("state", ["accepted", "rejected", "completed", "failed", "canceled"])
def test_every_state_parses(world: World, state: str) -> None:
    assert jws.parse(forge(world.coder, status(world, state=state))).payload.state == state


@pytest.mark.parametrize("state", ["Accepted", "done", "", None, 1])
def test_unknown_state_is_malformed(world: World, state: Any) -> None:
    malformed(forge(world.coder, status(world, state=state)), "state")


@pytest.mark.parametrize("state", ["accepted", "completed", "canceled"])
def test_reason_only_on_rejected_and_failed(world: World, state: str) -> None:
    malformed(forge(world.coder, status(world, state=state, reason="policy")), "reason")


@pytest.mark.parametrize(
    "reason",
    ["stale", "replay", "broken-chain", "urn:example:busy", "https://example.org/reasons/quota"],
)
def test_reason_codes_and_uris_are_allowed(world: World, reason: str) -> None:
    element = jws.parse(forge(world.coder, status(world, state="rejected", reason=reason)))
    assert element.payload.reason == reason


@pytest.mark.parametrize("reason", ["malformed", "Stale", "nope", "", 3])
def test_other_reasons_are_malformed(world: World, reason: Any) -> None:
    malformed(forge(world.coder, status(world, state="rejected", reason=reason)), "reason")


def test_detail_is_free_text_without_nul_or_lone_surrogates(world: World) -> None:
    text = "fehlgeschlagen \u202e – ✓"
    element = jws.parse(forge(world.coder, status(world, state="failed", detail=text)))
    assert element.payload.detail == text
    malformed(forge(world.coder, status(world, state="failed", detail="a\x00b")), "NUL")
    lone = _octets(status(world, state="failed", detail="@")).replace(b'"@"', b'"\\ud800"')
    malformed(forge(world.coder, lone), "surrogate")


@pytest.mark.parametrize("member", ["offer", "iss", "aud", "iat", "state", "hop"])
def test_missing_required_status_member(world: World, member: str) -> None:
    payload = status(world)
    del payload[member]
    with pytest.raises(MalformedError):
        jws.parse(forge(world.coder, payload))


# --- a trailing newline must not slip past an anchored pattern ($ matches before a final \n) ---


@pytest.mark.parametrize("member", ["dialog", "iss", "aud", "task", "obo"])
def test_identifier_with_trailing_newline_is_malformed(world: World, member: str) -> None:
    value = offer(world).get(member, "task-1")
    malformed(forge(world.planner, offer(world, **{member: value + "\n"})), member)


def test_hop_with_trailing_newline_is_malformed(world: World) -> None:
    malformed(forge(world.planner, offer(world, hop=HOP + "\n")), "hop")


def test_kid_with_trailing_newline_is_malformed(world: World) -> None:
    malformed(forge(world.planner, offer(world), kid="p-ed1\n"), "kid")


def test_uri_ref_kind_with_trailing_newline_is_malformed(world: World) -> None:
    refs = [{"kind": "urn:example:kind\n", "digest": b64url_encode(DIGEST)}]
    malformed(forge(world.planner, offer(world, refs=refs)), "kind")


@pytest.mark.parametrize("part", [0, 1, 2])
@pytest.mark.parametrize("suffix", ["\n", "A\n", "AA\n"])
def test_base64url_part_with_trailing_newline_is_malformed(
    world: World, part: int, suffix: str
) -> None:
    pieces = forge(world.planner, offer(world)).split(b".")
    pieces[part] += suffix.encode()
    malformed(b".".join(pieces), "base64url")
