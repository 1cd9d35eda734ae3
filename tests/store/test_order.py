"""Order independence (issue 3, section 2): ingesting any permutation of the same elements,
in any number of batches, yields the same hop states and flags.

One scenario holds every kind of fact the derivation reads: a chain carried and one only
stored, statuses before and after their offers, a cancel that is not propagated, content
and signature-only equivocation seen by different receivers, a status conflict, a host
task state, a forged element, a stale one, a broken link found through stored elements, a
retransmission and a status whose offer never comes.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Sequence
from typing import Any

import pytest
from handoff_context import Signer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as strategies

from app.ingest.pipeline import ingest
from app.store.db import make_engine
from tests.conftest import World, make_world
from tests.databases import Databases
from tests.store.builders import (
    T0,
    a2a_task,
    bundle,
    digest,
    hops,
    jsonl,
    offer,
    pipeline,
    rec,
    resign,
    snapshot,
    st,
    status,
    twin,
)

NOW = T0 + 200  # past the cancel's grace period, before any lost outcome
LATER = T0 + 9000  # past every deadline


@functools.cache
def scenario() -> tuple[World, tuple[dict[str, Any], ...]]:
    w = make_world()
    p = offer(w.assistant, w.planner, iat=T0, lifetime=300)
    q = offer(w.planner, w.coder, iat=T0 + 5, prev=digest(p), task="task-q")
    r = offer(w.coder, w.tester, iat=T0 + 10, prev=digest(q))
    broken = offer(w.tester, w.coder, iat=T0 + 12, prev=digest(p))  # p.aud is not tester
    x1 = offer(w.planner, w.coder, iat=T0 + 3, prev=digest(p))  # twins below p, no chain
    x2 = twin(w.planner, x1, aud=w.tester.iss)
    y1 = offer(w.coder, w.tester, iat=T0 + 4)
    y2 = resign(w.coder, y1)
    forger = Signer(iss=w.planner.iss, key=w.mallory.key, alg="Ed25519")
    forged = offer(forger, w.coder, iat=T0 + 2)
    stale = offer(w.planner, w.coder, iat=T0, lifetime=60)
    never = offer(w.planner, w.tester, iat=T0)  # never ingested: its status stays pending
    q_done = status(w.coder, q, "completed", iat=T0 + 40)
    records = [
        rec(bundle(p), T0 + 1, w.planner.iss),
        rec(bundle(q, p), T0 + 6, w.coder.iss),
        rec(bundle(q, p), T0 + 8, w.coder.iss),  # a retransmission
        rec(bundle(r), T0 + 11, w.tester.iss),  # no chain: checked against stored q, p
        rec(bundle(broken), T0 + 13, w.coder.iss),
        rec(st(status(w.coder, q, "accepted", iat=T0 + 7)), T0 + 7),
        rec(a2a_task(q_done, "TASK_STATE_FAILED", task="task-q"), T0 + 41),
        rec(st(status(w.tester, r, "accepted", iat=T0 + 14)), T0 + 15),
        rec(st(status(w.tester, r, "rejected", iat=T0 + 16, reason="policy")), T0 + 17),
        rec(st(status(w.assistant, p, "canceled", iat=T0 + 20)), T0 + 21),
        rec(bundle(x1), T0 + 3, w.coder.iss),
        rec(bundle(x2), T0 + 4, w.tester.iss),
        rec(bundle(y1), T0 + 5, w.tester.iss),
        rec(bundle(y2), T0 + 6),
        rec(bundle(forged), T0 + 2, w.coder.iss),
        rec(bundle(stale), T0 + 500, w.coder.iss),
        rec(st(status(w.tester, never, "accepted", iat=T0 + 3)), T0 + 4),
    ]
    return w, tuple(records)


def ingest_in(engine_url: str, order: Sequence[int], cuts: Sequence[int] = ()) -> Any:
    """Ingest the scenario's records in ``order``, split into batches at ``cuts``."""
    w, records = scenario()
    engine = make_engine(engine_url)
    try:
        ordered = [records[i] for i in order]
        bounds = [0, *sorted(set(cuts)), len(ordered)]
        for start, end in itertools.pairwise(bounds):
            batch = ordered[start:end]
            if batch:
                report = ingest(
                    pipeline(engine, w.trust), [("capture.jsonl", jsonl(batch))], now=NOW
                )
                assert report.errors == []
        now = snapshot(engine)
        hops(engine, now=LATER)
        return now, snapshot(engine)
    finally:
        engine.dispose()


_reference: dict[str, Any] = {}


def reference(databases: Databases, kind: str) -> Any:
    if kind not in _reference:
        _reference[kind] = ingest_in(databases.new(kind), range(len(scenario()[1])))
    return _reference[kind]


def test_the_scenario_covers_every_flag_kind(databases: Databases) -> None:
    (_hops, at_now), (_later_hops, later) = reference(databases, "sqlite")
    found = {(f["kind"], f["variant"]) for f in [*at_now, *later]}
    assert found >= {
        ("equivocation", "content"),
        ("equivocation", "signature-only"),
        ("rejected-element", "bad-signature"),
        ("rejected-element", "stale"),
        ("rejected-element", "broken-chain"),
        ("status-conflict", "accept-reject"),
        ("cancel-not-propagated", None),
        ("host-divergence", None),
        ("lost-outcome", None),
    }


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(
    order=strategies.permutations(range(len(scenario()[1]))),
    cuts=strategies.lists(strategies.integers(1, len(scenario()[1]) - 1), max_size=3),
)
def test_any_order_yields_the_same_hops_and_flags_sqlite(
    databases: Databases, order: list[int], cuts: list[int]
) -> None:
    assert ingest_in(databases.new("sqlite"), order, cuts) == reference(databases, "sqlite")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_any_order_yields_the_same_hops_and_flags_postgresql(
    databases: Databases, seed: int
) -> None:
    n = len(scenario()[1])
    order = list(range(n))[::-1] if seed == 1 else random.Random(seed).sample(range(n), n)
    cuts = [] if seed == 1 else [n // 3, 2 * n // 3]
    expected = reference(databases, "postgresql")
    assert ingest_in(databases.new("postgresql"), order, cuts) == expected
    # And both databases agree with each other.
    assert expected == reference(databases, "sqlite")
