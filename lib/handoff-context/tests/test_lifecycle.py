"""Hop state and flags (profile §8): one test per rule and decision, and order-independence
properties over random sets of facts."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from handoff_context import (
    A2A_STATE,
    SEVERITY,
    DownstreamFact,
    Flag,
    FlagKind,
    Form,
    HopState,
    HopView,
    HostObservation,
    Offer,
    OfferFact,
    Severity,
    Signer,
    Status,
    StatusFact,
    StatusState,
    Timing,
    derive_hop,
    hop_state_of_a2a,
    make_offer,
    make_status,
    parse_element,
)
from handoff_context._lifecycle import normalise_task_state
from hypothesis import given, settings
from hypothesis import strategies as st

A = StatusState.ACCEPTED
R = StatusState.REJECTED
C = StatusState.COMPLETED
F = StatusState.FAILED
X = StatusState.CANCELED

DELEGATOR = "spiffe://a.example/agent/planner"
DELEGATE = "spiffe://b.example/agent/coder"
IAT, EXP = 1_000, 1_120
T = Timing()  # skew 60, lost outcome after 3600, cancel grace 60
OFFER = OfferFact(
    digest=hashlib.sha256(b"offer").digest(),
    iss=DELEGATOR,
    aud=DELEGATE,
    hop="q3Zl0v8bVfQmJm2c4bq1Ww",
    dialog="ctx-7c1e",
    task="task-42",
    iat=IAT,
    exp=EXP,
    prev=None,
)


def status(
    state: StatusState,
    iat: int,
    received_at: int | None = None,
    *,
    reason: str | None = None,
    refs: int = 0,
    tag: str = "",
) -> StatusFact:
    """A status fact whose digest is derived from its content (``tag`` makes a twin)."""
    received = iat if received_at is None else received_at
    seed = f"{state}|{iat}|{received}|{reason}|{refs}|{tag}".encode()
    iss = DELEGATOR if state is X else DELEGATE
    return StatusFact(hashlib.sha256(seed).digest(), state, iss, iat, received, reason, refs)


def downstream(name: str, canceled_at: int | None, iss: str = DELEGATE) -> DownstreamFact:
    return DownstreamFact(hashlib.sha256(name.encode()).digest(), iss, f"hop-{name}", canceled_at)


def derive(*statuses: StatusFact, now: int = IAT + 10, **kw: Any) -> HopView:
    return derive_hop(OFFER, statuses, now=now, **kw)


def only(view: HopView, kind: FlagKind) -> Flag:
    flags = [f for f in view.flags if f.kind is kind]
    assert len(flags) == 1, view.flags
    return flags[0]


def kinds(view: HopView) -> list[tuple[FlagKind, str | None]]:
    return [(f.kind, f.variant) for f in view.flags]


def evidence(*facts: StatusFact | DownstreamFact) -> tuple[bytes, ...]:
    return tuple(sorted({OFFER.digest, *(f.digest for f in facts)}))


# --- tables -----------------------------------------------------------------------------


def test_a2a_table_is_spec_8() -> None:
    assert A2A_STATE == {
        HopState.OFFERED: "TASK_STATE_SUBMITTED",
        HopState.ACCEPTED: "TASK_STATE_WORKING",
        HopState.COMPLETED: "TASK_STATE_COMPLETED",
        HopState.FAILED: "TASK_STATE_FAILED",
        HopState.REJECTED: "TASK_STATE_REJECTED",
        HopState.CANCELED: "TASK_STATE_CANCELED",
        HopState.EXPIRED: None,
    }


def test_every_flag_kind_has_a_severity() -> None:
    assert set(SEVERITY) == set(FlagKind)
    assert SEVERITY[FlagKind.EQUIVOCATION] is Severity.CRITICAL
    assert SEVERITY[FlagKind.LOST_OUTCOME] is Severity.HIGH
    assert SEVERITY[FlagKind.STATUS_CONFLICT] is Severity.HIGH
    assert SEVERITY[FlagKind.HOST_DIVERGENCE] is Severity.LOW


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("TASK_STATE_SUBMITTED", HopState.OFFERED),
        ("submitted", HopState.OFFERED),
        ("TASK_STATE_WORKING", HopState.ACCEPTED),
        ("working", HopState.ACCEPTED),
        ("completed", HopState.COMPLETED),
        ("TASK_STATE_FAILED", HopState.FAILED),
        ("rejected", HopState.REJECTED),
        ("canceled", HopState.CANCELED),
        ("cancelled", HopState.CANCELED),
        ("TASK_STATE_CANCELLED", HopState.CANCELED),
        ("TASK_STATE_CANCELED", HopState.CANCELED),
        ("input-required", None),
        ("TASK_STATE_INPUT_REQUIRED", None),
        ("auth-required", None),
        ("TASK_STATE_AUTH_REQUIRED", None),
        ("unknown", None),
        ("TASK_STATE_UNSPECIFIED", None),
        ("nonsense", None),
    ],
)
def test_hop_state_of_a2a(name: str, expected: HopState | None) -> None:
    assert hop_state_of_a2a(name) is expected


def test_normalise_task_state() -> None:
    assert normalise_task_state("input-required") == "TASK_STATE_INPUT_REQUIRED"
    assert normalise_task_state(" working ") == "TASK_STATE_WORKING"


def test_timing_refuses_negative_values() -> None:
    with pytest.raises(ValueError):
        Timing(cancel_grace=-1)


# --- states -----------------------------------------------------------------------------


def test_no_status_is_offered_until_exp_plus_skew() -> None:
    view = derive(now=EXP + T.skew)  # still fresh at exactly exp + skew (profile §6.3)
    assert (view.state, view.a2a_state) == (HopState.OFFERED, "TASK_STATE_SUBMITTED")
    assert view.deadline == EXP + T.skew + 1
    assert (view.flags, view.accepted_at, view.terminal_at) == ((), None, None)


def test_expired_after_exp_plus_skew_is_local() -> None:
    view = derive(now=EXP + T.skew + 1)
    assert (view.state, view.a2a_state, view.deadline) == (HopState.EXPIRED, None, None)
    assert view.terminal_at is None


def test_later_status_replaces_expired() -> None:
    late = status(C, EXP + 500)
    view = derive(late, now=EXP + 600)
    assert view.state is HopState.COMPLETED
    assert view.terminal_at == EXP + 500


def test_accepted() -> None:
    view = derive(status(A, 1_010, 1_012), now=1_020)
    assert (view.state, view.a2a_state) == (HopState.ACCEPTED, "TASK_STATE_WORKING")
    assert (view.accepted_at, view.terminal_at) == (1_012, None)
    assert view.flags == ()


def test_completed_after_accepted() -> None:
    view = derive(status(A, 1_010, 1_011), status(C, 1_050, 1_052), now=1_100)
    assert (view.state, view.accepted_at, view.terminal_at) == (HopState.COMPLETED, 1_011, 1_052)
    assert (view.flags, view.deadline) == ((), None)


@pytest.mark.parametrize("outcome", [C, F])
def test_outcome_without_accepted_implies_it(outcome: StatusState) -> None:
    view = derive(status(outcome, 1_050, 1_055), now=1_100)
    assert view.state == HopState(outcome.value)
    assert view.accepted_at == 1_055  # the acceptance became known with the outcome
    assert view.terminal_at == 1_055
    assert not any(f.kind is FlagKind.STATUS_CONFLICT for f in view.flags)


def test_rejected_is_terminal() -> None:
    view = derive(status(R, 1_010, reason="policy"), now=EXP + 10_000)
    assert (view.state, view.a2a_state) == (HopState.REJECTED, "TASK_STATE_REJECTED")
    assert (view.accepted_at, view.terminal_at, view.deadline) == (None, 1_010, None)


@pytest.mark.parametrize("reason", ["stale", "replay"])
def test_stale_or_replay_rejection_is_not_terminal(reason: str) -> None:
    soft = status(R, 1_005, reason=reason)
    assert derive(soft, now=1_010).state is HopState.OFFERED
    # ...it does not stop expiry either: it is not a verified answer to the offer.
    assert derive(soft, now=EXP + T.skew + 1).state is HopState.EXPIRED
    # ...and it conflicts with nothing: the delegate merely did not remember the offer.
    view = derive(soft, status(A, 1_010), now=1_020)
    assert (view.state, view.flags) == (HopState.ACCEPTED, ())


def test_cancel_replaces_offered_accepted_and_expired() -> None:
    cancel = status(X, 1_030, 1_031)
    assert derive(cancel, now=1_040).state is HopState.CANCELED
    view = derive(status(A, 1_010), cancel, now=1_040)
    assert (view.state, view.accepted_at, view.terminal_at) == (HopState.CANCELED, 1_010, 1_031)
    # A cancel signed before the accepted still wins: accepted is not final.
    assert derive(status(A, 1_040), cancel, now=1_050).state is HopState.CANCELED
    late_cancel = status(X, EXP + 500)
    assert derive(late_cancel, now=EXP + 600).state is HopState.CANCELED


def test_cancel_after_rejection_keeps_rejected_without_flag() -> None:
    view = derive(status(R, 1_010), status(X, 1_020), now=1_030)
    assert (view.state, view.flags) == (HopState.REJECTED, ())
    view = derive(status(X, 1_010), status(R, 1_020), now=1_030)
    assert (view.state, view.flags) == (HopState.CANCELED, ())


# --- status-conflict and cancel-race ------------------------------------------------------


def test_complete_fail_conflict_first_signed_wins() -> None:
    done, failed = status(C, 1_050, 1_100), status(F, 1_060, 1_070)
    view = derive(done, failed, now=1_200)
    assert view.state is HopState.COMPLETED  # earlier iat, although received later
    flag = only(view, FlagKind.STATUS_CONFLICT)
    assert (flag.variant, flag.severity) == ("complete-fail", Severity.HIGH)
    assert flag.evidence == evidence(done, failed)
    assert flag.opened_at == 1_100  # when the second side arrived
    assert derive(status(C, 1_070), failed, now=1_200).state is HopState.FAILED


def test_complete_fail_tie_is_broken_by_digest() -> None:
    done, failed = status(C, 1_050), status(F, 1_050)
    winner = min((done, failed), key=lambda s: s.digest)
    assert derive(done, failed, now=1_200).state == HopState(winner.state.value)


def test_accept_reject_conflict() -> None:
    accepted, rejected = status(A, 1_010, 1_011), status(R, 1_020, 1_021, reason="policy")
    view = derive(accepted, rejected, now=1_030)
    assert view.state is HopState.ACCEPTED
    flag = only(view, FlagKind.STATUS_CONFLICT)
    assert (flag.variant, flag.evidence, flag.opened_at) == (
        "accept-reject",
        evidence(accepted, rejected),
        1_021,
    )
    early_reject = status(R, 1_005)
    view = derive(accepted, early_reject, now=1_030)
    assert (view.state, view.accepted_at, view.terminal_at) == (HopState.REJECTED, None, 1_005)


def test_rejected_and_completed_is_accept_reject() -> None:
    view = derive(status(R, 1_010), status(C, 1_020), now=1_030)
    assert view.state is HopState.REJECTED
    assert kinds(view) == [(FlagKind.STATUS_CONFLICT, "accept-reject")]


def test_duplicate_slot() -> None:
    one, two = status(A, 1_010, 1_015), status(A, 1_011, 1_012, tag="re-signed")
    view = derive(one, two, now=1_020)
    assert view.state is HopState.ACCEPTED
    assert view.accepted_at == 1_012
    flag = only(view, FlagKind.STATUS_CONFLICT)
    assert (flag.variant, flag.evidence, flag.opened_at) == (
        "duplicate-slot",
        evidence(one, two),
        1_015,
    )


def test_two_different_cancels_are_no_conflict() -> None:
    view = derive(status(X, 1_010), status(X, 1_011), now=1_020)
    assert (view.state, view.flags, view.terminal_at) == (HopState.CANCELED, (), 1_010)


def test_identical_facts_are_one_element() -> None:
    accepted = status(A, 1_010)
    assert derive(accepted, accepted, now=1_020) == derive(accepted, now=1_020)


def test_several_conflicts_give_one_flag_per_variant() -> None:
    facts = [
        status(A, 1_010),
        status(A, 1_011),
        status(R, 1_012),
        status(C, 1_013),
        status(F, 1_014),
    ]
    view = derive(*facts, now=1_020)
    assert kinds(view) == [
        (FlagKind.STATUS_CONFLICT, "accept-reject"),
        (FlagKind.STATUS_CONFLICT, "complete-fail"),
        (FlagKind.STATUS_CONFLICT, "duplicate-slot"),
    ]
    assert view.state is HopState.COMPLETED


def test_cancel_race_when_outcome_signed_first() -> None:
    done, cancel = status(C, 1_020, 1_021), status(X, 1_030, 1_031)
    view = derive(done, cancel, now=1_040)
    assert view.state is HopState.COMPLETED  # the cancel came too late to change anything
    flag = only(view, FlagKind.CANCEL_RACE)
    assert (flag.evidence, flag.opened_at, flag.severity) == (
        evidence(done, cancel),
        1_031,
        Severity.MEDIUM,
    )


def test_cancel_race_when_cancel_signed_first() -> None:
    cancel, failed = status(X, 1_020, 1_021), status(F, 1_030, 1_035)
    view = derive(cancel, failed, now=1_040)
    assert view.state is HopState.CANCELED
    assert only(view, FlagKind.CANCEL_RACE).opened_at == 1_035


# --- lost-outcome --------------------------------------------------------------------------


def test_lost_outcome_deadline_then_flag() -> None:
    accepted = status(A, 1_010, 1_012)
    due = 1_012 + T.lost_outcome_after
    before = derive(accepted, now=due - 1)
    assert (before.flags, before.deadline) == ((), due)
    after = derive(accepted, now=due)
    flag = only(after, FlagKind.LOST_OUTCOME)
    assert (flag.opened_at, flag.evidence, flag.severity) == (
        due,
        evidence(accepted),
        Severity.HIGH,
    )
    assert (after.state, after.deadline) == (HopState.ACCEPTED, None)


def test_lost_outcome_uses_timing() -> None:
    view = derive(status(A, 1_010), now=1_020, timing=Timing(lost_outcome_after=10))
    assert only(view, FlagKind.LOST_OUTCOME).opened_at == 1_020


@pytest.mark.parametrize("end", [C, F, X])
def test_no_lost_outcome_once_ended(end: StatusState) -> None:
    view = derive(status(A, 1_010), status(end, 1_020), now=100_000)
    assert FlagKind.LOST_OUTCOME not in [f.kind for f in view.flags]
    assert view.deadline is None


# --- cancel-not-propagated -------------------------------------------------------------------


def test_cancel_not_propagated() -> None:
    cancel = status(X, 1_030, 1_031)
    due = 1_031 + T.cancel_grace
    silent, prompt = downstream("silent", None), downstream("prompt", 1_040)
    before = derive(cancel, now=due - 1, downstream=[silent, prompt])
    assert (before.flags, before.deadline) == ((), due)
    after = derive(cancel, now=due, downstream=[silent, prompt])
    flag = only(after, FlagKind.CANCEL_NOT_PROPAGATED)
    assert (flag.opened_at, flag.evidence, flag.severity) == (
        due,
        evidence(cancel, silent),
        Severity.MEDIUM,
    )
    assert after.deadline is None


def test_cancel_propagated_in_time_raises_nothing() -> None:
    cancel = status(X, 1_030, 1_031)
    on_deadline = downstream("d", 1_031 + T.cancel_grace)
    view = derive(cancel, now=1_040, downstream=[on_deadline])
    assert (view.flags, view.deadline) == ((), None)
    assert derive(cancel, now=99_999, downstream=[on_deadline]).flags == ()


def test_late_propagation_is_still_flagged() -> None:
    cancel = status(X, 1_030, 1_031)
    late = downstream("late", 1_031 + T.cancel_grace + 1)
    view = derive(cancel, now=99_999, downstream=[late])
    assert only(view, FlagKind.CANCEL_NOT_PROPAGATED).evidence == evidence(cancel, late)


def test_cancel_propagation_counts_from_first_cancel_received() -> None:
    first, second = status(X, 1_030, 1_040), status(X, 1_020, 1_050)
    view = derive(first, second, now=1_040, downstream=[downstream("d", None)])
    assert view.deadline == 1_040 + T.cancel_grace


def test_propagation_only_for_offers_the_delegate_issued() -> None:
    foreign = downstream("foreign", None, iss="spiffe://c.example/agent/other")
    view = derive(status(X, 1_030), now=99_999, downstream=[foreign])
    assert (view.flags, view.deadline) == ((), None)


def test_propagation_not_judged_unless_canceled() -> None:
    done, cancel = status(C, 1_020), status(X, 1_030)
    view = derive(done, cancel, now=99_999, downstream=[downstream("d", None)])
    assert kinds(view) == [(FlagKind.CANCEL_RACE, None)]


# --- partial-failure -----------------------------------------------------------------------


def test_partial_failure() -> None:
    failed = status(F, 1_020, 1_022, reason="policy", refs=2)
    view = derive(failed, now=1_030)
    flag = only(view, FlagKind.PARTIAL_FAILURE)
    assert (flag.evidence, flag.opened_at, flag.severity) == (
        evidence(failed),
        1_022,
        Severity.MEDIUM,
    )
    assert derive(status(F, 1_020), now=1_030).flags == ()


# --- host-divergence -----------------------------------------------------------------------


def test_host_agrees() -> None:
    host = [HostObservation("TASK_STATE_WORKING", 1_015)]
    assert derive(status(A, 1_010), now=1_020, host=host).flags == ()


def test_host_divergence_uses_latest_observation() -> None:
    done = status(C, 1_010, 1_011)
    host = [HostObservation("completed", 1_030), HostObservation("TASK_STATE_WORKING", 1_040)]
    flag = only(derive(done, now=1_050, host=host), FlagKind.HOST_DIVERGENCE)
    assert (flag.opened_at, flag.evidence, flag.severity) == (1_040, evidence(done), Severity.LOW)
    assert "TASK_STATE_WORKING" in flag.detail


def test_host_divergence_opens_when_the_hop_state_started() -> None:
    host = [HostObservation("submitted", 1_005)]
    flag = only(derive(status(A, 1_010, 1_012), now=1_050, host=host), FlagKind.HOST_DIVERGENCE)
    assert flag.opened_at == 1_012


def test_host_divergence_on_an_offered_hop() -> None:
    flag = only(
        derive(now=1_050, host=[HostObservation("working", 1_020)]), FlagKind.HOST_DIVERGENCE
    )
    assert (flag.evidence, flag.opened_at) == ((OFFER.digest,), 1_020)


def test_host_input_and_auth_required_are_skipped() -> None:
    host = [
        HostObservation("TASK_STATE_WORKING", 1_015),
        HostObservation("input-required", 1_020),
        HostObservation("TASK_STATE_AUTH_REQUIRED", 1_030),
    ]
    assert derive(status(A, 1_010), now=1_040, host=host).flags == ()
    only_interrupts = [HostObservation("input-required", 1_020)]
    assert derive(status(C, 1_010), now=1_040, host=only_interrupts).flags == ()


def test_host_divergence_ignored_while_expired() -> None:
    view = derive(now=EXP + 1_000, host=[HostObservation("TASK_STATE_WORKING", 1_020)])
    assert (view.state, view.flags) == (HopState.EXPIRED, ())


def test_host_ties_of_time_and_order_are_broken_by_state_name() -> None:
    host = [HostObservation("TASK_STATE_CANCELED", 1_020), HostObservation("working", 1_020)]
    # Same time, no order: TASK_STATE_WORKING sorts after TASK_STATE_CANCELED, so it is
    # "latest" (only so that the answer does not depend on the order facts are given in).
    assert derive(status(A, 1_010), now=1_030, host=host).flags == ()
    assert derive(status(A, 1_010), now=1_030, host=host[::-1]).flags == ()


def test_a_fast_task_is_judged_in_stream_order_not_by_name() -> None:
    # WORKING then COMPLETED within one second: by time with its fraction ...
    by_time = [
        HostObservation("TASK_STATE_WORKING", 1_020.25),
        HostObservation("TASK_STATE_COMPLETED", 1_020.257),
    ]
    # ... or, sharing one HAR startedDateTime, by position in the stream.
    by_order = [
        HostObservation("TASK_STATE_WORKING", 1_020.5, order=(0,)),
        HostObservation("TASK_STATE_COMPLETED", 1_020.5, order=(1,)),
    ]
    for host in (by_time, by_order):
        assert derive(status(C, 1_010), now=1_030, host=host).flags == ()
        assert derive(status(C, 1_010), now=1_030, host=host[::-1]).flags == ()
    late = [*by_order[::-1], HostObservation("TASK_STATE_WORKING", 1_020.5, order=(2,))]
    flag = only(derive(status(C, 1_010), now=1_030, host=late), FlagKind.HOST_DIVERGENCE)
    assert isinstance(flag.opened_at, int)  # flags open at NumericDate seconds


# --- real elements -------------------------------------------------------------------------


def test_facts_from_signed_elements() -> None:
    """Facts built from elements signed by the toolkit derive as expected."""
    planner, coder = Signer.generate(DELEGATOR), Signer.generate(DELEGATE)
    offer_octets = make_offer(planner, aud=DELEGATE, dialog="ctx-7c1e", iat=IAT, task="task-42")
    element = parse_element(offer_octets, Form.JWS)
    offer = element.payload
    assert isinstance(offer, Offer)
    fact = OfferFact(
        digest=element.digest,
        iss=offer.iss,
        aud=offer.aud,
        hop=offer.hop,
        dialog=offer.dialog,
        task=offer.task,
        iat=offer.iat,
        exp=offer.exp,
        prev=offer.prev,
    )
    facts = []
    for state, iat in ((A, IAT + 5), (C, IAT + 50)):
        octets = make_status(coder, offer_octets=offer_octets, state=state, iat=iat)
        answer = parse_element(octets, Form.JWS)
        assert isinstance(answer.payload, Status) and answer.payload.offer == element.digest
        facts.append(StatusFact(answer.digest, state, answer.payload.iss, iat, iat + 1, None, 0))
    view = derive_hop(fact, facts[::-1], now=IAT + 60)
    assert (view.state, view.accepted_at, view.terminal_at) == (
        HopState.COMPLETED,
        IAT + 6,
        IAT + 51,
    )


# --- properties ----------------------------------------------------------------------------

_REASONS = {
    R: st.sampled_from([None, "policy", "stale", "replay"]),
    F: st.sampled_from([None, "policy"]),
}


@st.composite
def status_facts(draw: st.DrawFn) -> StatusFact:
    state = draw(st.sampled_from(list(StatusState)))
    reason = draw(_REASONS.get(state, st.none()))
    iat = draw(st.integers(IAT, IAT + 40))
    received = iat + draw(st.integers(0, 30))
    refs = draw(st.integers(0, 2)) if state is F else 0
    # A small tag space makes iat ties and same-state twins (duplicate slots) common.
    return status(state, iat, received, reason=reason, refs=refs, tag=draw(st.sampled_from("ab")))


downstream_facts = st.builds(
    downstream,
    st.sampled_from(["d1", "d2", "d3"]),
    st.one_of(st.none(), st.integers(IAT, IAT + 200)),
    st.sampled_from([DELEGATE, "spiffe://c.example/other"]),
)
host_observations = st.builds(
    HostObservation,
    st.sampled_from(["working", "TASK_STATE_COMPLETED", "canceled", "input-required", "failed"]),
    st.integers(IAT, IAT + 60),
)
fact_sets = st.tuples(
    st.lists(status_facts(), max_size=7),
    st.lists(downstream_facts, max_size=3),
    st.lists(host_observations, max_size=3),
    st.integers(IAT, IAT + 4_000),
    st.builds(Timing, st.integers(0, 90), st.integers(0, 3_700), st.integers(0, 90)),
)


@settings(max_examples=300, deadline=None)
@given(fact_sets, st.randoms(use_true_random=False))
def test_any_order_of_the_same_facts_gives_the_same_view(facts: Any, rnd: Any) -> None:
    statuses, below, host, now, timing = facts
    view = derive_hop(OFFER, statuses, now=now, timing=timing, downstream=below, host=host)
    shuffled = [list(xs) for xs in (statuses, below, host)]
    for xs in shuffled:
        rnd.shuffle(xs)
        xs.extend(rnd.sample(xs, k=min(len(xs), 2)))  # repeating a fact changes nothing either
    again = derive_hop(
        OFFER, shuffled[0], now=now, timing=timing, downstream=shuffled[1], host=shuffled[2]
    )
    assert again == view
    for flag in view.flags:
        assert flag.kind not in (FlagKind.EQUIVOCATION, FlagKind.REJECTED_ELEMENT)
        assert flag.severity is SEVERITY[flag.kind]
        assert OFFER.digest in flag.evidence and list(flag.evidence) == sorted(set(flag.evidence))
    assert view.a2a_state == A2A_STATE[view.state]


@settings(max_examples=300, deadline=None)
@given(fact_sets, st.sampled_from(["stale", "replay"]), st.integers(IAT, IAT + 4_000))
def test_a_stale_or_replay_rejection_changes_nothing(facts: Any, reason: str, iat: int) -> None:
    statuses, below, host, now, timing = facts
    view = derive_hop(OFFER, statuses, now=now, timing=timing, downstream=below, host=host)
    more = [*statuses, status(R, iat, reason=reason)]
    assert derive_hop(OFFER, more, now=now, timing=timing, downstream=below, host=host) == view


@settings(max_examples=300, deadline=None)
@given(fact_sets)
def test_deadline_is_the_next_change(facts: Any) -> None:
    statuses, below, host, now, timing = facts

    def at(t: int) -> tuple[HopState, tuple[Flag, ...]]:
        view = derive_hop(OFFER, statuses, now=t, timing=timing, downstream=below, host=host)
        return view.state, view.flags

    deadline = derive_hop(
        OFFER, statuses, now=now, timing=timing, downstream=below, host=host
    ).deadline
    if deadline is None:
        assert at(now + 10**6) == at(now)
    else:
        assert deadline > now
        assert at(deadline - 1) == at(now)
        assert at(deadline) != at(now)
