"""The receiver's pipeline (profile §6, §7, §5, §11): each check, its order, statuses and sessions.

Every test names the check it exercises; the helper ``checks`` renders a verdict's check list
so that the pipeline ordering (first failure ends processing, later checks ``not-run``) is
asserted in full, not just the outcome.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from handoff_context import (
    OFFER_CHECKS,
    STATUS_CHECKS,
    AvailableObject,
    Context,
    Form,
    MalformedError,
    ObjectIndex,
    Outcome,
    Policy,
    RefPolicy,
    Session,
    Signer,
    Verdict,
    Verifier,
    b64url_decode,
    b64url_encode,
    handoff_digest,
    handoff_object,
    make_chain,
    make_offer,
    make_status,
    offer_payload,
    sign_payload,
    status_object,
    status_payload,
)
from handoff_context._signature import sign_raw
from parties import T0, World

NOW = T0 + 30
DIALOG = "ctx-7c1e"
N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def ctx(
    world: World, *, receiver: str | None = "coder", now: int = NOW, dialog: str | None = DIALOG
) -> Context:
    who = {"coder": world.coder.iss, "tester": world.tester.iss, "planner": world.planner.iss}
    return Context(now=now, receiver=who.get(receiver or "", receiver), dialog=dialog)


def offer(
    world: World, signer: Signer | None = None, aud: Signer | None = None, **fields: Any
) -> bytes:
    """An offer planner -> coder at T0 in DIALOG unless told otherwise."""
    signer = signer or world.planner
    fields.setdefault("iat", T0)
    fields.setdefault("dialog", DIALOG)
    return make_offer(signer, aud=(aud or world.coder).iss, **fields)


def judge(verifier: Verifier, value: dict[str, Any], context: Context) -> Verdict:
    return verifier.verify_value(value, context, source="test")


def checks(verdict: Verdict) -> list[str]:
    """'name:result' for each check, with the reason on a failure."""
    return [
        f"{c.check}:{c.result.value}" + (f":{c.reason.value}" if c.reason else "")
        for c in verdict.checks
    ]


def offer_checks(*results: str) -> list[str]:
    """The seven offer checks: given results first, the rest ``not-run``."""
    return [f"{name}:{r}" for name, r in zip(OFFER_CHECKS, results, strict=False)] + [
        f"{name}:not-run" for name in OFFER_CHECKS[len(results) :]
    ]


def status_checks(*results: str) -> list[str]:
    return [f"{name}:{r}" for name, r in zip(STATUS_CHECKS, results, strict=False)] + [
        f"{name}:not-run" for name in STATUS_CHECKS[len(results) :]
    ]


def rejected(verdict: Verdict, reason: str) -> None:
    assert verdict.outcome is Outcome.REJECT
    assert verdict.reason is not None and verdict.reason.value == reason, verdict.detail
    assert verdict.detail


@pytest.fixture
def verifier(world: World) -> Verifier:
    return Verifier(trust=world.trust)


# --- the whole pipeline ---------------------------------------------------------------------------


def test_accepted_offer_passes_every_check(world: World, verifier: Verifier) -> None:
    v = judge(verifier, handoff_object(offer(world)), ctx(world))
    assert v.outcome is Outcome.ACCEPT and v.reason is None and v.detail is None
    assert checks(v) == offer_checks("pass", "pass", "pass", "pass", "pass", "pass", "not-checked")
    assert v.iss == world.planner.iss and v.aud == world.coder.iss and v.dialog == DIALOG


def test_verdict_json_has_the_spec_11_shape(world: World, verifier: Verifier) -> None:
    o = offer(world)
    out = judge(verifier, handoff_object(o), ctx(world)).to_json()
    assert list(out) == [
        "source",
        "element",
        "form",
        "digest",
        "iss",
        "aud",
        "hop",
        "outcome",
        "reason",
        "detail",
        "checks",
        "chain",
        "refs",
        "equivocation",
    ]
    assert out["digest"] == b64url_encode(hashlib.sha256(o).digest())
    assert out["chain"] == {"carried": False, "length": 1, "partial": False, "elements": []}
    s = make_status(world.coder, offer_octets=o, state="accepted", iat=T0 + 5)
    status_json = judge(verifier, status_object(s), ctx(world)).to_json()
    assert [c["check"] for c in status_json["checks"]] == list(STATUS_CHECKS)
    assert status_json["offer"] == out["digest"]


def test_malformed_element_runs_no_check(world: World, verifier: Verifier) -> None:
    v = judge(verifier, {"offer": "not.a.jws"}, ctx(world))
    rejected(v, "malformed")
    assert checks(v) == offer_checks()
    # The octets that failed to parse are still named, so the store can find them again.
    assert v.digest == hashlib.sha256(b"not.a.jws").digest()


def test_object_with_offer_and_status_is_malformed(world: World, verifier: Verifier) -> None:
    o = offer(world)
    v = judge(verifier, {"offer": o.decode(), "status": o.decode()}, ctx(world))
    rejected(v, "malformed")
    assert v.element is None


def test_status_where_offer_belongs_is_malformed(world: World, verifier: Verifier) -> None:
    s = make_status(world.coder, offer_octets=offer(world), state="accepted", iat=T0)
    rejected(judge(verifier, {"offer": s.decode()}, ctx(world)), "malformed")


# --- 1. signature --------------------------------------------------------------------------------


def test_signature_bad(world: World, verifier: Verifier) -> None:
    o = offer(world)
    sig = bytearray(b64url_decode(o.rsplit(b".", 1)[1].decode(), what="sig"))
    sig[10] ^= 0x01
    forged = o.rsplit(b".", 1)[0] + b"." + b64url_encode(bytes(sig)).encode()
    v = judge(verifier, handoff_object(forged), ctx(world))
    rejected(v, "bad-signature")
    assert checks(v) == offer_checks("fail:bad-signature")


def test_signature_untrusted_issuer(world: World, verifier: Verifier) -> None:
    v = judge(verifier, handoff_object(offer(world, world.mallory)), ctx(world))
    rejected(v, "untrusted-key")
    assert checks(v) == offer_checks("fail:untrusted-key")


def test_signature_from_another_trusted_key_is_bad_signature(
    world: World, verifier: Verifier
) -> None:
    """The coder signs an offer that names the planner as iss: planner's keys do not verify."""
    payload = offer_payload(iss=world.planner.iss, aud=world.coder.iss, dialog=DIALOG, iat=T0)
    forged = sign_payload(payload, world.assistant, with_kid=False)
    rejected(judge(verifier, handoff_object(forged), ctx(world)), "bad-signature")


def test_signature_without_kid_tries_each_key(world: World, verifier: Verifier) -> None:
    payload = offer_payload(iss=world.planner.iss, aud=world.coder.iss, dialog=DIALOG, iat=T0)
    o = sign_payload(payload, world.planner_alt, with_kid=False)
    assert judge(verifier, handoff_object(o), ctx(world)).outcome is Outcome.ACCEPT


def forge(signer_key: Any, payload: dict[str, Any], header: dict[str, Any]) -> bytes:
    """A compact JWS over any header, signed with ``signer_key`` (Ed25519)."""

    def part(doc: dict[str, Any]) -> str:
        return b64url_encode(json.dumps(doc, separators=(",", ":")).encode())

    signing_input = f"{part(header)}.{part(payload)}"
    signature = sign_raw("Ed25519", signer_key, signing_input.encode())
    return f"{signing_input}.{b64url_encode(signature)}".encode()


def test_signature_kid_naming_the_other_key(world: World, verifier: Verifier) -> None:
    payload = offer_payload(iss=world.planner.iss, aud=world.coder.iss, dialog=DIALOG, iat=T0)
    header = {"alg": "Ed25519", "typ": "handoff-offer+jws", "kid": "p-ed2"}
    honest = forge(world.planner_alt.key, payload, header)
    assert judge(verifier, handoff_object(honest), ctx(world)).outcome is Outcome.ACCEPT
    payload["hop"] = "aG9wLWtpZC1vdGhlci1rZXk"
    v = judge(verifier, handoff_object(forge(world.planner.key, payload, header)), ctx(world))
    rejected(v, "bad-signature")
    assert v.detail is not None and "p-ed2" in v.detail


@pytest.mark.parametrize(
    ("header", "word"),
    [
        ({"alg": "Ed25519", "typ": "handoff-offer+jws", "kid": "p-ed9"}, "p-ed9"),
        ({"alg": "ES256", "typ": "handoff-offer+jws", "kid": "p-ed1"}, "ES256"),
    ],
)
def test_signature_kid_unknown_or_alg_not_fitting(
    world: World, verifier: Verifier, header: dict[str, Any], word: str
) -> None:
    payload = offer_payload(iss=world.planner.iss, aud=world.coder.iss, dialog=DIALOG, iat=T0)
    v = judge(verifier, handoff_object(forge(world.planner.key, payload, header)), ctx(world))
    rejected(v, "bad-signature")
    assert v.detail is not None and word in v.detail


def test_issuer_without_a_key_for_the_alg_is_bad_signature(
    world: World, verifier: Verifier
) -> None:
    payload = offer_payload(iss=world.planner.iss, aud=world.coder.iss, dialog=DIALOG, iat=T0)
    header = {"alg": "ES256", "typ": "handoff-offer+jws"}
    rejected(
        judge(verifier, handoff_object(forge(world.planner.key, payload, header)), ctx(world)),
        "bad-signature",
    )


def test_key_carried_in_header_fails_the_signature_check(world: World, verifier: Verifier) -> None:
    payload = offer_payload(iss=world.planner.iss, aud=world.coder.iss, dialog=DIALOG, iat=T0)
    header = {"alg": "Ed25519", "typ": "handoff-offer+jws", "jku": "https://evil.example/k"}
    v = judge(verifier, handoff_object(forge(world.mallory.key, payload, header)), ctx(world))
    rejected(v, "untrusted-key")
    assert checks(v) == offer_checks("fail:untrusted-key")


# --- 2. audience ---------------------------------------------------------------------------------


def test_audience_wrong(world: World, verifier: Verifier) -> None:
    v = judge(verifier, handoff_object(offer(world, aud=world.tester)), ctx(world))
    rejected(v, "wrong-audience")
    assert checks(v) == offer_checks("pass", "fail:wrong-audience")


def test_audience_not_checked_without_receiver(world: World, verifier: Verifier) -> None:
    v = judge(verifier, handoff_object(offer(world)), ctx(world, receiver=None))
    assert v.outcome is Outcome.ACCEPT
    assert checks(v)[1] == "audience:not-checked"


# --- 3. freshness ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("iat", "now", "ok"),
    [
        (T0, T0 - 60, True),  # iat = now + skew
        (T0, T0 - 61, False),  # iat one second beyond the skew
        (T0, T0 + 120 + 60, True),  # now = exp + skew
        (T0, T0 + 120 + 61, False),  # one second after exp + skew
    ],
)
def test_freshness_boundaries(world: World, iat: int, now: int, ok: bool) -> None:
    v = judge(
        Verifier(world.trust),
        handoff_object(offer(world, iat=iat, lifetime=120)),
        ctx(world, now=now),
    )
    if ok:
        assert v.outcome is Outcome.ACCEPT, v.detail
    else:
        rejected(v, "stale")
        assert checks(v) == offer_checks("pass", "pass", "fail:stale")


def test_freshness_skew_is_a_policy_parameter(world: World) -> None:
    strict = Verifier(world.trust, policy=Policy(skew=0))
    rejected(judge(strict, handoff_object(offer(world, iat=NOW + 1)), ctx(world)), "stale")
    assert (
        judge(strict, handoff_object(offer(world, iat=NOW)), ctx(world)).outcome is Outcome.ACCEPT
    )


@pytest.mark.parametrize(("lifetime", "ok"), [(300, True), (301, False)])
def test_freshness_maximum_lifetime(world: World, lifetime: int, ok: bool) -> None:
    v = judge(Verifier(world.trust), handoff_object(offer(world, lifetime=lifetime)), ctx(world))
    if ok:
        assert v.outcome is Outcome.ACCEPT
    else:
        rejected(v, "policy")
        assert checks(v) == offer_checks("pass", "pass", "fail:policy")


def test_stale_is_judged_before_lifetime(world: World, verifier: Verifier) -> None:
    v = judge(verifier, handoff_object(offer(world, iat=NOW - 2000, lifetime=600)), ctx(world))
    rejected(v, "stale")


# --- 4. replay ------------------------------------------------------------------------------------


def test_replay_retransmission_is_duplicate(world: World, verifier: Verifier) -> None:
    o = offer(world)
    assert judge(verifier, handoff_object(o), ctx(world)).outcome is Outcome.ACCEPT
    v = judge(verifier, handoff_object(o), ctx(world))
    assert v.outcome is Outcome.DUPLICATE and v.reason is None and v.equivocation is None
    assert checks(v) == offer_checks("pass", "pass", "pass", "pass")


def test_replay_equivocation_content(world: World, verifier: Verifier) -> None:
    first = offer(world, hop="aG9wLWVxdWl2b2NhdGlvbi0x", task="t-1")
    second = offer(world, hop="aG9wLWVxdWl2b2NhdGlvbi0x", task="t-2")
    assert judge(verifier, handoff_object(first), ctx(world)).outcome is Outcome.ACCEPT
    v = judge(verifier, handoff_object(second), ctx(world))
    rejected(v, "equivocation")
    assert checks(v) == offer_checks("pass", "pass", "pass", "fail:equivocation")
    assert v.equivocation is not None
    assert v.equivocation.to_json() == {
        "first": b64url_encode(hashlib.sha256(first).digest()),
        "variant": "content",
    }


def test_replay_equivocation_signature_only_es256_twin(world: World) -> None:
    verifier = Verifier(world.trust)
    o = offer(world, world.coder, aud=world.tester)
    head, sig_text = o.rsplit(b".", 1)
    sig = b64url_decode(sig_text.decode(), what="sig")
    s = int.from_bytes(sig[32:], "big")
    twin = head + b"." + b64url_encode(sig[:32] + (N - s).to_bytes(32, "big")).encode()
    assert (
        judge(verifier, handoff_object(o), ctx(world, receiver="tester")).outcome is Outcome.ACCEPT
    )
    v = judge(verifier, handoff_object(twin), ctx(world, receiver="tester"))
    rejected(v, "equivocation")
    assert v.equivocation is not None and v.equivocation.variant.value == "signature-only"


def test_replay_equivocation_signature_only_by_resigning(world: World, verifier: Verifier) -> None:
    """Same header and payload (no kid), signed with each of the planner's two keys."""
    payload = offer_payload(iss=world.planner.iss, aud=world.coder.iss, dialog=DIALOG, iat=T0)
    one = sign_payload(payload, world.planner, with_kid=False)
    two = sign_payload(payload, world.planner_alt, with_kid=False)
    assert one != two
    assert judge(verifier, handoff_object(one), ctx(world)).outcome is Outcome.ACCEPT
    v = judge(verifier, handoff_object(two), ctx(world))
    assert v.equivocation is not None and v.equivocation.variant.value == "signature-only"


def test_replay_equivocation_across_forms_is_content(world: World, verifier: Verifier) -> None:
    hop = "aG9wLWFjcm9zcy1mb3Jtcy0x"
    jws_offer = offer(world, hop=hop)
    cose_offer = offer(world, hop=hop, form=Form.COSE)
    assert judge(verifier, handoff_object(jws_offer), ctx(world)).outcome is Outcome.ACCEPT
    v = judge(verifier, handoff_object(cose_offer), ctx(world))
    assert v.equivocation is not None and v.equivocation.variant.value == "content"


def test_replay_first_seen_wins_even_after_equivocation(world: World, verifier: Verifier) -> None:
    hop = "aG9wLWZpcnN0LXNlZW4td2lucw"
    first, second = offer(world, hop=hop, task="a"), offer(world, hop=hop, task="b")
    judge(verifier, handoff_object(first), ctx(world))
    rejected(judge(verifier, handoff_object(second), ctx(world)), "equivocation")
    rejected(judge(verifier, handoff_object(second), ctx(world)), "equivocation")
    assert judge(verifier, handoff_object(first), ctx(world)).outcome is Outcome.DUPLICATE


@pytest.mark.parametrize("failure", ["bad-signature", "wrong-audience", "stale"])
def test_replay_remembers_only_what_passed_checks_1_to_3(
    world: World, verifier: Verifier, failure: str
) -> None:
    """An element that failed an earlier check must not claim the hop for itself."""
    hop = "aG9wLWNsYWltZWQtYnktYS1mYWtl"
    if failure == "bad-signature":
        payload = offer_payload(
            iss=world.planner.iss, aud=world.coder.iss, dialog=DIALOG, iat=T0, hop=hop, task="fake"
        )
        first = sign_payload(payload, Signer(world.planner.iss, world.mallory.key, "Ed25519"))
    elif failure == "wrong-audience":
        first = offer(world, aud=world.tester, hop=hop)
    else:
        first = offer(world, hop=hop, iat=NOW + 1000)
    rejected(judge(verifier, handoff_object(first), ctx(world)), failure)
    assert (
        judge(verifier, handoff_object(offer(world, hop=hop)), ctx(world)).outcome is Outcome.ACCEPT
    )


def test_replay_memory_is_per_issuer(world: World, verifier: Verifier) -> None:
    hop = "aG9wLXNoYXJlZC1ieS10d28"
    assert (
        judge(verifier, handoff_object(offer(world, hop=hop)), ctx(world)).outcome is Outcome.ACCEPT
    )
    other = offer(world, world.assistant, hop=hop)
    assert judge(verifier, handoff_object(other), ctx(world)).outcome is Outcome.ACCEPT


# --- 5. dialog ------------------------------------------------------------------------------------


def test_dialog_mismatch_is_policy(world: World, verifier: Verifier) -> None:
    v = judge(verifier, handoff_object(offer(world, dialog="ctx-other")), ctx(world))
    rejected(v, "policy")
    assert checks(v) == offer_checks("pass", "pass", "pass", "pass", "fail:policy")


def test_dialog_not_checked_without_carrier_dialog(world: World, verifier: Verifier) -> None:
    v = judge(verifier, handoff_object(offer(world, dialog="ctx-other")), ctx(world, dialog=None))
    assert v.outcome is Outcome.ACCEPT
    assert checks(v)[4] == "dialog:not-checked"


# --- 6. chain -------------------------------------------------------------------------------------


def chain3(world: World, form: Form = Form.JWS) -> list[bytes]:
    return make_chain(
        [world.assistant, world.planner, world.coder],
        dialog=DIALOG,
        iat=T0 - 10,
        final_aud=world.tester.iss,
        form=form,
    )


@pytest.mark.parametrize("form", [Form.JWS, Form.COSE])
def test_chain_full(world: World, verifier: Verifier, form: Form) -> None:
    *chain, current = chain3(world, form)
    v = judge(verifier, handoff_object(current, chain), ctx(world, receiver="tester"))
    assert v.outcome is Outcome.ACCEPT, v.detail
    assert v.chain is not None and not v.chain.partial and v.chain.length == 3
    assert [e.result.value for e in v.chain.elements] == ["pass", "pass"]
    assert [e.iss for e in v.chain.elements] == [world.assistant.iss, world.planner.iss]


def test_chain_failure_leaves_refs_not_run(world: World, verifier: Verifier) -> None:
    s0, _, s2 = chain3(world)
    v = judge(verifier, handoff_object(s2, [s0]), ctx(world, receiver="tester"))
    rejected(v, "broken-chain")
    assert checks(v) == offer_checks("pass", "pass", "pass", "pass", "pass", "fail:broken-chain")


def test_chain_partial_and_prev_without_chain(world: World, verifier: Verifier) -> None:
    _, s1, s2 = chain3(world)
    v = judge(verifier, handoff_object(s2, [s1]), ctx(world, receiver="tester"))
    assert v.outcome is Outcome.ACCEPT and v.chain is not None and v.chain.partial
    fresh = Verifier(world.trust)
    v = judge(fresh, handoff_object(s2), ctx(world, receiver="tester"))
    assert v.outcome is Outcome.ACCEPT and v.chain is not None and v.chain.partial
    assert checks(v)[5] == "chain:not-checked"


def test_chain_element_with_bad_signature_is_named(world: World, verifier: Verifier) -> None:
    s0, s1, s2 = chain3(world)
    head, sig = s0.rsplit(b".", 1)
    raw = bytearray(b64url_decode(sig.decode(), what="sig"))
    raw[0] ^= 0x80
    bad = head + b"." + b64url_encode(bytes(raw)).encode()
    v = judge(verifier, handoff_object(s2, [bad, s1]), ctx(world, receiver="tester"))
    rejected(v, "bad-signature")
    assert v.detail is not None and v.detail.startswith("chain[0]")
    assert checks(v)[5] == "chain:fail:bad-signature"
    assert v.chain is not None and v.chain.elements[0].result.value == "fail"


def test_chain_element_from_untrusted_issuer(world: World, verifier: Verifier) -> None:
    c0, c1 = make_chain(
        [world.mallory, world.coder], dialog=DIALOG, iat=T0, final_aud=world.tester.iss
    )
    v = judge(verifier, handoff_object(c1, [c0]), ctx(world, receiver="tester"))
    rejected(v, "untrusted-key")
    assert checks(v)[0] == "signature:pass"


def test_chain_element_that_is_malformed(world: World, verifier: Verifier) -> None:
    _, s1, s2 = chain3(world)
    v = judge(
        verifier,
        {"offer": s2.decode(), "chain": ["e30.e30.", s1.decode()]},
        ctx(world, receiver="tester"),
    )
    rejected(v, "malformed")
    assert v.detail is not None and "chain[0]" in v.detail


def test_chain_element_that_is_a_status(world: World, verifier: Verifier) -> None:
    s0, s1, s2 = chain3(world)
    status = make_status(world.planner, offer_octets=s0, state="accepted", iat=T0)
    v = judge(verifier, handoff_object(s2, [status, s1]), ctx(world, receiver="tester"))
    rejected(v, "broken-chain")
    assert v.detail is not None and v.detail.startswith("chain[0]")


def test_chain_elements_in_another_form_are_malformed(world: World, verifier: Verifier) -> None:
    s0 = chain3(world, Form.COSE)[0]
    current = chain3(world)[2]
    v = judge(verifier, {"offer": current.decode(), "chain": [s0]}, ctx(world, receiver="tester"))
    rejected(v, "malformed")


def test_chain_cycle_by_repeated_issuer(world: World, verifier: Verifier) -> None:
    *chain, current = make_chain(
        [world.planner, world.coder, world.planner],
        dialog=DIALOG,
        iat=T0 - 10,
        final_aud=world.tester.iss,
    )
    rejected(
        judge(verifier, handoff_object(current, chain), ctx(world, receiver="tester")), "cycle"
    )


def test_chain_cycle_through_the_receiver(world: World, verifier: Verifier) -> None:
    *chain, current = make_chain(
        [world.coder, world.planner, world.assistant],
        dialog=DIALOG,
        iat=T0 - 10,
        final_aud=world.coder.iss,
    )
    rejected(judge(verifier, handoff_object(current, chain), ctx(world)), "cycle")


def test_too_deep_is_checked_before_any_signature_work(world: World, verifier: Verifier) -> None:
    """17 offers: refused although the current offer's signature is from an untrusted key and
    the chain elements are not even elements."""
    current = offer(world, world.mallory)
    v = judge(verifier, {"offer": current.decode(), "chain": ["x"] * 16}, ctx(world))
    rejected(v, "too-deep")
    assert checks(v) == offer_checks(
        "not-run", "not-run", "not-run", "not-run", "not-run", "fail:too-deep"
    )


def test_max_chain_is_a_policy_parameter(world: World) -> None:
    *chain, current = chain3(world)
    short = Verifier(world.trust, policy=Policy(max_chain=2))
    rejected(
        judge(short, handoff_object(current, chain), ctx(world, receiver="tester")), "too-deep"
    )
    exact = Verifier(world.trust, policy=Policy(max_chain=3))
    assert (
        judge(exact, handoff_object(current, chain), ctx(world, receiver="tester")).outcome
        is Outcome.ACCEPT
    )


# --- 7. refs --------------------------------------------------------------------------------------


PLAN = b"the plan"
SALT = b"0123456789abcdef"


def ref_verifier(world: World, policy: RefPolicy) -> Verifier:
    objects = ObjectIndex.of(
        [AvailableObject("plan.md", PLAN), AvailableObject("secret.txt", b"secret", salt=SALT)]
    )
    return Verifier(world.trust, policy=Policy(ref_policy=policy), objects=objects)


def ref(kind: str, content: bytes, **extra: str) -> dict[str, Any]:
    return {"kind": kind, "digest": hashlib.sha256(content).digest(), **extra}


@pytest.mark.parametrize(
    ("refs", "policy", "outcomes", "reason"),
    [
        ([ref("digest", PLAN)], RefPolicy.REQUIRE, ["verified"], None),
        (
            [ref("salted-digest", SALT + b"secret", name="secret.txt")],
            RefPolicy.REQUIRE,
            ["verified"],
            None,
        ),
        (
            [ref("digest", b"other", name="plan.md")],
            RefPolicy.CHECK_AVAILABLE,
            ["mismatch"],
            "ref-mismatch",
        ),
        (
            [ref("salted-digest", b"wrong" + b"secret", name="secret.txt")],
            RefPolicy.CHECK_AVAILABLE,
            ["mismatch"],
            "ref-mismatch",
        ),
        ([ref("digest", b"absent")], RefPolicy.CHECK_AVAILABLE, ["unverifiable"], None),
        ([ref("digest", b"absent")], RefPolicy.REQUIRE, ["unverifiable"], "unverifiable-ref"),
        (
            [ref("salted-digest", b"x" + PLAN, name="plan.md")],
            RefPolicy.REQUIRE,
            ["unverifiable"],
            "unverifiable-ref",
        ),
        ([ref("urn:example:kind", PLAN)], RefPolicy.CHECK_AVAILABLE, ["not-checked"], None),
        ([ref("digest", b"other", name="plan.md")], RefPolicy.NONE, ["not-checked"], None),
        (
            [ref("digest", PLAN), ref("digest", b"absent")],
            RefPolicy.REQUIRE,
            ["verified", "unverifiable"],
            "unverifiable-ref",
        ),
    ],
    ids=[
        "verified",
        "salted",
        "mismatch",
        "salted-mismatch",
        "unavailable-ok",
        "unavailable-required",
        "salt-missing",
        "uri-kind",
        "policy-none",
        "one-of-two",
    ],
)
def test_refs(
    world: World,
    refs: list[dict[str, Any]],
    policy: RefPolicy,
    outcomes: list[str],
    reason: str | None,
) -> None:
    v = judge(ref_verifier(world, policy), handoff_object(offer(world, refs=refs)), ctx(world))
    assert [r.outcome.value for r in v.refs] == outcomes
    if reason is None:
        assert v.outcome is Outcome.ACCEPT, v.detail
    else:
        rejected(v, reason)
        assert checks(v) == offer_checks(
            "pass", "pass", "pass", "pass", "pass", "pass", f"fail:{reason}"
        )


def test_refs_check_result_when_checked(world: World) -> None:
    v = judge(
        ref_verifier(world, RefPolicy.REQUIRE),
        handoff_object(offer(world, refs=[ref("digest", PLAN)])),
        ctx(world),
    )
    assert checks(v)[6] == "refs:pass"


# --- statuses (profile §6.8) ------------------------------------------------------------


def sent_offer(world: World, verifier: Verifier) -> bytes:
    o = offer(world)
    assert judge(verifier, handoff_object(o), ctx(world)).outcome is Outcome.ACCEPT
    return o


@pytest.mark.parametrize("state", ["accepted", "rejected", "completed", "failed"])
def test_status_from_the_delegate(world: World, verifier: Verifier, state: str) -> None:
    o = sent_offer(world, verifier)
    s = make_status(world.coder, offer_octets=o, state=state, iat=T0 + 5)
    v = judge(verifier, status_object(s), ctx(world))
    assert v.outcome is Outcome.ACCEPT, v.detail
    assert checks(v) == status_checks("pass", "pass", "pass")
    assert v.dialog == DIALOG


def test_status_canceled_by_the_delegator(world: World, verifier: Verifier) -> None:
    o = sent_offer(world, verifier)
    s = make_status(world.planner, offer_octets=o, state="canceled", iat=T0 + 5)
    assert judge(verifier, status_object(s), ctx(world)).outcome is Outcome.ACCEPT


def test_status_canceled_by_the_delegate_is_policy(world: World, verifier: Verifier) -> None:
    o = sent_offer(world, verifier)
    s = make_status(
        world.coder,
        offer_octets=o,
        state="canceled",
        iat=T0 + 5,
        aud=world.planner.iss,
        check=False,
    )
    v = judge(verifier, status_object(s), ctx(world))
    rejected(v, "policy")
    assert checks(v) == status_checks("pass", "pass", "fail:policy")


def test_status_wrong_parties(world: World, verifier: Verifier) -> None:
    o = sent_offer(world, verifier)
    s = make_status(
        world.planner,
        offer_octets=o,
        state="accepted",
        iat=T0 + 5,
        iss=world.planner.iss,
        aud=world.coder.iss,
        check=False,
    )
    v = judge(verifier, status_object(s), ctx(world))
    rejected(v, "policy")
    assert checks(v) == status_checks("pass", "pass", "fail:policy")


def test_status_wrong_aud(world: World, verifier: Verifier) -> None:
    o = sent_offer(world, verifier)
    s = make_status(
        world.coder,
        offer_octets=o,
        state="completed",
        iat=T0 + 5,
        aud=world.tester.iss,
        check=False,
    )
    rejected(judge(verifier, status_object(s), ctx(world)), "policy")


def test_status_hop_mismatch(world: World, verifier: Verifier) -> None:
    o = sent_offer(world, verifier)
    payload = status_payload(
        offer={"iss": world.planner.iss, "aud": world.coder.iss, "hop": "aG9wLXRoYXQtaXMtbm90LWl0"},
        offer_octets=o,
        state="accepted",
        iat=T0 + 5,
    )
    s = sign_payload(payload, world.coder)
    v = judge(verifier, status_object(s), ctx(world))
    rejected(v, "policy")
    assert checks(v) == status_checks("pass", "fail:policy")


def test_status_bad_signature_runs_nothing_else(world: World, verifier: Verifier) -> None:
    o = sent_offer(world, verifier)
    s = make_status(world.tester, offer_octets=o, state="accepted", iat=T0 + 5, iss=world.coder.iss)
    v = judge(verifier, status_object(s), ctx(world))
    rejected(v, "bad-signature")
    assert checks(v) == status_checks("fail:bad-signature")


def test_status_from_untrusted_issuer(world: World, verifier: Verifier) -> None:
    o = sent_offer(world, verifier)
    s = make_status(world.mallory, offer_octets=o, state="accepted", iat=T0 + 5, check=False)
    rejected(judge(verifier, status_object(s), ctx(world)), "untrusted-key")


def test_status_retransmission_is_duplicate(world: World, verifier: Verifier) -> None:
    o = sent_offer(world, verifier)
    s = make_status(world.coder, offer_octets=o, state="accepted", iat=T0 + 5)
    assert judge(verifier, status_object(s), ctx(world)).outcome is Outcome.ACCEPT
    v = judge(verifier, status_object(s), ctx(world))
    assert v.outcome is Outcome.DUPLICATE and v.reason is None


def test_status_whose_offer_is_unknown_is_pending(world: World, verifier: Verifier) -> None:
    s = make_status(world.coder, offer_octets=offer(world), state="accepted", iat=T0 + 5)
    v = judge(verifier, status_object(s), ctx(world))
    assert v.outcome is Outcome.PENDING and v.reason is None
    assert checks(v) == status_checks("pass", "not-checked")


def test_status_may_name_an_offer_known_from_a_chain(world: World, verifier: Verifier) -> None:
    s0, s1, s2 = chain3(world)
    judge(verifier, handoff_object(s2, [s0, s1]), ctx(world, receiver="tester"))
    s = make_status(world.coder, offer_octets=s1, state="accepted", iat=T0)
    assert judge(verifier, status_object(s), ctx(world)).outcome is Outcome.ACCEPT


# --- sessions: pending statuses resolved later, verdicts in input order ---------------------------


def test_session_resolves_pending_status_when_the_offer_arrives(world: World) -> None:
    session = Session(Verifier(world.trust))
    o = offer(world)
    s = make_status(world.coder, offer_octets=o, state="completed", iat=T0 + 5)
    assert session.add(status_object(s), ctx(world), source="1").outcome is Outcome.PENDING
    session.add(handoff_object(offer(world, task="unrelated")), ctx(world), source="2")
    assert session.verdicts[0].outcome is Outcome.PENDING
    session.add(handoff_object(o), ctx(world), source="3")
    assert [v.source for v in session.verdicts] == ["1", "2", "3"]
    assert [v.outcome for v in session.verdicts] == [Outcome.ACCEPT] * 3
    assert checks(session.verdicts[0]) == status_checks("pass", "pass", "pass")


def test_session_resolved_status_is_still_judged(world: World) -> None:
    session = Session(Verifier(world.trust))
    o = offer(world)
    s = make_status(world.planner, offer_octets=o, state="accepted", iat=T0 + 5, check=False)
    session.add(status_object(s), ctx(world), source="1")
    session.add(handoff_object(o), ctx(world), source="2")
    rejected(session.verdicts[0], "policy")


def test_session_status_stays_pending_without_its_offer(world: World) -> None:
    session = Session(Verifier(world.trust))
    s = make_status(world.coder, offer_octets=offer(world), state="accepted", iat=T0 + 5)
    session.add(status_object(s), ctx(world), source="1")
    session.add(handoff_object(offer(world, task="other")), ctx(world), source="2")
    assert session.verdicts[0].outcome is Outcome.PENDING


def test_session_pending_retransmission_resolves_to_accept_then_duplicate(world: World) -> None:
    session = Session(Verifier(world.trust))
    o = offer(world)
    s = make_status(world.coder, offer_octets=o, state="accepted", iat=T0 + 5)
    session.add(status_object(s), ctx(world), source="1")
    session.add(status_object(s), ctx(world), source="2")
    session.add(handoff_object(o), ctx(world), source="3")
    assert [v.outcome for v in session.verdicts] == [
        Outcome.ACCEPT,
        Outcome.DUPLICATE,
        Outcome.ACCEPT,
    ]


def test_session_order_does_not_change_results(world: World) -> None:
    o = offer(world)
    s1 = make_status(world.coder, offer_octets=o, state="accepted", iat=T0 + 5)
    s2 = make_status(world.coder, offer_octets=o, state="completed", iat=T0 + 9)
    items = {"offer": handoff_object(o), "s1": status_object(s1), "s2": status_object(s2)}
    results = set()
    for order in (["offer", "s1", "s2"], ["s2", "s1", "offer"], ["s1", "offer", "s2"]):
        session = Session(Verifier(world.trust))
        for name in order:
            session.add(items[name], ctx(world), source=name)
        results.add(frozenset((v.source, v.outcome, v.reason) for v in session.verdicts))
    assert len(results) == 1


def test_a_delegator_judges_the_answers_to_its_own_offer(world: World) -> None:
    """``remember_offer``: the delegator knows its offer without receiving it, so a status
    answering it is judged instead of left pending."""
    offer = make_offer(world.planner, aud=world.coder.iss, dialog=DIALOG, iat=T0)
    status = status_object(make_status(world.coder, offer_octets=offer, state="accepted", iat=T0))
    ctx = Context(now=NOW, receiver=world.planner.iss)
    assert Verifier(world.trust).verify_value(status, ctx, source="s").outcome is Outcome.PENDING
    delegator = Verifier(world.trust)
    assert delegator.remember_offer(offer).digest == handoff_digest(offer)
    assert delegator.verify_value(status, ctx, source="s").outcome is Outcome.ACCEPT
    with pytest.raises(MalformedError, match="not a status"):
        delegator.remember_offer(
            make_status(world.coder, offer_octets=offer, state="failed", iat=T0)
        )
