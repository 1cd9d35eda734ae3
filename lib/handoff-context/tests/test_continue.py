"""``continue_handoff``: hand a received handoff on (what ``handoff-trace sign offer --after``
does), and the next receiver can check the whole chain (profile §7)."""

from __future__ import annotations

import pytest
from handoff_context import (
    ChainWindowError,
    Context,
    Form,
    HandoffObject,
    MalformedError,
    Offer,
    Outcome,
    Reason,
    Verdict,
    Verifier,
    continue_handoff,
    handoff_digest,
    handoff_object,
    make_offer,
    make_status,
    parse_element,
    parse_object,
    status_object,
)
from parties import T0, World

DIALOG = "ctx-continue"


def _parsed(value: object) -> HandoffObject:
    obj = parse_object(value)
    assert isinstance(obj, HandoffObject)
    return obj


def _offer(value: object) -> Offer:
    obj = _parsed(value)
    offer = parse_element(obj.offer, obj.form).payload
    assert isinstance(offer, Offer)
    return offer


def _first(world: World, form: Form) -> dict[str, object]:
    offer = make_offer(world.planner, aud=world.coder.iss, dialog=DIALOG, iat=T0, form=form)
    return handoff_object(offer, form=form)


@pytest.mark.parametrize("form", [Form.JWS, Form.COSE])
def test_the_continued_handoff_verifies_as_a_full_chain(world: World, form: Form) -> None:
    received = _first(world, form)
    second = continue_handoff(world.coder, received, aud=world.tester.iss, iat=T0 + 5)
    obj, before, offer = _parsed(second), _parsed(received), _offer(second)
    assert obj.form is form and obj.chain == (before.offer,)
    assert offer.prev == handoff_digest(before.offer)
    assert offer.dialog == DIALOG and offer.iss == world.coder.iss
    verdict = Verifier(world.trust).verify_value(
        second, Context(now=T0 + 30, receiver=world.tester.iss, dialog=DIALOG), source="t"
    )
    assert verdict.outcome is Outcome.ACCEPT, verdict.detail
    assert verdict.chain is not None and verdict.chain.length == 2
    assert not verdict.chain.partial


def test_continuing_twice_carries_the_whole_chain(world: World) -> None:
    second = continue_handoff(world.coder, _first(world, Form.JWS), aud=world.tester.iss, iat=T0)
    third = continue_handoff(world.tester, second, aud=world.assistant.iss, iat=T0 + 10)
    verdict = Verifier(world.trust).verify_value(
        third, Context(now=T0 + 30, receiver=world.assistant.iss), source="t"
    )
    assert verdict.outcome is Outcome.ACCEPT, verdict.detail
    assert verdict.chain is not None and verdict.chain.length == 3


def test_without_the_chain_prev_is_set_and_the_chain_is_not_checked(world: World) -> None:
    second = continue_handoff(
        world.coder, _first(world, Form.JWS), aud=world.tester.iss, iat=T0, carry_chain=False
    )
    assert "chain" not in second
    verdict = Verifier(world.trust).verify_value(
        second, Context(now=T0 + 30, receiver=world.tester.iss), source="t"
    )
    assert verdict.outcome is Outcome.ACCEPT and verdict.chain is not None
    assert verdict.chain.partial
    assert {c.check: c.result.value for c in verdict.checks}["chain"] == "not-checked"


def test_fields_and_dialog_reach_the_new_offer(world: World) -> None:
    second = continue_handoff(
        world.coder,
        parse_object(_first(world, Form.JWS)),
        aud=world.tester.iss,
        iat=T0,
        dialog="ctx-other",
        task="task-7",
        lifetime=30,
    )
    offer = _offer(second)
    assert (offer.dialog, offer.task, offer.exp - offer.iat) == ("ctx-other", "task-7", 30)


def test_a_status_object_cannot_be_continued(world: World) -> None:
    offer = make_offer(world.planner, aud=world.coder.iss, dialog=DIALOG, iat=T0)
    status = make_status(world.coder, offer_octets=offer, state="accepted", iat=T0)
    with pytest.raises(MalformedError, match="status object"):
        continue_handoff(world.coder, status_object(status), aud=world.tester.iss, iat=T0)
    with pytest.raises(MalformedError):
        continue_handoff(world.coder, {"offer": "not a jws"}, aud=world.tester.iss, iat=T0)


def test_the_form_must_be_the_received_handoffs(world: World) -> None:
    with pytest.raises(ValueError, match="form"):
        continue_handoff(
            world.coder, _first(world, Form.COSE), aud=world.tester.iss, iat=T0, form=Form.JWS
        )


# --- the window (profile §7 timing, issue 19 item 4) ---------------------------------------


def _judge_next_hop(world: World, value: dict[str, object], now: int) -> Verdict:
    return Verifier(world.trust).verify_value(
        value, Context(now=now, receiver=world.tester.iss, dialog=DIALOG), source="t"
    )


@pytest.mark.parametrize("form", [Form.JWS, Form.COSE])
def test_a_late_continuation_fails_at_the_delegating_agent(world: World, form: Form) -> None:
    """Ten minutes after a 120-second offer arrived, continuing it would give the next hop
    a broken chain: the delegating agent gets ChainWindowError instead, naming both ways
    out, and nothing is signed."""
    received = _first(world, form)
    late = T0 + 600
    with pytest.raises(ChainWindowError) as caught:
        continue_handoff(world.coder, received, aud=world.tester.iss, iat=late)
    error = caught.value
    assert error.reason is Reason.BROKEN_CHAIN
    assert (error.received_exp, error.iat) == (T0 + 120, late)
    assert "within the received offer's window" in error.detail
    assert "partial=True" in error.detail
    # Within the window the same call signs, and the next hop accepts the chain.
    timely = continue_handoff(world.coder, received, aud=world.tester.iss, iat=T0 + 110)
    assert _judge_next_hop(world, timely, T0 + 115).outcome is Outcome.ACCEPT


def test_partial_carries_prev_without_the_chain_past_the_window(world: World) -> None:
    received = _first(world, Form.JWS)
    second = continue_handoff(
        world.coder, received, aud=world.tester.iss, iat=T0 + 600, partial=True
    )
    assert "chain" not in second
    assert _offer(second).prev == handoff_digest(_parsed(received).offer)
    verdict = _judge_next_hop(world, second, T0 + 610)
    assert verdict.outcome is Outcome.ACCEPT, verdict.detail
    assert verdict.chain is not None and verdict.chain.partial


def test_the_window_edges(world: World) -> None:
    """The window is the received offer's life (``iat .. exp``), widened by ``skew``."""
    received = _first(world, Form.JWS)
    exp = T0 + 120
    continue_handoff(world.coder, received, aud=world.tester.iss, iat=exp)
    with pytest.raises(ChainWindowError, match="after it expired"):
        continue_handoff(world.coder, received, aud=world.tester.iss, iat=exp + 1)
    at_skew = continue_handoff(world.coder, received, aud=world.tester.iss, iat=exp + 60, skew=60)
    # A receiver with the default 60-second skew accepts what skew=60 allowed.
    assert _judge_next_hop(world, at_skew, exp + 60).outcome is Outcome.ACCEPT
    with pytest.raises(ChainWindowError, match="after it expired"):
        continue_handoff(world.coder, received, aud=world.tester.iss, iat=exp + 61, skew=60)
    with pytest.raises(ChainWindowError, match="before it was issued"):
        continue_handoff(world.coder, received, aud=world.tester.iss, iat=T0 - 1)


def test_without_the_window_check_the_next_hop_sees_broken_chain(world: World) -> None:
    """The rule the error applies is the next hop's own: a chain carried past the window is
    broken-chain there (signed here by hand, as a delegator without this check would)."""
    received = _parsed(_first(world, Form.JWS))
    late = make_offer(
        world.coder,
        aud=world.tester.iss,
        dialog=DIALOG,
        iat=T0 + 600,
        prev=handoff_digest(received.offer),
    )
    verdict = _judge_next_hop(world, handoff_object(late, [received.offer]), T0 + 610)
    assert verdict.reason is Reason.BROKEN_CHAIN
