"""Reply helpers never sign what this library's own verifier rejects (issue 19 item 5):
``make_status`` refuses a status from the wrong party or with a reason the profile forbids,
and every status it does sign is accepted by the ``Verifier``; ``Verdict.state`` says which
state a status verdict is about; ``answers`` keeps the octets to resend for a duplicate."""

from __future__ import annotations

import pytest
from handoff_context import (
    Context,
    Form,
    InMemoryState,
    Outcome,
    Reason,
    ReplyError,
    StatusState,
    Verifier,
    handoff_digest,
    handoff_object,
    make_offer,
    make_status,
    parse_element,
    sign_payload,
    status_object,
    status_payload,
)
from parties import T0, World

DIALOG = "ctx-reply"


def _offer(world: World, form: Form = Form.JWS) -> bytes:
    return make_offer(world.planner, aud=world.coder.iss, dialog=DIALOG, iat=T0, form=form)


def _judged(world: World, offer: bytes, status: bytes) -> Verifier:
    verifier = Verifier(world.trust)
    verifier.remember_offer(offer)
    return verifier


def test_a_rejected_for_another_audiences_offer_is_refused(world: World) -> None:
    """The tester received an offer meant for the coder (wrong-audience): it is not the
    offer's delegate, so a signed rejected from it would be flagged policy. Refused, with
    a message that says to refuse in the host protocol instead."""
    offer = _offer(world)
    with pytest.raises(ReplyError) as caught:
        make_status(
            world.tester, offer_octets=offer, state="rejected", iat=T0, reason="wrong-audience"
        )
    assert caught.value.reason is Reason.POLICY
    assert "must come from its delegate" in caught.value.detail
    assert "host protocol" in caught.value.detail


def test_what_the_refused_status_would_have_met(world: World) -> None:
    """The same status signed by hand (what make_status used to sign) is rejected by the
    verifier's parties check: the refusal mirrors a real rejection."""
    offer = _offer(world)
    payload = status_payload(
        offer={"iss": world.planner.iss, "aud": world.coder.iss, "hop": _hop(offer)},
        offer_octets=offer,
        state="rejected",
        iat=T0,
        iss=world.tester.iss,
        reason="wrong-audience",
    )
    status = sign_payload(payload, world.tester)
    verdict = _judged(world, offer, status).verify_value(
        status_object(status), Context(now=T0), source="t"
    )
    assert verdict.reason is Reason.POLICY


def _hop(offer: bytes) -> str:
    return parse_element(offer, Form.JWS).payload.hop


@pytest.mark.parametrize(
    ("signer", "state", "fields", "match"),
    [
        ("planner", "completed", {}, "must come from its delegate"),
        ("coder", "canceled", {}, "must come from its delegator"),
        ("coder", "accepted", {"aud": "spiffe://x.example/other"}, "goes to"),
        ("coder", "accepted", {"reason": "policy"}, "only on rejected and failed"),
        ("coder", "rejected", {"reason": "malformed"}, "local verdict"),
        ("coder", "rejected", {"reason": "equivocation"}, "gets no status"),
        ("coder", "failed", {"reason": "not a code"}, "neither a profile reason"),
        ("coder", "accepted", {"detail": "\ud800"}, "would be malformed"),
    ],
)
def test_statuses_the_verifier_or_profile_rejects_are_refused(
    world: World, signer: str, state: str, fields: dict[str, str], match: str
) -> None:
    answers = InMemoryState()
    offer = _offer(world)
    with pytest.raises(ReplyError, match=match):
        make_status(
            getattr(world, signer),
            offer_octets=offer,
            state=state,
            iat=T0,
            answers=answers,
            **fields,
        )
    assert answers.last_answer(handoff_digest(offer)) is None  # nothing signed or kept


@pytest.mark.parametrize("form", [Form.JWS, Form.COSE])
@pytest.mark.parametrize(
    ("signer", "state", "fields"),
    [
        ("coder", StatusState.ACCEPTED, {}),
        ("coder", StatusState.REJECTED, {"reason": "stale"}),
        ("coder", StatusState.REJECTED, {"reason": "https://policy.example/no"}),
        ("coder", StatusState.COMPLETED, {"detail": "done"}),
        ("coder", StatusState.FAILED, {"reason": "policy", "detail": "half"}),
        ("planner", StatusState.CANCELED, {}),
    ],
)
def test_every_status_it_signs_is_accepted_with_its_state(
    world: World, form: Form, signer: str, state: StatusState, fields: dict[str, str]
) -> None:
    offer = _offer(world, form)
    status = make_status(getattr(world, signer), offer_octets=offer, state=state, iat=T0, **fields)
    verdict = _judged(world, offer, status).verify_value(
        status_object(status), Context(now=T0 + 1), source="t"
    )
    assert verdict.outcome is Outcome.ACCEPT, verdict.detail
    assert verdict.state is state
    assert verdict.to_json()["element"] == "status"


def test_verdict_state_is_none_for_offers_and_unreadable_statuses(world: World) -> None:
    offer = _offer(world)
    verifier = Verifier(world.trust)
    verdict = verifier.verify_value(
        handoff_object(offer), Context(now=T0, receiver=world.coder.iss), source="t"
    )
    assert verdict.outcome is Outcome.ACCEPT and verdict.state is None
    bad = verifier.verify_value({"status": "a.b.c"}, Context(now=T0), source="t")
    assert bad.reason is Reason.MALFORMED and bad.state is None


def test_a_duplicate_is_answered_with_the_last_status_octets(world: World) -> None:
    """The receiver's side of a retransmission (profile §6.4): the second arrival of the
    same offer octets is ``duplicate``, and the answer memory holds the exact status
    octets signed for it, to send again (never a re-signed status)."""
    state = InMemoryState()
    offer = _offer(world)
    verifier = Verifier(world.trust, replay=state)
    ctx = Context(now=T0 + 1, receiver=world.coder.iss, dialog=DIALOG)
    first = verifier.verify_value(handoff_object(offer), ctx, source="first")
    assert first.outcome is Outcome.ACCEPT
    make_status(world.coder, offer_octets=offer, state="accepted", iat=T0 + 1, answers=state)
    done = make_status(
        world.coder, offer_octets=offer, state="completed", iat=T0 + 2, answers=state
    )
    again = verifier.verify_value(handoff_object(offer), ctx, source="again")
    assert again.outcome is Outcome.DUPLICATE
    assert again.digest is not None
    assert state.last_answer(again.digest) == done
