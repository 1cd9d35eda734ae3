"""SQLite writers queue on a lock file beside the database (``app.store.db._sqlite_writer``)
instead of polling SQLite's busy handler; read-only transactions do not take it."""

from __future__ import annotations

import fcntl
import time
from pathlib import Path

from app.store import db
from app.store.db import make_engine, observe_write_lock, read_only, transaction


def _free(lock_file: Path) -> bool:
    with lock_file.open("rb") as other:  # another open file description: flock conflicts
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(other, fcntl.LOCK_UN)
        return True


def test_a_write_transaction_holds_the_writer_lock_and_a_read_does_not(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    lock_file = tmp_path / "store.db.writer"
    try:
        with transaction(engine):
            assert not _free(lock_file)
        assert _free(lock_file)
        with transaction(read_only(engine)):
            assert _free(lock_file)
    finally:
        engine.dispose()


def test_the_observer_is_told_how_long_each_writer_waited_and_held_the_lock(
    tmp_path: Path,
) -> None:
    """What ``handoff_trace_sqlite_write_lock_*`` count (app.web.metrics): one call per
    write transaction, after it let go of the lock; none for a read-only one."""
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    told: list[tuple[float, float]] = []
    before = db._write_lock_observer  # a served app's metrics, if one was made earlier
    observe_write_lock(lambda waited, held: told.append((waited, held)))
    try:
        outer = time.perf_counter()
        with transaction(engine):
            inner = time.perf_counter()
            assert told == []  # not before the lock is let go
            assert sum(range(100_000))  # a body that takes longer than an uncontended wait
            inner = time.perf_counter() - inner
        outer = time.perf_counter() - outer
        with transaction(read_only(engine)):
            pass
        assert len(told) == 1
        waited, held = told[0]
        assert waited >= 0 and inner <= held and waited + held <= outer
    finally:
        observe_write_lock(before)
        engine.dispose()
