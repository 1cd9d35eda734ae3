"""``FileState``: the replay memory an agent keeps in a file (profile §6.4): it survives a
restart, is shared by the worker processes of one agent (exactly one of two concurrent
``remember`` calls wins), is pruned past ``exp + skew``, and serves every memory Protocol the
``Verifier`` needs, plus the last answer to each offer."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import stat
from pathlib import Path

import pytest
from handoff_context import (
    Context,
    FileState,
    Form,
    InMemoryState,
    Outcome,
    Reason,
    StatusState,
    Verifier,
    handoff_digest,
    handoff_object,
    make_offer,
    make_status,
    parse_element,
    status_object,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from parties import T0, World

DIALOG = "ctx-filestate"


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _offer(world: World, *, iat: int = T0, lifetime: int = 120) -> bytes:
    return make_offer(world.planner, aud=world.coder.iss, dialog=DIALOG, iat=iat, lifetime=lifetime)


def _verify(verifier: Verifier, value: object, now: int) -> Outcome:
    ctx = Context(now=now, receiver="spiffe://b.example/agent/coder", dialog=DIALOG)
    return verifier.verify_value(value, ctx, source="t").outcome


def test_a_replayed_offer_is_known_after_a_restart(world: World, tmp_path: Path) -> None:
    path, clock = tmp_path / "coder.sqlite3", Clock(T0 + 10)
    offer = _offer(world)
    with FileState(path, clock=clock) as state:
        assert _verify(Verifier(world.trust, replay=state), handoff_object(offer), T0 + 10) is (
            Outcome.ACCEPT
        )
    # A new process (a restart): the same octets are a retransmission, a re-signed offer
    # for the same hop an equivocation.
    with FileState(path, clock=clock) as state:
        verifier = Verifier(world.trust, replay=state)
        assert _verify(verifier, handoff_object(offer), T0 + 20) is Outcome.DUPLICATE
        hop = parse_element(offer, Form.JWS).payload.hop
        twin = make_offer(world.planner, aud=world.coder.iss, dialog=DIALOG, iat=T0 + 1, hop=hop)
        verdict = verifier.verify_value(
            handoff_object(twin),
            Context(now=T0 + 20, receiver=world.coder.iss, dialog=DIALOG),
            source="t",
        )
        assert verdict.reason is Reason.EQUIVOCATION, verdict.to_json()
        assert verdict.equivocation is not None
        assert verdict.equivocation.first == handoff_digest(offer)


def test_the_file_is_private_and_in_wal_mode(world: World, tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    with FileState(path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        db.close()


def test_rows_are_pruned_past_their_time(world: World, tmp_path: Path) -> None:
    clock = Clock(T0)
    with FileState(tmp_path / "s.sqlite3", skew=60, keep=100, clock=clock) as state:
        verifier = Verifier(world.trust, replay=state)
        offer = _offer(world, lifetime=120)
        assert _verify(verifier, handoff_object(offer), T0) is Outcome.ACCEPT
        status = make_status(
            world.coder,
            offer_octets=offer,
            state=StatusState.ACCEPTED,
            iat=T0 + 1,
            answers=state,
        )
        assert state.last_answer(handoff_digest(offer)) == status
        assert state.counts() == {"replay": 1, "offer": 1, "status": 0, "answer": 1}
        clock.now = T0 + 120 + 60  # exp + skew: still remembered (profile §6.4)
        assert state.prune() == 0
        clock.now = T0 + 120 + 60 + 1
        # The replay row and the answer (a retransmission now would be stale); the offer
        # stays `keep` longer, so a late status answering it can still be judged.
        assert state.prune() == 2
        assert state.last_answer(handoff_digest(offer)) is None
        assert state.get_offer(handoff_digest(offer)) is not None
        clock.now = T0 + 120 + 60 + 100 + 1
        assert state.prune() == 1
        assert state.counts() == {"replay": 0, "offer": 0, "status": 0, "answer": 0}


def test_a_row_past_its_time_does_not_decide_before_it_is_pruned(
    world: World, tmp_path: Path
) -> None:
    """Whether pruning has run yet never changes what ``remember`` answers: past
    ``exp + skew`` a new offer for the same (iss, hop) is recorded as the first."""
    clock = Clock(T0)
    with FileState(tmp_path / "s.sqlite3", skew=0, clock=clock) as state:
        first = parse_element(_offer(world, lifetime=10), Form.JWS)
        assert state.remember(first)[1]
        assert not state.remember(first)[1]
        clock.now = T0 + 11
        later = make_offer(
            world.planner,
            aud=world.coder.iss,
            dialog=DIALOG,
            iat=T0 + 11,
            lifetime=10,
            hop=first.payload.hop,
        )
        element = parse_element(later, Form.JWS)
        remembered, recorded = state.remember(element)
        assert recorded and remembered.digest == element.digest
        assert state.counts()["replay"] == 1


def test_statuses_and_offers_serve_the_verifier(world: World, tmp_path: Path) -> None:
    """The delegator's side: its own offer is known (``remember_offer``), the status
    answering it is judged, and the same status again is a duplicate, also after a
    restart."""
    path, clock = tmp_path / "planner.sqlite3", Clock(T0 + 5)
    offer = _offer(world)
    status = make_status(world.coder, offer_octets=offer, state="completed", iat=T0 + 5)
    with FileState(path, clock=clock) as state:
        verifier = Verifier(world.trust, replay=state)
        verifier.remember_offer(offer)
        verdict = verifier.verify_value(status_object(status), Context(now=T0 + 5), source="t")
        assert verdict.outcome is Outcome.ACCEPT
        assert verdict.state is StatusState.COMPLETED
    with FileState(path, clock=clock) as state:
        verifier = Verifier(world.trust, replay=state)
        verdict = verifier.verify_value(status_object(status), Context(now=T0 + 6), source="t")
        assert verdict.outcome is Outcome.DUPLICATE


def test_in_memory_state_remembers_answers_too(world: World) -> None:
    state = InMemoryState()
    assert state.last_answer(b"\0" * 32) is None
    state.record_answer(b"\0" * 32, b"first")
    state.record_answer(b"\0" * 32, b"second")
    assert state.last_answer(b"\0" * 32) == b"second"


def _remember_in_child(path: str, octets: bytes, start: object, out: object) -> None:
    from handoff_context import FileState, Form, parse_element

    element = parse_element(octets, Form.JWS)
    start.wait()  # type: ignore[attr-defined]
    # Both processes create the file and its tables at once, then remember at once.
    with FileState(path, clock=lambda: T0) as state:
        remembered, recorded = state.remember(element)
    out.put((recorded, remembered.digest))  # type: ignore[attr-defined]


def _remember_and_die(path: str, octets: bytes) -> None:
    from handoff_context import FileState, Form, parse_element

    state = FileState(path, clock=lambda: T0)
    state.remember(parse_element(octets, Form.JWS))
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no atexit, no flush


def test_what_was_remembered_survives_sigkill(world: World, tmp_path: Path) -> None:
    """An agent killed right after it checked an offer (SIGKILL: nothing runs on the way
    out) still knows the offer when it starts again."""
    path = str(tmp_path / "killed.sqlite3")
    offer = _offer(world)
    child = multiprocessing.get_context("spawn").Process(
        target=_remember_and_die, args=(path, offer)
    )
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL
    with FileState(path, clock=lambda: T0) as state:
        remembered, recorded = state.remember(parse_element(offer, Form.JWS))
    assert not recorded and remembered.digest == handoff_digest(offer)


def test_two_processes_remember_one_hop_and_exactly_one_wins(world: World, tmp_path: Path) -> None:
    """Two worker processes of one agent receive two different offers for the same
    (iss, hop) at the same moment: one records, the other sees the winner (and would
    judge its own offer an equivocation)."""
    path = str(tmp_path / "shared.sqlite3")
    first = _offer(world)
    hop = parse_element(first, Form.JWS).payload.hop
    second = make_offer(world.planner, aud=world.coder.iss, dialog=DIALOG, iat=T0 + 1, hop=hop)
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Barrier(2), ctx.Queue()
    children = [
        ctx.Process(target=_remember_in_child, args=(path, octets, start, out))
        for octets in (first, second)
    ]
    for child in children:
        child.start()
    try:
        results = [out.get(timeout=120) for _ in children]
    finally:
        for child in children:
            child.join(timeout=120)
        out.close()
        out.join_thread()
    assert all(c.exitcode == 0 for c in children)
    assert sorted(r[0] for r in results) == [False, True]
    winner = {r[1] for r in results}
    assert len(winner) == 1  # both name the same first element
    assert winner <= {handoff_digest(first), handoff_digest(second)}


def test_a_file_that_is_not_a_state_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite3"
    path.write_bytes(b"this is not a database, it is a text file of some length" * 20)
    with pytest.raises(ValueError, match="not a usable state file"):
        FileState(path)


def test_a_closed_state_says_so(tmp_path: Path) -> None:
    state = FileState(tmp_path / "s.sqlite3")
    state.close()
    state.close()
    with pytest.raises(ValueError, match="closed"):
        state.last_answer(b"\0" * 32)


def test_for_agent_names_one_file_per_identifier(tmp_path: Path) -> None:
    with (
        FileState.for_agent("spiffe://b.example/agent/coder", tmp_path) as a,
        FileState.for_agent("spiffe://b.example/agent/coder?x", tmp_path) as b,
    ):
        assert a.path != b.path
        assert a.path.parent == tmp_path / ".handoff-state"
        assert stat.S_IMODE(os.stat(a.path.parent).st_mode) == 0o700


# --- the same verdicts as the in-memory state (a property) ----------------------------------


def _pool(world: World) -> list[bytes]:
    """Offers a receiver may meet: three hops, each signed in two versions (equivocation),
    statuses answering them, and one for another audience."""
    pool = []
    for n in range(3):
        hop = f"hop-{n}-" + "x" * 20
        for v in range(2):
            pool.append(
                make_offer(world.planner, aud=world.coder.iss, dialog=DIALOG, iat=T0 + v, hop=hop)
            )
    pool.append(make_offer(world.planner, aud=world.tester.iss, dialog=DIALOG, iat=T0))
    pool += [
        make_status(world.coder, offer_octets=o, state="accepted", iat=T0 + 2) for o in pool[:2]
    ]
    return pool


_POOL: list[bytes] = []


@settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(order=st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=14))
def test_file_state_judges_like_the_in_memory_state(
    world: World, tmp_path_factory: pytest.TempPathFactory, order: list[int]
) -> None:
    """Any sequence of offers, retransmissions, equivocations and statuses gets the same
    verdicts from a FileState as from an InMemoryState (while nothing is past its time),
    also when the file is closed and opened again half-way (a restart)."""
    if not _POOL:
        _POOL.extend(_pool(world))
    ctx = Context(now=T0 + 5, receiver=world.coder.iss, dialog=DIALOG)

    def value(octets: bytes) -> dict[str, object]:
        is_status = parse_element(octets, Form.JWS).payload.type.value == "status"
        return status_object(octets) if is_status else handoff_object(octets)

    memory = Verifier(world.trust, replay=InMemoryState())
    path = tmp_path_factory.mktemp("prop") / "s.sqlite3"
    half = len(order) // 2
    state = FileState(path, clock=lambda: T0 + 5)
    try:
        for i, index in enumerate(order):
            if i == half:  # a restart: the memory must come back from the file
                state.close()
                state = FileState(path, clock=lambda: T0 + 5)
            filed = Verifier(world.trust, replay=state)
            want = memory.verify_value(value(_POOL[index]), ctx, source="x").to_json()
            got = filed.verify_value(value(_POOL[index]), ctx, source="x").to_json()
            assert got == want
    finally:
        state.close()


def test_the_offers_worked_under_survive_a_restart_until_they_expire(
    world: World, tmp_path: Path
) -> None:
    """``keep_working`` (a sidecar's egress ties an agent's call to its task with it): by
    name, once per offer and name, ended once ended, kept until exp + skew."""
    path, clock = tmp_path / "coder.sqlite3", Clock(T0 + 10)
    first, second = _offer(world), _offer(world, iat=T0 + 5)
    elements = [parse_element(o, Form.JWS) for o in (first, second)]
    with FileState(path, clock=clock) as state:
        for element in elements:
            state.keep_working("dialog:d", element, b"handoff-" + element.digest[:4])
            state.keep_working("dialog:d", element, b"not kept: the first stays")
        state.keep_working("task:t", elements[1], b"h2")
        state.end_working(elements[0].digest)
    with FileState(path, clock=clock) as state:  # a restart
        assert state.working("dialog:d") == [
            (elements[0].digest, b"handoff-" + elements[0].digest[:4], True),
            (elements[1].digest, b"handoff-" + elements[1].digest[:4], False),
        ]
        assert state.working("task:t") == [(elements[1].digest, b"h2", False)]
        assert state.working("task:other") == []
        clock.now = T0 + 120 + 60 + 1  # the first past exp + skew, the second not yet
        assert [row[0] for row in state.working("dialog:d")] == [elements[1].digest]
        clock.now = T0 + 5 + 120 + 60 + 1
        assert state.prune() == 3
        assert state.working("dialog:d") == state.working("task:t") == []
