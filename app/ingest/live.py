"""Live ingest: what a feed from running agents needs beside the one pipeline.

- ``HostStates`` collects the host task states a capture holds without a handoff element
  (``read_capture``'s ``on_host``) and, after each batch, stores them and re-derives the
  hops of the tasks they name (app.store.host).
- ``timed_batches`` cuts a stream of items into batches by size *and* by time, so that a
  trickling pipe (``handoff-trace ingest -`` fed by a live tap) is committed at least once a
  second instead of only every ``BATCH_ITEMS`` items. The items are read in a thread of
  their own, because reading a pipe blocks: the batch must be cut while the reader waits.
"""

from __future__ import annotations

import functools
import math
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO, TypeVar

from handoff_context import Timing
from sqlalchemy import Engine
from sqlmodel import Session

from app.capture.carriers import Carried, HostState
from app.ingest.batches import BATCH_ITEMS, BatchFailed, batched
from app.ingest.derive import derive_hops
from app.store import db
from app.store.db import Locks, NeedLocks
from app.store.host import add_host_states, hops_of_tasks, stored_keys

T = TypeVar("T")
# The longest an item read from a live input waits before it is committed.
FLUSH_SECONDS = 1.0
# Restarts of a flush that found a hop's lock taken, before it is reported as an error.
_RESTARTS = 50


class HostStates:
    """Host task states without an element, as read; ``flush`` stores them."""

    def __init__(self, *, receiver: str | None, at: int) -> None:
        self._pending: list[HostState] = []
        self._lock = threading.Lock()  # ``read`` may run in ``timed_batches``' reader thread
        self._receiver = receiver
        self._at = at
        self.redelivered = 0

    def read(self, state: HostState) -> None:
        with self._lock:
            self._pending.append(state)

    @property
    def pending(self) -> bool:
        """Whether states were read that ``flush`` has not stored yet."""
        return bool(self._pending)

    def flush(self, engine: Engine, *, now: int, timing: Timing) -> None:
        """Store what was read (each observation id once) and re-derive the hops of its
        tasks, in one transaction. Raises SQLAlchemyError, or BatchFailed when the hops'
        locks stayed taken."""
        with self._lock:
            states, self._pending = self._pending, []
        if not states:
            return
        keys: frozenset[str] = frozenset()
        for _ in range(_RESTARTS):
            try:
                # Counted once it committed: a transaction run again must not count twice.
                self.redelivered += db.run(
                    engine,
                    functools.partial(
                        self._store, states=states, now=now, timing=timing, keys=keys
                    ),
                )
                return
            except NeedLocks as exc:
                # PostgreSQL: another writer holds one of the hops; start again holding
                # every lock needed from the start (app.store.db.Locks).
                keys = exc.keys
        raise BatchFailed("busy: too many concurrent writers")

    def _store(
        self,
        session: Session,
        *,
        states: list[HostState],
        now: int,
        timing: Timing,
        keys: frozenset[str],
    ) -> int:
        """Store the states and derive their hops; how many were redelivered."""
        known = stored_keys(session, {s.key for s in states if s.key is not None})
        rows, fresh, seen = [], [], set(known)
        for state in states:
            if state.key is not None and state.key in seen:
                continue
            if state.key is not None:
                seen.add(state.key)
            fresh.append(state)
            at = math.floor(state.received_at) if state.received_at is not None else self._at
            by = state.received_by if state.received_by is not None else self._receiver
            rows.append(host_values(state, received_at=at, received_by=by, now=now))
        add_host_states(session, rows)
        hops = hops_of_tasks(session, {s.task_id for s in fresh})
        derive_hops(session, hops, now=now, timing=timing, locks=Locks(session, keys))
        return len(states) - len(fresh)


def host_values(
    state: Carried | HostState, *, received_at: int, received_by: str | None, now: int
) -> dict[str, Any]:
    """A row for one captured task state; ``received_at`` is what the checks used."""
    assert state.task_id is not None and state.task_state is not None
    key = state.key if isinstance(state, HostState) else None
    return {
        "task_id": state.task_id,
        "task_state": state.task_state,
        "dialog": state.dialog,
        "received_at": received_at,
        "received_exact": state.received_at,
        "seq": state.seq,
        "received_by": received_by,
        "source": state.source,
        "carrier": state.carrier._value_,
        "element": isinstance(state, Carried),
        "ingested_at": now,
        "observation_key": key,
    }


_END = object()


def timed_batches(
    items: Iterable[T], *, size: int, seconds: float = FLUSH_SECONDS
) -> Iterator[list[T]]:
    """Batches of at most ``size`` items, each handed on at most ``seconds`` after its
    first item was read. The reader thread stops with the input (or when the consumer
    stops taking batches and the input ends)."""
    handoff: queue.Queue[object] = queue.Queue(maxsize=size * 4)
    failure: list[BaseException] = []

    def read() -> None:
        try:
            for item in items:
                handoff.put(item)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            failure.append(exc)
        finally:
            handoff.put(_END)

    reader = threading.Thread(target=read, name="ingest-reader", daemon=True)
    reader.start()
    batch: list[T] = []
    deadline = math.inf
    while True:
        try:
            item = handoff.get(timeout=max(0.0, deadline - time.monotonic()) if batch else None)
        except queue.Empty:
            yield batch
            batch, deadline = [], math.inf
            continue
        if item is _END:
            break
        if not batch:
            deadline = time.monotonic() + seconds
        batch.append(item)  # type: ignore[arg-type]
        if len(batch) >= size:
            yield batch
            batch, deadline = [], math.inf
    reader.join()
    if batch:
        yield batch
    if failure:
        raise failure[0]


def batches(items: Iterable[T], *, live: bool = False) -> Iterator[list[T]]:
    """Batches of ``BATCH_ITEMS``; from a stream (``live``), also cut after
    ``FLUSH_SECONDS``, so that a trickling pipe is committed at least once a second."""
    if live:
        return timed_batches(items, size=BATCH_ITEMS)
    return batched(items)


def is_pipe(data: bytes | BinaryIO) -> bool:
    """A stream that cannot seek (stdin on a pipe): it may trickle, so it is batched by
    time too (``timed_batches``)."""
    if isinstance(data, bytes):
        return False
    try:
        return not data.seekable()
    except (OSError, ValueError):
        return True
