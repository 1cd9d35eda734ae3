"""``Verifier.judge_object``: the reported verdict and, in the same pass, the verdict without
the replay memory (profile §6.4). Each is compared with what a second verifier gives, one
that shares the first's memories (``verify_object``) or one whose replay memory and seen
statuses start empty (the receiver that has seen nothing before), so the pass that judges
once must agree with the two passes it replaces."""

from __future__ import annotations

from typing import Any

import pytest
from handoff_context import (
    Context,
    Form,
    HandoffObject,
    InMemoryState,
    Judged,
    Outcome,
    StatusObject,
    Verdict,
    Verifier,
    handoff_object,
    make_status,
    parse_object,
    status_object,
)
from parties import T0, World
from test_verify import DIALOG, chain3, checks, ctx, offer, offer_checks, status_checks


def obj(value: dict[str, Any]) -> HandoffObject | StatusObject:
    return parse_object(value)


class Twins:
    """A judging verifier, a verifier with the same memory history (``verify_object``), and
    a factory of verifiers that have seen nothing (sharing only the known offers)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.judging = Verifier(trust=world.trust)
        self.plain = Verifier(trust=world.trust)

    def judge(self, value: dict[str, Any], context: Context) -> Judged:
        o = obj(value)
        judged = self.judging.judge_object(o, context, source="test")
        plain = self.plain.verify_object(o, context, source="test")
        assert judged.verdict.to_json() == plain.to_json()
        empty = InMemoryState()
        fresh = Verifier(
            trust=self.world.trust,
            replay=empty,
            offers=self.judging.offers,
            statuses=empty,
        ).verify_object(o, context, source="test")
        assert judged.without_replay.to_json() == fresh.to_json()
        return judged


@pytest.fixture
def twins(world: World) -> Twins:
    return Twins(world)


def same(judged: Judged) -> Verdict:
    assert not judged.depends_on_replay
    assert judged.verdict is judged.without_replay
    return judged.verdict


def test_a_first_seen_offer_has_one_verdict(world: World, twins: Twins) -> None:
    v = same(twins.judge(handoff_object(offer(world)), ctx(world)))
    assert v.outcome is Outcome.ACCEPT


def test_a_retransmission_is_judged_on_past_the_replay_check(world: World, twins: Twins) -> None:
    o = offer(world)
    same(twins.judge(handoff_object(o), ctx(world)))
    # Seen again in another dialog: reported a duplicate (the checks after replay not run),
    # while without the memory the dialog check runs and refuses it.
    judged = twins.judge(handoff_object(o), ctx(world, dialog="ctx-other"))
    assert judged.depends_on_replay
    assert judged.verdict.outcome is Outcome.DUPLICATE
    assert checks(judged.verdict) == offer_checks("pass", "pass", "pass", "pass")
    apart = judged.without_replay
    assert apart.outcome is Outcome.REJECT and apart.reason is not None
    assert apart.reason.value == "policy"
    assert checks(apart) == offer_checks("pass", "pass", "pass", "pass", "fail:policy")


def test_an_equivocation_is_judged_on_past_the_replay_check(world: World, twins: Twins) -> None:
    hop = "aG9wLWp1ZGdlZC1lcXVpdm9j"
    first = offer(world, hop=hop, task="t-1")
    second = offer(world, hop=hop, task="t-2")
    same(twins.judge(handoff_object(first), ctx(world)))
    judged = twins.judge(handoff_object(second), ctx(world))
    assert judged.verdict.reason is not None and judged.verdict.reason.value == "equivocation"
    assert judged.verdict.equivocation is not None
    apart = judged.without_replay
    assert apart.outcome is Outcome.ACCEPT and apart.equivocation is None
    assert checks(apart) == offer_checks(*["pass"] * 5, "pass", "not-checked")


@pytest.mark.parametrize("form", [Form.JWS, Form.COSE])
def test_a_retransmitted_bundle_has_its_chain_checked_apart(
    world: World, twins: Twins, form: Form
) -> None:
    *chain, current = chain3(world, form)
    bundle = handoff_object(current, chain)
    same(twins.judge(bundle, ctx(world, receiver="tester")))
    judged = twins.judge(bundle, ctx(world, receiver="tester"))
    assert judged.verdict.outcome is Outcome.DUPLICATE
    # The reported duplicate names no chain element; the verdict apart reports the chain.
    assert judged.verdict.chain is not None and judged.verdict.chain.elements == []
    apart = judged.without_replay
    assert apart.outcome is Outcome.ACCEPT
    assert apart.chain is not None and [e.result.value for e in apart.chain.elements] == [
        "pass",
        "pass",
    ]


def test_a_retransmitted_status_is_judged_apart(world: World, twins: Twins) -> None:
    o = offer(world)
    same(twins.judge(handoff_object(o), ctx(world)))
    s = make_status(world.coder, offer_octets=o, state="accepted", iat=T0 + 5)
    first = same(twins.judge(status_object(s), ctx(world)))
    assert first.outcome is Outcome.ACCEPT
    judged = twins.judge(status_object(s), ctx(world))
    assert judged.verdict.outcome is Outcome.DUPLICATE
    assert checks(judged.verdict) == status_checks("pass")
    apart = judged.without_replay
    assert apart.outcome is Outcome.ACCEPT and apart.dialog == DIALOG
    assert checks(apart) == status_checks("pass", "pass", "pass")


def test_a_pending_status_is_not_remembered_by_judging(world: World, twins: Twins) -> None:
    o = offer(world)
    s = make_status(world.coder, offer_octets=o, state="accepted", iat=T0 + 5)
    pending = same(twins.judge(status_object(s), ctx(world)))
    assert pending.outcome is Outcome.PENDING
    same(twins.judge(handoff_object(o), ctx(world)))
    # Judged again once its offer is known: not a duplicate of the pending judgement.
    assert same(twins.judge(status_object(s), ctx(world))).outcome is Outcome.ACCEPT


def test_what_fails_before_the_replay_check_has_one_verdict(world: World, twins: Twins) -> None:
    o = offer(world)
    v = same(twins.judge(handoff_object(o), ctx(world, receiver="tester")))
    assert v.reason is not None and v.reason.value == "wrong-audience"
    # Never remembered (profile §6.4), so neither is its next arrival a duplicate.
    assert same(twins.judge(handoff_object(o), ctx(world))).outcome is Outcome.ACCEPT
