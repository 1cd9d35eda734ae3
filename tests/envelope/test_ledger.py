"""The ownership ledger as a pure function: each rule on small stories, and the property
that makes it safe to store: the same set of items, in any order and with any repeats,
gives the same ledger and flags."""

from __future__ import annotations

import functools
from typing import Any

from handoff_context import AvailableObject, ObjectIndex
from hypothesis import given, settings
from hypothesis import strategies as st

from app.capture.formats import CaptureItem
from app.envelope.extract import find_items
from app.envelope.ledger import (
    CaseRules,
    Item,
    Ledger,
    band_at,
    derive_ledger,
    fenced,
    first_receivers,
)
from app.ingest.cases import item_of
from app.ingest.envelope import item_rows
from tests.conftest import T0

from .builders import (
    BILLING,
    CASE,
    REFUNDS,
    TRANSCRIPT,
    TRIAGE,
    answer,
    envelope,
    event,
    message_v1,
    record,
    reference,
    response,
    send_v1,
    signed_url,
    task_v1,
    worked_example,
)

OBJECTS = ObjectIndex.of([AvailableObject("transcript.txt", TRANSCRIPT)])
RULES = CaseRules(accept_window=3600, transcript_bytes=200)
LATER = T0 + 10_000


def items(records: list[Any]) -> list[Item]:
    """Records as stored items, through the same extraction and checks as ingest."""
    found: list[Item] = []
    for n, value in enumerate(records):
        capture = CaptureItem(f"capture.jsonl:{n + 1}", value)
        rows = item_rows(capture, find_items(value, source=capture.source), objects=OBJECTS, now=T0)
        found += [item_of(r) for r in rows]
    return found


def ledger(records: list[Any], *, now: int = LATER, case_id: str = CASE) -> Ledger:
    stored = items(records)
    return derive_ledger(case_id, stored, now=now, rules=RULES, contexts=first_receivers(stored))


def kinds(result: Ledger) -> set[str]:
    return {f.flag.kind.value for f in result.flags}


def handoff(at: int, *, epoch: int = 3, by: str = BILLING, **kw: Any) -> dict[str, Any]:
    return record(send_v1(message_v1(envelope(epoch=epoch, **kw))), at, by)


def accepted(at: int, *, epoch: int = 4, handoff_id: str | None = f"{CASE}:4") -> dict[str, Any]:
    return record(response(task_v1(answer(True, epoch=epoch, handoff_id=handoff_id))), at, TRIAGE)


def test_the_worked_example_moves_the_case_to_billing_at_epoch_4() -> None:
    result = ledger(worked_example())
    assert [(e.epoch, e.owner, e.start, e.end, e.handoff_id) for e in result.epochs] == [
        (3, TRIAGE, T0 + 10, T0 + 20, None),
        (4, BILLING, T0 + 20, None, f"{CASE}:4"),
    ]
    assert (result.owner, result.epoch, result.handoffs) == (BILLING, 4, 1)
    assert result.responses == {f"{CASE}:4": ("accepted", None)}
    # The stale retry at epoch 3 was refused by the case system: the fence worked.
    assert result.flags == ()
    assert [e.kind for e in result.events] == [
        "write",
        "handoff",
        "accepted",
        "handed-off",
        "write",
    ]


def test_the_rejected_variant_keeps_triage_the_owner_at_epoch_3() -> None:
    result = ledger(worked_example(rejected=True))
    assert [(e.epoch, e.owner, e.end) for e in result.epochs] == [(3, TRIAGE, None)]
    assert result.responses[f"{CASE}:4"] == ("rejected", "payment id P-2 not found in billing")
    assert result.flags == ()


def test_an_applied_stale_write_after_the_acceptance_is_two_owners() -> None:
    records = [
        *worked_example()[:-1],
        event(TRIAGE, "write", T0 + 3630, epoch=3, outcome="applied"),
    ]
    [flag] = ledger(records).flags
    assert (flag.flag.kind.value, flag.flag.variant, flag.agent, flag.handoff_id) == (
        "two-owners",
        "stale-write",
        TRIAGE,
        f"{CASE}:4",
    )
    assert flag.flag.severity.value == "critical" and flag.flag.opened_at == T0 + 3630
    assert len(flag.flag.evidence) == 2  # the acceptance and the write


def test_an_unfenced_act_without_an_outcome_is_two_owners_too() -> None:
    records = [*worked_example()[:-1], event(TRIAGE, "act", T0 + 100, epoch=3)]
    assert kinds(ledger(records)) == {"two-owners"}


def test_the_implied_band_of_the_first_handoff_fences_nothing() -> None:
    """Before any acceptance there is no epoch to fence by: an older-epoch write then is no
    flag, and ``fenced`` (which the timeline draws by) says so too."""
    records = [handoff(T0), event(TRIAGE, "write", T0 + 10, epoch=2, outcome="applied")]
    result = ledger(records, now=T0 + 20)
    assert "two-owners" not in kinds(result)
    [band] = result.epochs
    [write] = [e for e in result.events if e.kind == "write"]
    assert band.handoff_id is None and write.epoch is not None and write.epoch < band.epoch
    assert band_at(result.epochs, write.at) == band and not fenced(write.epoch, band)


def test_two_acceptances_of_one_epoch_by_different_receivers_are_two_owners() -> None:
    records = [
        handoff(T0 + 10, by=BILLING),
        handoff(T0 + 11, by=REFUNDS, handoff_id=f"{CASE}:4b"),
        accepted(T0 + 20),
        accepted(T0 + 21, handoff_id=f"{CASE}:4b"),
    ]
    result = ledger(records)
    [flag] = [f for f in result.flags if f.flag.variant == "acceptance"]
    assert (flag.flag.kind.value, flag.agent) == ("two-owners", REFUNDS)
    assert result.owner == BILLING  # the first acceptance of the epoch holds


def test_a_repeated_acceptance_by_the_same_receiver_is_no_second_owner() -> None:
    assert ledger([handoff(T0 + 10), accepted(T0 + 20), accepted(T0 + 25)]).flags == ()


def test_release_before_accept() -> None:
    early = [handoff(T0 + 10), event(TRIAGE, "handed-off", T0 + 15, epoch=3), accepted(T0 + 20)]
    [flag] = ledger(early).flags
    assert (flag.flag.kind.value, flag.agent, flag.handoff_id) == (
        "release-before-accept",
        TRIAGE,
        f"{CASE}:4",
    )
    # Released when sending, and the acceptance never came: also nobody owns it.
    lost = [handoff(T0 + 10), event(TRIAGE, "handed-off", T0 + 10, epoch=3)]
    assert kinds(ledger(lost)) == {"release-before-accept", "no-owner"}


def test_lost_acceptance_while_the_sender_still_acts_and_no_owner_when_it_stopped() -> None:
    acting = [handoff(T0 + 10), event(TRIAGE, "act", T0 + 500, epoch=3)]
    before = ledger(acting, now=T0 + 10 + 3599)
    assert (kinds(before), before.deadline) == (set(), T0 + 10 + 3600)
    after = ledger(acting, now=T0 + 10 + 3600)
    assert (kinds(after), after.deadline) == ({"lost-acceptance"}, None)
    assert after.flags[0].flag.opened_at == T0 + 3610
    assert kinds(ledger([handoff(T0 + 10)])) == {"no-owner"}


def _owned_twice(*after: dict[str, Any]) -> Ledger:
    """Triage hands the case to billing (epoch 3 to 4) and marks it handed off; billing
    hands it back (4 to 5); triage offers it to refunds at T0 + 200, acts at T0 + 500, and
    refunds never answers. ``after``: more records."""
    back = record(
        response(task_v1(answer(True, epoch=5, handoff_id=f"{CASE}:5"), task_id="task-10")),
        T0 + 110,
        BILLING,
    )
    records = [
        *worked_example()[1:4],
        handoff(T0 + 100, epoch=4, by=TRIAGE, from_agent=BILLING),
        back,
        handoff(T0 + 200, epoch=5, by=REFUNDS),
        event(TRIAGE, "act", T0 + 500, epoch=5, outcome="applied"),
        *after,
    ]
    return ledger(records, now=T0 + 200 + 3600 + 60)


def test_a_mark_from_an_earlier_ownership_does_not_make_a_lost_handoff_no_owner() -> None:
    result = _owned_twice()
    owners = [(e.owner, e.epoch) for e in result.epochs]
    assert owners == [(TRIAGE, 3), (BILLING, 4), (TRIAGE, 5)]
    [lost] = result.flags
    assert (lost.flag.kind.value, lost.agent, lost.handoff_id) == (
        "lost-acceptance",
        TRIAGE,
        f"{CASE}:6",
    )
    # A mark after the window ran out says nothing of the handoff either.
    late = _owned_twice(event(TRIAGE, "handed-off", T0 + 200 + 3600 + 1, epoch=5))
    assert kinds(late) == {"lost-acceptance", "release-before-accept"}


def test_a_mark_after_the_second_handoff_makes_it_no_owner_and_names_that_handoff() -> None:
    result = _owned_twice(event(TRIAGE, "handed-off", T0 + 300, epoch=5))
    named = {(f.flag.kind.value, f.agent, f.handoff_id) for f in result.flags}
    assert named == {
        ("no-owner", TRIAGE, f"{CASE}:6"),
        ("release-before-accept", TRIAGE, f"{CASE}:6"),
    }


def test_an_answer_within_the_window_clears_the_deadline() -> None:
    result = ledger([handoff(T0 + 10), accepted(T0 + 3000)], now=T0 + 20)
    assert result.deadline is None


def test_a_handoff_on_a_stale_epoch() -> None:
    records = [*worked_example()[:3], handoff(T0 + 100, epoch=3, handoff_id=f"{CASE}:4-again")]
    [flag] = ledger(records, now=T0 + 200).flags
    assert (flag.flag.kind.value, flag.agent) == ("stale-epoch", TRIAGE)
    assert "epoch 3; the ledger's epoch is 4" in flag.flag.detail


def test_a_context_id_first_presented_to_another_receiver() -> None:
    first = record(
        send_v1(message_v1(envelope(case_id="C-1"), context_id="triage-ctx")), T0, BILLING
    )
    again = record(
        send_v1(message_v1(envelope(case_id=CASE), context_id="triage-ctx")), T0 + 50, REFUNDS
    )
    everything = items([first, again])
    contexts = first_receivers(everything)
    mine = [i for i in everything if i.case_id == CASE]
    result = derive_ledger(CASE, mine, now=T0 + 60, rules=RULES, contexts=contexts)
    [flag] = result.flags
    assert (flag.flag.kind.value, flag.agent) == ("context-id-reuse", TRIAGE)
    assert BILLING in flag.flag.detail and REFUNDS in flag.flag.detail


def test_what_one_message_shows_on_its_own() -> None:
    facts = [
        {"key": "account_id", "value": "A-77", "source": "auth", "verified": True},
        {"key": "amount", "value": "49.90", "verified": False},
    ]
    urls = [
        reference(sha256=None),
        reference(url=signed_url(expires=T0 - 5)),
        reference(sha256="00" * 32),
    ]
    msg = message_v1(envelope(facts=facts), text="x" * 201, urls=urls)
    result = ledger([record(send_v1(msg), T0, BILLING), accepted(T0 + 5)])
    assert kinds(result) == {
        "unsourced-fact",
        "transcript-dump",
        "missing-hash",
        "expired-reference",
        "reference-mismatch",
    }
    unsourced = next(f for f in result.flags if f.flag.kind.value == "unsourced-fact")
    assert unsourced.flag.detail == "facts without a source: amount"


def test_invalid_messages_and_drift_are_flagged_and_never_applied() -> None:
    v3 = "application/vnd.acme.handoff.v3+json"
    records = [
        record(send_v1(message_v1(envelope(goal=None))), T0, BILLING),
        record(send_v1(message_v1(media_type=v3)), T0 + 1, BILLING),
    ]
    result = ledger(records)
    assert {(f.flag.kind.value, f.flag.variant) for f in result.flags} == {
        ("invalid-envelope", "schema"),
        ("version-drift", v3),
    }
    assert (result.epochs, result.handoffs, result.owner) == ((), 0, None)


# --- order independence ------------------------------------------------------------------


@functools.cache
def pool() -> tuple[Item, ...]:
    """Items of every kind and fault: the worked example, a second acceptance of epoch 4,
    a stale handoff, an early release, drift, a schema failure and two unanswered handoffs
    (one released, one not)."""
    v3 = "application/vnd.acme.handoff.v3+json"
    return tuple(
        items(
            [
                *worked_example(),
                handoff(T0 + 11, by=REFUNDS, handoff_id=f"{CASE}:4b"),
                accepted(T0 + 21, handoff_id=f"{CASE}:4b"),
                handoff(T0 + 100, epoch=3, handoff_id=f"{CASE}:stale"),
                event(TRIAGE, "handed-off", T0 + 12, epoch=3),
                event(TRIAGE, "write", T0 + 4000, epoch=3, outcome="applied"),
                record(send_v1(message_v1(media_type=v3)), T0 + 2, BILLING),
                record(send_v1(message_v1(envelope(goal=None))), T0 + 3, BILLING),
                handoff(T0 + 50, epoch=4, handoff_id=f"{CASE}:5"),
                event(TRIAGE, "handed-off", T0 + 60, epoch=4),
            ]
        )
    )


@settings(max_examples=200, deadline=None, derandomize=True)
@given(order=st.permutations(range(len(pool()))), repeats=st.lists(st.integers(0, len(pool()) - 1)))
def test_any_order_and_any_repeats_give_the_same_ledger(
    order: list[int], repeats: list[int]
) -> None:
    everything = pool()
    expected = derive_ledger(CASE, everything, now=LATER, rules=RULES)
    shuffled = [everything[i] for i in order] + [everything[i] for i in repeats]
    assert derive_ledger(CASE, shuffled, now=LATER, rules=RULES) == expected
    assert kinds(expected) >= {
        "two-owners",
        "stale-epoch",
        "release-before-accept",
        "version-drift",
        "invalid-envelope",
        "no-owner",
        "lost-acceptance",
    }


def test_an_answer_links_by_task_id_or_by_the_epoch_before_its_own() -> None:
    sent = message_v1()
    sent["taskId"] = "task-7"
    by_task = answer(False, epoch=None, handoff_id=None, reason="no")
    result = ledger(
        [
            record(send_v1(sent), T0 + 10, BILLING),
            record(
                response(task_v1(by_task, state="TASK_STATE_REJECTED", task_id="task-7")),
                T0 + 20,
                TRIAGE,
            ),
        ]
    )
    assert result.responses == {f"{CASE}:4": ("rejected", "no")}
    by_epoch = record(response(task_v1(answer(True, handoff_id=None))), T0 + 20, TRIAGE)
    result = ledger([handoff(T0 + 10), by_epoch])
    assert (result.owner, result.epochs[-1].handoff_id) == (BILLING, f"{CASE}:4")


def test_the_store_reads_every_field_of_a_ledger_item() -> None:
    # app.store.envelopes names the columns without importing the ledger: kept equal here.
    from dataclasses import fields

    from app.envelope.ledger import Item
    from app.store.envelopes import ITEM_COLUMNS

    assert [f.name for f in fields(Item)] == list(ITEM_COLUMNS)
