"""Live ingest: time as observed, host task states without an element, observation ids, and
batches cut by time (app.ingest.live, app.store.host; docs/profile.md §10.5)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from handoff_context import new_key, public_jwk, trust_document
from sqlalchemy import Engine, select

from app.cli import main
from app.ingest.live import timed_batches
from app.store.db import make_engine, transaction
from app.store.models import HostStateRow, ObservationRow
from tests.conftest import World
from tests.store.builders import (
    T0,
    a2a_task,
    bundle,
    hop_of,
    hops,
    kinds,
    observations,
    offer,
    rec,
    run,
    status,
)


def keyed(record: dict[str, Any], key: str) -> dict[str, Any]:
    return {**record, "id": key}


def bare_task(state: str, *, task: str = "task-1") -> dict[str, Any]:
    """An A2A 1.0 status update without any handoff element."""
    return {"statusUpdate": {"taskId": task, "contextId": "ctx", "status": {"state": state}}}


def test_working_and_completed_in_one_second_are_judged_in_arrival_order(
    engine: Engine, world: World
) -> None:
    # A fast task: WORKING and COMPLETED 3 ms apart, in the same second. By name, WORKING
    # would come last ("W" > "C") and raise a false host-divergence.
    o = offer(world.planner, world.coder, task="task-1")
    accepted = status(world.coder, o, "accepted", iat=T0 + 1)
    done = status(world.coder, o, "completed", iat=T0 + 1)
    records = [
        rec(bundle(o), T0 + 1),
        rec(a2a_task(accepted, "TASK_STATE_WORKING"), T0 + 1.501),  # type: ignore[arg-type]
        rec(a2a_task(done, "TASK_STATE_COMPLETED"), T0 + 1.504),  # type: ignore[arg-type]
    ]
    run(engine, world.trust, records)
    assert hops(engine)[hop_of(o)]["state"] == "completed"
    assert kinds(engine) == []
    with transaction(engine) as session:
        exact = session.execute(select(ObservationRow.received_exact)).scalars().all()
        floors = session.execute(select(ObservationRow.received_at)).scalars().all()
    assert sorted(x for x in exact if x is not None) == [T0 + 1, T0 + 1.501, T0 + 1.504]
    assert sorted(floors) == [T0 + 1, T0 + 1, T0 + 1]  # the checks used whole seconds


def test_a_task_state_without_an_element_counts_for_a_known_task(
    engine: Engine, world: World
) -> None:
    # The delegator cancels (signed); the delegate cancels its task without echoing a
    # signed element. The task is last seen CANCELED, so the host agrees with the hop.
    o = offer(world.planner, world.coder, task="task-1")
    accepted = status(world.coder, o, "accepted", iat=T0 + 1)
    cancel = status(world.planner, o, "canceled", iat=T0 + 2)
    records = [
        rec(bundle(o), T0 + 1),
        rec(a2a_task(accepted, "TASK_STATE_WORKING"), T0 + 1),
        rec({"status": cancel.decode()}, T0 + 2),
        rec(bare_task("TASK_STATE_CANCELED"), T0 + 2),
        rec(bare_task("TASK_STATE_WORKING", task="unrelated"), T0 + 3),
    ]
    run(engine, world.trust, records)
    assert hops(engine)[hop_of(o)]["state"] == "canceled"
    assert kinds(engine) == []
    # The same bare event for a task that disagrees with the hop is flagged.
    run(engine, world.trust, [rec(bare_task("TASK_STATE_COMPLETED"), T0 + 4)])
    assert kinds(engine) == [("host-divergence", None)]


def test_a_retried_batch_is_stored_once_and_never_counted_as_a_retransmission(
    engine: Engine, world: World
) -> None:
    o = offer(world.planner, world.coder, task="task-1")
    accepted = status(world.coder, o, "accepted", iat=T0 + 1)
    batch = [
        keyed(rec(bundle(o), T0 + 1), "r-1"),
        keyed(rec(a2a_task(accepted, "TASK_STATE_WORKING"), T0 + 1), "r-2"),
        keyed(rec(bare_task("TASK_STATE_COMPLETED"), T0 + 2), "r-3"),
    ]
    first = run(engine, world.trust, batch)
    assert (first.counts["accept"], first.counts["redelivered"]) == (2, 0)
    again = run(engine, world.trust, batch)  # the shipper did not see the answer: a retry
    assert (again.counts["duplicate"], again.counts["redelivered"]) == (0, 3)
    assert observations(engine, o) == 1
    with transaction(engine) as session:
        assert len(session.execute(select(HostStateRow.id)).all()) == 2
    # An agent that really retransmits sends a new record: a duplicate, as before.
    resent = run(engine, world.trust, [keyed(rec(bundle(o), T0 + 5), "r-4")])
    assert resent.counts["duplicate"] == 1
    assert observations(engine, o) == 2


def test_an_id_repeated_within_one_batch_is_stored_once(engine: Engine, world: World) -> None:
    # A second record with the same id in the same batch, signed element or bare host
    # state, is a redelivery too, not only one in a later batch or request.
    o = offer(world.planner, world.coder, task="task-1")
    record = keyed(rec(bundle(o), T0 + 1), "r-1")
    bare = keyed(rec(bare_task("TASK_STATE_WORKING"), T0 + 2), "r-2")
    report = run(engine, world.trust, [record, bare, record, bare])
    assert (report.counts["accept"], report.counts["redelivered"]) == (1, 2)
    assert observations(engine, o) == 1
    with transaction(engine) as session:
        assert len(session.execute(select(HostStateRow.id)).all()) == 1


def test_a_trickling_input_is_cut_into_batches_by_time() -> None:
    released = threading.Event()

    def trickle() -> Iterator[int]:
        yield 1
        yield 2
        released.wait()  # the input goes quiet until the first batch was handed on
        yield 3

    batches = timed_batches(trickle(), size=64, seconds=0.01)
    assert next(batches) == [1, 2]  # handed on while the reader still waits for input
    released.set()
    assert list(batches) == [[3]]


def test_size_still_cuts_batches() -> None:
    assert list(timed_batches(iter(range(5)), size=2, seconds=60)) == [[0, 1], [2, 3], [4]]


def test_host_states_without_an_element_survive_export_and_import(
    engine: Engine, world: World, tmp_path: Path
) -> None:
    o = offer(world.planner, world.coder, task="task-1")
    accepted = status(world.coder, o, "accepted", iat=T0 + 1)
    run(
        engine,
        world.trust,
        [rec(bundle(o), T0 + 1), rec(a2a_task(accepted, "TASK_STATE_WORKING"), T0 + 1)],
    )
    run(engine, world.trust, [rec(bare_task("TASK_STATE_COMPLETED"), T0 + 3)])
    assert kinds(engine) == [("host-divergence", None)]  # the host says completed, hop accepted
    source = str(engine.url.render_as_string(hide_password=False))
    export, trust = tmp_path / "store.jsonl", tmp_path / "trust.json"
    trust.write_text(json.dumps(trust_document([world.planner, world.coder])))
    key = new_key("Ed25519", kid="export-1")
    (tmp_path / "k.jwk").write_text(json.dumps(key.as_dict(private=True)))
    (tmp_path / "k.pub.jwk").write_text(json.dumps(public_jwk(key)))
    signing = ["--sign-key", str(tmp_path / "k.jwk")]
    assert main(["export", "--db", source, "--out", str(export), *signing]) == 0
    target = f"sqlite:///{tmp_path / 'moved.db'}"
    trusting = ["--trust", str(trust), "--trust-key", str(tmp_path / "k.pub.jwk")]
    assert main(["import", "--db", target, *trusting, str(export)]) == 0
    moved = make_engine(target)
    try:
        with transaction(moved) as session:
            states = session.execute(
                select(HostStateRow.task_state, HostStateRow.element).order_by(HostStateRow.id)
            ).all()
        assert sorted(map(tuple, states)) == [
            ("TASK_STATE_COMPLETED", False),
            ("TASK_STATE_WORKING", True),
        ]
        # Judged again at the import's clock, years later: the accepted hop is also a lost
        # outcome by now; the host state without an element still says completed.
        assert ("host-divergence", None) in kinds(moved)
    finally:
        moved.dispose()
