"""``handoff_context.agent``: what the SDK integrations decide, without an SDK (issue 19).

The offers come from the test parties; the receiving agent's memory is a real ``FileState``
on disk, reopened to stand for a restart. Time is injected."""

from __future__ import annotations

from pathlib import Path

import pytest
from handoff_context import (
    Agent,
    FileState,
    Form,
    InMemoryState,
    Mode,
    Outcome,
    StatusState,
    handoff_digest,
    handoff_object,
    make_offer,
    parse_element,
    status_object,
)
from handoff_context.agent import current, enter, leave, took_effect
from handoff_context.errors import ChainWindowError
from parties import T0, World


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def coder(world: World, tmp_path: Path, **options: object) -> Agent:
    state = FileState(tmp_path / "coder.state", clock=lambda: T0 + 30)
    return Agent(world.coder, world.trust, state=state, clock=Clock(T0 + 30), **options)  # type: ignore[arg-type]


def offer(world: World, **fields: object) -> bytes:
    fields.setdefault("iat", T0)
    return make_offer(world.planner, aud=fields.pop("aud", world.coder.iss), dialog="d", **fields)  # type: ignore[arg-type]


def payload_of(status: bytes) -> object:
    return parse_element(status, Form.JWS).payload


def test_an_accepted_offer_runs_and_its_statuses_are_signed_once(
    world: World, tmp_path: Path
) -> None:
    agent = coder(world, tmp_path)
    decision = agent.check_offer(handoff_object(offer(world)), dialog="d")
    assert decision.run and decision.verdict.outcome is Outcome.ACCEPT
    received = decision.received
    assert received is not None
    accepted = agent.answer(received, StatusState.ACCEPTED)
    assert accepted is not None and agent.answer(received, StatusState.ACCEPTED) is None
    # The delegate never signs canceled (profile §1.2: the delegator does).
    assert agent.answer(received, StatusState.CANCELED) is None
    took_effect([{"kind": "digest", "digest": handoff_digest(b"written")}])
    failed = agent.answer(received, StatusState.FAILED)
    assert failed is not None
    assert payload_of(failed).state is StatusState.FAILED  # type: ignore[attr-defined]
    assert len(payload_of(failed).refs) == 1  # type: ignore[attr-defined]
    assert agent.state.last_answer(received.offer.digest) == failed
    agent.state.close()


def test_a_retransmission_after_a_restart_gets_the_last_status_and_never_runs(
    world: World, tmp_path: Path
) -> None:
    octets = offer(world)
    first = coder(world, tmp_path)
    decision = first.check_offer(handoff_object(octets), dialog="d")
    assert decision.received is not None
    done = first.answer(decision.received, StatusState.COMPLETED)
    first.state.close()
    again = coder(world, tmp_path)  # the same file: what a restarted process opens
    decision = again.check_offer(handoff_object(octets), dialog="d")
    assert (decision.run, decision.retransmission, decision.answer) == (False, True, done)
    again.state.close()


@pytest.mark.parametrize(
    ("make", "reason", "signed"),
    [
        (lambda w: offer(w, aud=w.tester.iss), "wrong-audience", False),
        (lambda w: offer(w, iat=T0 - 1000, lifetime=100), "stale", True),
        (lambda w: offer(w, lifetime=1000), "policy", True),
    ],
)
def test_a_refused_offer_gets_the_reason_and_a_signed_rejected_where_allowed(
    world: World, tmp_path: Path, make: object, reason: str, signed: bool
) -> None:
    agent = coder(world, tmp_path)
    octets = make(world)  # type: ignore[operator]
    decision = agent.check_offer(handoff_object(octets), dialog="d")
    assert (decision.run, decision.reason) == (False, reason)
    assert (decision.status is not None) is signed
    again = agent.check_offer(handoff_object(octets), dialog="d")
    assert again.status == decision.status  # the same refusal, the same octets
    if decision.status is not None:
        status = payload_of(decision.status)
        assert (status.state, status.reason) == (StatusState.REJECTED, reason)  # type: ignore[attr-defined]
        assert status.offer == handoff_digest(octets)  # type: ignore[attr-defined]
    agent.state.close()


def test_equivocation_and_malformed_get_no_status(world: World, tmp_path: Path) -> None:
    agent = coder(world, tmp_path)
    first = offer(world)
    hop = parse_element(first, Form.JWS).payload.hop
    assert agent.check_offer(handoff_object(first), dialog="d").run
    twin = agent.check_offer(handoff_object(offer(world, iat=T0 + 1, hop=hop)), dialog="d")
    assert (twin.run, twin.reason, twin.status) == (False, "equivocation", None)
    broken = agent.check_offer({"offer": "not.a.jws"}, dialog="d")
    assert (broken.run, broken.reason, broken.status) == (False, "malformed", None)
    missing = agent.refuse_missing(dialog="d")
    assert (missing.run, missing.reason) == (False, "policy")
    agent.state.close()


def test_audit_mode_runs_everything_and_signs_nothing_for_what_failed(
    world: World, tmp_path: Path
) -> None:
    seen: list[object] = []
    agent = coder(world, tmp_path, mode=Mode.AUDIT, on_verdict=seen.append)
    decision = agent.check_offer(handoff_object(offer(world, aud=world.tester.iss)), dialog="d")
    assert decision.run and decision.verdict.reason is not None
    assert decision.received is not None
    assert agent.answer(decision.received, StatusState.COMPLETED) is None
    assert agent.refuse_missing(dialog="d").run
    assert [v.outcome for v in seen] == [Outcome.REJECT]  # type: ignore[attr-defined]
    agent.state.close()


def test_a_delegation_inside_a_task_continues_its_handoff(world: World, tmp_path: Path) -> None:
    agent = coder(world, tmp_path)
    upstream = offer(world)
    decision = agent.check_offer(handoff_object(upstream), dialog="d")
    assert decision.received is not None
    token = enter(decision.received)
    try:
        assert current() is decision.received
        delegation = agent.delegate(world.tester.iss, dialog=None)
    finally:
        leave(token)
    assert current() is None
    sent = parse_element(delegation.offer, Form.JWS).payload
    assert sent.prev == handoff_digest(upstream) and sent.dialog == "d"
    assert delegation.handoff["chain"] == [upstream.decode("ascii")]
    assert decision.received.delegations == [delegation]
    with pytest.raises(ValueError, match="dialog"):
        agent.delegate(world.tester.iss, dialog=None)  # outside a task: no dialog to continue
    agent.state.close()


def test_a_late_delegation_raises_at_the_delegating_agent(world: World, tmp_path: Path) -> None:
    agent = coder(world, tmp_path)
    decision = agent.check_offer(handoff_object(offer(world)), dialog="d")
    assert decision.received is not None
    agent.clock.now = T0 + 600  # type: ignore[attr-defined]
    token = enter(decision.received)
    try:
        with pytest.raises(ChainWindowError, match="partial"):
            agent.delegate(world.tester.iss, dialog=None)
    finally:
        leave(token)
    assert decision.received.delegations == []
    agent.state.close()


def test_statuses_that_come_back_are_checked_and_move_the_state_forward(world: World) -> None:
    from handoff_context import make_status

    planner = Agent(world.planner, world.trust, state=InMemoryState(), clock=Clock(T0 + 30))
    delegation = planner.delegate(world.coder.iss, dialog="d")
    done = make_status(world.coder, offer_octets=delegation.offer, state="completed", iat=T0 + 5)
    late = make_status(world.coder, offer_octets=delegation.offer, state="accepted", iat=T0 + 6)
    assert planner.check_reply(delegation, status_object(done)).outcome is Outcome.ACCEPT
    assert planner.check_reply(delegation, status_object(late)).outcome is Outcome.ACCEPT
    assert delegation.state is StatusState.COMPLETED  # an accepted after completed stays completed
    other = planner.delegate(world.coder.iss, dialog="d")
    wrong = make_status(world.coder, offer_octets=other.offer, state="completed", iat=T0 + 5)
    verdict = planner.check_reply(delegation, status_object(wrong))
    assert (verdict.outcome, verdict.reason) == (Outcome.REJECT, "policy")
    assert delegation.statuses == [done, late]


def test_only_the_delegator_may_cancel(world: World, tmp_path: Path) -> None:
    from handoff_context import make_status, sign_payload, status_payload

    agent = coder(world, tmp_path)
    octets = offer(world)
    decision = agent.check_offer(handoff_object(octets), dialog="d")
    assert decision.received is not None
    p = parse_element(octets, Form.JWS).payload
    forged = sign_payload(
        status_payload(
            offer={"iss": p.iss, "aud": p.aud, "hop": p.hop},
            offer_octets=octets,
            state="canceled",
            iat=T0 + 10,
            iss=world.tester.iss,
        ),
        world.tester,
    )
    verdict = agent.check_cancel(decision.received, status_object(forged))
    assert verdict.outcome is Outcome.REJECT and decision.received.canceled is None
    real = make_status(world.planner, offer_octets=octets, state="canceled", iat=T0 + 10)
    assert agent.check_cancel(decision.received, status_object(real)).outcome is Outcome.ACCEPT
    assert decision.received.canceled == real
    agent.state.close()


def test_an_agent_without_a_key_checks_but_signs_nothing(world: World) -> None:
    """``handoff-trace tap --enforce`` without the agent's key: the same checks, no status."""
    with pytest.raises(ValueError, match="needs its identifier"):
        Agent(None, world.trust, state=InMemoryState())
    with pytest.raises(ValueError, match="not 'spiffe://elsewhere'"):
        Agent(world.coder, world.trust, iss="spiffe://elsewhere", state=InMemoryState())
    agent = Agent(
        None, world.trust, iss=world.coder.iss, state=InMemoryState(), clock=Clock(T0 + 30)
    )
    decision = agent.check_offer(handoff_object(offer(world)), dialog="d")
    assert decision.run and decision.received is not None
    assert agent.answer(decision.received, StatusState.ACCEPTED) is None
    stale = agent.check_offer(handoff_object(offer(world, iat=T0 - 1000, lifetime=100)), dialog="d")
    assert not stale.run and stale.reason == "stale" and stale.status is None
    with pytest.raises(RuntimeError, match="holds no signing key"):
        agent.delegate(world.tester.iss, dialog="d")
