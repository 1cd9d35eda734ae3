"""Property tests (STYLE 10): tampering always fails, parsers raise only their declared errors,
chains verify exactly when they are intact, and ingest order never changes results.

Hypothesis runs derandomized (the same examples every run, so CI is reproducible) with no
deadline; the whole file takes a few seconds.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import cbor2
import pytest
from handoff_context import (
    Context,
    Form,
    Outcome,
    Session,
    Signer,
    TrustStore,
    Verdict,
    Verifier,
    b64url_encode,
    handoff_object,
    make_chain,
    make_offer,
    make_status,
    new_key,
    parse_element,
    parse_object,
    sign_payload,
    status_object,
    strict_json_loads,
    trust_document,
)
from handoff_context import _cose as cose
from handoff_context import _handoff as handoff
from handoff_context import _jws as jws
from handoff_context import _model as model
from handoff_context._signature import verify_element
from handoff_context._typed import is_map
from handoff_context.errors import CheckFailed, MalformedError, Reason
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from parties import T0, make_world
from strategies import JSON_SCALARS, JSON_VALUES, mutated

PROPERTY = settings(
    deadline=None, derandomize=True, max_examples=300, suppress_health_check=[HealthCheck.too_slow]
)
FEW = settings(PROPERTY, max_examples=60)

WORLD = make_world()
NOW = T0 + 30


def _elements() -> dict[str, tuple[bytes, Form]]:
    out = {}
    for form in (Form.JWS, Form.COSE):
        for signer, aud in ((WORLD.planner, WORLD.coder), (WORLD.coder, WORLD.tester)):
            o = make_offer(
                signer,
                aud=aud.iss,
                dialog="ctx-1",
                iat=T0,
                form=form,
                task="task-9",
                refs=[{"kind": "digest", "digest": bytes(32)}],
            )
            s = make_status(
                aud,
                offer_octets=o,
                state="failed",
                iat=T0 + 5,
                reason="policy",
                detail="no – quota",
            )
            out[f"{form.value}-offer-{signer.alg}"] = (o, form)
            out[f"{form.value}-status-{aud.alg}"] = (s, form)
    return out


ELEMENTS = _elements()


def fails_somewhere(octets: bytes, form: Form) -> bool:
    """True when parsing refuses the octets (with a declared error) or the signature fails."""
    try:
        element = parse_element(octets, form)
    except (MalformedError, CheckFailed):
        return True
    try:
        verify_element(element, WORLD.trust)
    except CheckFailed:
        return True
    return False


# --- any single-byte change to a signed element fails ------------------------------------------


def test_untampered_elements_verify() -> None:
    for octets, form in ELEMENTS.values():
        assert not fails_somewhere(octets, form)


@pytest.mark.parametrize("name", sorted(ELEMENTS))
def test_every_position_with_a_flipped_bit_fails(name: str) -> None:
    """Exhaustive over positions. Strict: there is no byte a relay may change. In JWS every
    bit is signed except the unused bits of each part's last character, and those the
    canonical base64url check refuses; in COSE the unsigned envelope (tag, array and string
    heads, the empty unprotected map) must be in shortest form, so no change survives."""
    octets, form = ELEMENTS[name]
    survivors = [
        (i, bit)
        for i in range(len(octets))
        for bit in (0x01, 0x10, 0x80)
        if not fails_somewhere(octets[:i] + bytes([octets[i] ^ bit]) + octets[i + 1 :], form)
    ]
    assert survivors == []


@PROPERTY
@given(name=st.sampled_from(sorted(ELEMENTS)), data=st.data())
def test_any_single_byte_change_fails(name: str, data: st.DataObject) -> None:
    octets, form = ELEMENTS[name]
    i = data.draw(st.integers(0, len(octets) - 1), label="position")
    new = data.draw(st.integers(0, 255).filter(lambda b: b != octets[i]), label="byte")
    assert fails_somewhere(octets[:i] + bytes([new]) + octets[i + 1 :], form)


@PROPERTY
@given(name=st.sampled_from(sorted(ELEMENTS)), data=st.data())
def test_any_truncation_or_extension_fails(name: str, data: st.DataObject) -> None:
    octets, form = ELEMENTS[name]
    cut = data.draw(st.integers(0, len(octets) - 1), label="cut")
    extra = data.draw(st.binary(min_size=1, max_size=4), label="extra")
    assert fails_somewhere(octets[:cut], form)
    assert fails_somewhere(octets + extra, form)


# --- parsers succeed or raise only their declared errors ----------------------------------------


def declared(parse: Callable[[Any], Any], value: Any, *, untrusted_key: bool = False) -> None:
    """``parse(value)`` returns, or raises MalformedError (or CheckFailed(untrusted-key))."""
    try:
        parse(value)
    except MalformedError:
        pass
    except CheckFailed as exc:
        assert untrusted_key and exc.reason is Reason.UNTRUSTED_KEY, exc


MEMBERS = [
    "v",
    "type",
    "hop",
    "dialog",
    "task",
    "iss",
    "aud",
    "iat",
    "exp",
    "obo",
    "grant",
    "prev",
    "refs",
    "offer",
    "state",
    "reason",
    "detail",
    "kind",
    "digest",
]
# Values that get past the first checks of the model, so the later ones are reached too.
PLAUSIBLE = (
    st.sampled_from(
        [
            1,
            "offer",
            "status",
            "aG9wLWlkZW50aWZpZXItMDE",
            "ctx-1",
            WORLD.planner.iss,
            WORLD.coder.iss,
            T0,
            T0 + 60,
            b64url_encode(bytes(32)),
            "accepted",
            "failed",
            "policy",
            [{"kind": "digest", "digest": b64url_encode(bytes(32))}],
            [{"kind": "blob"}],
        ]
    )
    | JSON_VALUES
)
PAYLOADS = st.dictionaries(st.sampled_from(MEMBERS), PLAUSIBLE, max_size=12)
HEADERS = st.fixed_dictionaries(
    {},
    optional={
        "alg": st.sampled_from(["ES256", "Ed25519", "EdDSA", "none", "HS256"]) | JSON_SCALARS,
        "typ": st.sampled_from([jws.OFFER_TYP, jws.STATUS_TYP, "JWT"]) | JSON_SCALARS,
        "kid": st.sampled_from(["p-ed1", "", "a b"]) | JSON_SCALARS,
        "crit": JSON_VALUES,
        "jku": JSON_SCALARS,
    },
)


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@PROPERTY
@given(st.binary(max_size=400))
def test_jws_parse_random_bytes(data: bytes) -> None:
    declared(jws.parse, data, untrusted_key=True)


@PROPERTY
@given(st.sampled_from([o for o, f in ELEMENTS.values() if f is Form.JWS]).flatmap(mutated))
def test_jws_parse_mutated(data: bytes) -> None:
    declared(jws.parse, data, untrusted_key=True)


@PROPERTY
@given(header=HEADERS, payload=PAYLOADS | JSON_VALUES, signature=st.binary(max_size=70))
def test_jws_parse_structured(header: dict[str, Any], payload: Any, signature: bytes) -> None:
    token = ".".join(b64url_encode(p) for p in (_json(header), _json(payload), signature))
    declared(jws.parse, token.encode(), untrusted_key=True)


def _cbor_payload(payload: dict[str, Any]) -> dict[str, Any]:
    # The CBOR form carries digests as byte strings.
    return {
        k: bytes(32) if k in ("grant", "prev", "offer") and isinstance(v, str) else v
        for k, v in payload.items()
    }


VALID_OFFER = {
    "v": 1,
    "type": "offer",
    "hop": "aG9wLWlkZW50aWZpZXItMDE",
    "dialog": "ctx-1",
    "iss": WORLD.planner.iss,
    "aud": WORLD.coder.iss,
    "iat": T0,
    "exp": T0 + 60,
}
VALID_STATUS = {
    "v": 1,
    "type": "status",
    "hop": "aG9wLWlkZW50aWZpZXItMDE",
    "offer": b64url_encode(bytes(32)),
    "iss": WORLD.coder.iss,
    "aud": WORLD.planner.iss,
    "iat": T0,
    "state": "rejected",
}
DELETE = object()
CHANGES = st.dictionaries(
    st.sampled_from(MEMBERS), PLAUSIBLE | st.just(DELETE), min_size=1, max_size=3
)


def changed(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if value is DELETE:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def check_invariants(element: Any) -> None:
    """What a successful parse promises (profile §1.1, §1.2)."""
    p = element.payload
    for ident in (p.iss, p.aud, getattr(p, "dialog", None) or "x"):
        assert 1 <= len(ident) <= 2048 and all("\x21" <= c <= "\x7e" for c in ident)
    assert 22 <= len(p.hop) <= 64
    if p.type.value == "offer":
        assert 0 <= p.iat < p.exp < 2**53
        assert type(p.iat) is int and type(p.exp) is int
    else:
        assert type(p.iat) is int and 0 <= p.iat < 2**53 and len(p.offer) == 32
        assert p.reason is None or p.state.value in ("rejected", "failed")


@PROPERTY
@given(status=st.booleans(), changes=CHANGES, form=st.sampled_from([Form.JWS, Form.COSE]))
def test_parse_valid_payload_with_changed_members(
    status: bool, changes: dict[str, Any], form: Form
) -> None:
    payload = changed(VALID_STATUS if status else VALID_OFFER, changes)
    typ = jws.STATUS_TYP if status else jws.OFFER_TYP
    if form is Form.JWS:
        header = b64url_encode(_json({"alg": "Ed25519", "typ": typ}))
        octets = f"{header}.{b64url_encode(_json(payload))}.{b64url_encode(bytes(64))}".encode()
    else:
        content_type = cose.STATUS_CONTENT_TYPE if status else cose.OFFER_CONTENT_TYPE
        octets = cbor2.dumps(
            cbor2.CBORTag(
                18,
                [
                    cbor2.dumps({1: -19, 3: content_type}),
                    {},
                    cbor2.dumps(_cbor_payload(payload)),
                    bytes(64),
                ],
            )
        )
    try:
        element = parse_element(octets, form)
    except MalformedError:
        return
    check_invariants(element)


@PROPERTY
@given(st.binary(max_size=400))
def test_cose_parse_random_bytes(data: bytes) -> None:
    declared(cose.parse, data, untrusted_key=True)


@PROPERTY
@given(st.sampled_from([o for o, f in ELEMENTS.values() if f is Form.COSE]).flatmap(mutated))
def test_cose_parse_mutated(data: bytes) -> None:
    declared(cose.parse, data, untrusted_key=True)


CBOR_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**65), 2**65)
    | st.binary(max_size=8)
    | st.floats()
    | st.text(max_size=8)
)
CBOR_VALUES = st.recursive(
    CBOR_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.integers(-40, 40) | st.text(max_size=4), inner, max_size=3)
        | st.builds(cbor2.CBORTag, st.integers(0, 300), inner)
    ),
    max_leaves=8,
)


@PROPERTY
@given(
    protected=st.dictionaries(
        st.sampled_from([1, 2, 3, 4, 33, -1, "x5c"]),
        st.sampled_from(
            [-7, -8, -19, 5, cose.OFFER_CONTENT_TYPE, cose.STATUS_CONTENT_TYPE, b"p-ed1"]
        )
        | CBOR_VALUES,
        max_size=4,
    ),
    unprotected=st.dictionaries(st.integers(-5, 40), CBOR_VALUES, max_size=2),
    payload=PAYLOADS.map(_cbor_payload) | CBOR_VALUES,
    signature=st.binary(max_size=70),
    tag=st.sampled_from([18, 18, 18, 98, 998]),
)
def test_cose_parse_structured(
    protected: dict[Any, Any], unprotected: dict[Any, Any], payload: Any, signature: bytes, tag: int
) -> None:
    try:
        encoded = cbor2.dumps(
            cbor2.CBORTag(
                tag, [cbor2.dumps(protected), unprotected, cbor2.dumps(payload), signature]
            )
        )
    except (ValueError, TypeError, OverflowError, cbor2.CBOREncodeError):
        return  # not encodable; nothing to parse
    declared(cose.parse, encoded, untrusted_key=True)


@PROPERTY
@given(
    JSON_VALUES
    | st.dictionaries(
        st.sampled_from(["offer", "status", "chain", "x"]),
        JSON_VALUES
        | st.binary(max_size=8)
        | st.lists(st.text(max_size=8) | st.binary(max_size=8), max_size=3),
        max_size=4,
    )
)
def test_parse_object_random_values(value: Any) -> None:
    declared(handoff.parse_object, value)


@PROPERTY
@given(st.binary(max_size=300))
def test_strict_json_loads_random_bytes(data: bytes) -> None:
    declared(lambda d: strict_json_loads(d, what="x"), data)


@PROPERTY
@given(JSON_VALUES.map(lambda v: json.dumps(v).encode()).flatmap(mutated))
def test_strict_json_loads_mutated(data: bytes) -> None:
    declared(lambda d: strict_json_loads(d, what="x"), data)


@PROPERTY
@given(JSON_VALUES)
def test_strict_json_loads_reads_what_json_writes(value: Any) -> None:
    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) and isinstance(b, float):
            return a == b or (math.isnan(a) and math.isnan(b))
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return type(a) is type(b) and a == b

    assert same(strict_json_loads(json.dumps(value).encode(), what="x"), value)


# --- chains of random length and mixed algorithms -------------------------------------------------

CHAIN_ISSUERS = [f"spiffe://chain.example/agent/a{i:02d}" for i in range(17)]
RECEIVER = "spiffe://chain.example/agent/receiver"
CHAIN_SIGNERS = {
    (i, alg): Signer(iss, new_key(alg, kid=f"a{i:02d}-{alg.lower()}"), alg)
    for i, iss in enumerate(CHAIN_ISSUERS)
    for alg in ("ES256", "Ed25519")
}


def _chain_trust() -> TrustStore:
    doc = trust_document([CHAIN_SIGNERS[(i, "ES256")] for i in range(17)])
    for i, entry in enumerate(doc["issuers"]):
        entry["keys"].append(CHAIN_SIGNERS[(i, "Ed25519")].trust_entry()["keys"][0])
    return TrustStore.from_mapping(doc)


CHAIN_TRUST = _chain_trust()


def build_chain(algs: list[str]) -> list[bytes]:
    """len(algs) linked offers a00 -> a01 -> ... -> RECEIVER, the last issued at T0."""
    signers = [CHAIN_SIGNERS[(i, alg)] for i, alg in enumerate(algs)]
    return make_chain(
        signers, dialog="ctx-chain", iat=T0 - 5 * (len(algs) - 1), step=5, final_aud=RECEIVER
    )


def judge_chain(current: bytes, chain: list[bytes]) -> Verdict:
    """A fresh verifier each time, so that replay memory plays no part."""
    return Verifier(CHAIN_TRUST).verify_value(
        handoff_object(current, chain),
        Context(now=NOW, receiver=RECEIVER, dialog="ctx-chain"),
        source="chain",
    )


ALGS = st.sampled_from(["ES256", "Ed25519"])


@PROPERTY
@given(st.lists(ALGS, min_size=1, max_size=16))
def test_intact_chain_is_accepted(algs: list[str]) -> None:
    *chain, current = build_chain(algs)
    v = judge_chain(current, chain)
    assert v.outcome is Outcome.ACCEPT, v.detail
    assert v.chain is not None and not v.chain.partial and v.chain.length == len(algs)


@PROPERTY
@given(algs=st.lists(ALGS, min_size=2, max_size=16), data=st.data())
def test_dropping_a_chain_element(algs: list[str], data: st.DataObject) -> None:
    *chain, current = build_chain(algs)
    k = data.draw(st.integers(0, len(chain) - 1), label="dropped")
    v = judge_chain(current, chain[:k] + chain[k + 1 :])
    if k == 0:  # the origin's offer: the chain no longer reaches the start
        assert v.outcome is Outcome.ACCEPT, v.detail
        assert v.chain is not None and v.chain.partial
    else:
        assert (v.outcome, v.reason and v.reason.value) == (Outcome.REJECT, "broken-chain")


@PROPERTY
@given(algs=st.lists(ALGS, min_size=3, max_size=16), data=st.data())
def test_swapping_adjacent_chain_elements(algs: list[str], data: st.DataObject) -> None:
    *chain, current = build_chain(algs)
    k = data.draw(st.integers(0, len(chain) - 2), label="swapped")
    chain[k], chain[k + 1] = chain[k + 1], chain[k]
    v = judge_chain(current, chain)
    assert (v.outcome, v.reason and v.reason.value) == (Outcome.REJECT, "broken-chain")


@PROPERTY
@given(algs=st.lists(ALGS, min_size=1, max_size=15), data=st.data())
def test_duplicating_any_element(algs: list[str], data: st.DataObject) -> None:
    """A copy of any offer (the current one included) inserted anywhere in the chain."""
    offers = build_chain(algs)
    *chain, current = offers
    copy = data.draw(st.sampled_from(offers), label="copied")
    at = data.draw(st.integers(0, len(chain)), label="inserted at")
    v = judge_chain(current, [*chain[:at], copy, *chain[at:]])
    assert (v.outcome, v.reason and v.reason.value) == (Outcome.REJECT, "broken-chain")


@FEW
@given(st.lists(ALGS, min_size=17, max_size=17))
def test_seventeen_offers_are_too_deep(algs: list[str]) -> None:
    *chain, current = build_chain(algs)
    v = judge_chain(current, chain)
    assert (v.outcome, v.reason and v.reason.value) == (Outcome.REJECT, "too-deep")


# --- ingest order never changes results (profile §6, §11) -----------------------------------------


def _events() -> list[dict[str, Any]]:
    """Three offers delivered alone and their statuses, one status retransmitted."""
    offers = make_chain(
        [WORLD.assistant, WORLD.planner, WORLD.coder],
        dialog="ctx-order",
        iat=T0 - 10,
        final_aud=WORLD.tester.iss,
    )
    delegates = [WORLD.planner, WORLD.coder, WORLD.tester]
    events: list[dict[str, Any]] = [handoff_object(o) for o in offers]
    for o, delegate in zip(offers, delegates, strict=True):
        for state, at in (("accepted", T0), ("completed", T0 + 20)):
            events.append(status_object(make_status(delegate, offer_octets=o, state=state, iat=at)))
    events.append(events[3])  # a retransmitted status
    return events


EVENTS = _events()


def _results(order: list[int]) -> list[tuple[str, str, str | None]]:
    session = Session(Verifier(WORLD.trust))
    for i in order:
        session.add(EVENTS[i], Context(now=NOW), source=str(i))
    return sorted(
        (v.to_json()["digest"], v.outcome.value, v.reason and v.reason.value)
        for v in session.verdicts
    )


CANONICAL = _results(list(range(len(EVENTS))))


def test_canonical_order_accepts_everything_once() -> None:
    outcomes = [o for _, o, _ in CANONICAL]
    assert outcomes.count("duplicate") == 1 and outcomes.count("accept") == len(EVENTS) - 1


@FEW
@given(st.permutations(range(len(EVENTS))))
def test_any_ingest_order_gives_the_same_results(order: list[int]) -> None:
    assert _results(list(order)) == CANONICAL


@FEW
@given(status=st.booleans(), changes=CHANGES, form=st.sampled_from([Form.JWS, Form.COSE]))
def test_signed_payloads_with_changed_members_get_a_verdict(
    status: bool, changes: dict[str, Any], form: Form
) -> None:
    """Structure-aware: a payload with odd members, correctly signed (handoff_context), so
    the whole check pipeline sees it: it always ends in a verdict, never an exception."""
    payload = changed(VALID_STATUS if status else VALID_OFFER, changes)
    signer = WORLD.coder if status else WORLD.planner
    try:
        octets = sign_payload(
            payload if form is Form.JWS else _cbor_payload(payload), signer, form=form
        )
    except (ValueError, TypeError, KeyError, OverflowError, cbor2.CBOREncodeError):
        return  # the signer refuses payloads it cannot encode
    member = "status" if status else "offer"
    value = {member: octets.decode("ascii") if form is Form.JWS else octets}
    with contextlib.suppress(MalformedError):
        parse_object(value)
    verdict = Verifier(WORLD.trust).verify_value(
        value, Context(now=NOW, receiver=WORLD.coder.iss), source="property"
    )
    assert isinstance(verdict, Verdict) and verdict.outcome in Outcome


# Text with what the checks look for: NUL, surrogates (lone, paired, reversed), other
# non-ASCII characters, and anything else, surrogates included.
HOSTILE_TEXT = st.lists(
    st.sampled_from(["a", "\x00", "\ud800", "\udbff", "\udc00", "\udfff", "é", "\U0001f600"])
    | st.characters(exclude_categories=()),
    max_size=12,
).map("".join)


@PROPERTY
@given(HOSTILE_TEXT)
def test_detail_check_is_the_character_walk(text: str) -> None:
    # ``_check_detail`` asks UTF-8 whether the text holds a surrogate; the walk of every
    # character it replaced is the reference.
    if "\x00" in text:
        expected: str | None = "detail must not contain NUL"
    elif any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        expected = "detail must not contain lone surrogates"
    else:
        expected = None
    try:
        assert model._check_detail(text) is text
        got = None
    except MalformedError as exc:
        got = exc.detail
    assert got == expected


@PROPERTY
@given(
    st.sampled_from([s.value for s in model.StatusState] + list(model.StatusState))
    | st.sampled_from(["Accepted", "accepted ", "offer", b"accepted", 1, None, [], {}])
    | JSON_VALUES
)
def test_state_lookup_is_the_enum_call(value: Any) -> None:
    # ``Status.from_mapping`` looks its state up by text; the enum's own call is the reference.
    try:
        expected: model.StatusState | None = model.StatusState(value)
    except (ValueError, TypeError):
        expected = None
    try:
        got: model.StatusState | None = model._state_of(value)
    except MalformedError as exc:
        assert exc.detail == "state must be one of " + ", ".join(model.StatusState)
        got = None
    assert got is expected


def test_identifier_check_is_the_pattern_on_every_character() -> None:
    # ``check_identifier`` asks three C string checks; the pattern they replaced is the
    # reference, for each code point (surrogates included), alone and between valid ones.
    pattern = re.compile(r"^[\x21-\x7e]+\Z")
    for point in range(0x110000):
        ch = chr(point)
        for text in (ch, "a" + ch + "z") if point < 0x800 else (ch,):
            try:
                model.check_identifier(text, what="iss")
                accepted = True
            except MalformedError as exc:
                assert exc.detail.startswith("iss must be printable ASCII")
                accepted = False
            assert accepted == bool(pattern.match(text)), repr(text)


@PROPERTY
@given(HOSTILE_TEXT.filter(bool) | st.text(st.characters(max_codepoint=0x80), min_size=1))
def test_identifier_check_is_the_pattern(text: str) -> None:
    try:
        assert model.check_identifier(text, what="iss") is text
        accepted = True
    except MalformedError:
        accepted = False
    assert accepted == bool(re.fullmatch(r"[\x21-\x7e]+", text))


class _TypedMap(Mapping[str, Any]):
    """A map that is not a dict, as a typed SDK message's map is."""

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class _Text(str):
    """A leaf's subclass: not one of the leaf types themselves, so the ABC is asked."""


@PROPERTY
@given(
    JSON_VALUES
    | st.binary(max_size=4)
    | JSON_VALUES.map(lambda v: _TypedMap({"v": v}))
    | st.sampled_from([MappingProxyType({}), _Text("x"), (), frozenset(), object()])
)
def test_is_map_is_the_mapping_abc(value: Any) -> None:
    # The walks of a message ask ``is_map``, which answers decoded JSON and CBOR without
    # the ABC; the ABC's own answer is the reference.
    assert is_map(value) is isinstance(value, Mapping)
