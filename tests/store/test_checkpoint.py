"""SQLite's WAL is copied back into the database file by a thread beside the writers
(``app.store.checkpoint``), not from inside a commit that holds the write lock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from app.store import checkpoint
from app.store.db import make_engine, transaction

_WAIT = 60.0  # seconds: a bound on a wait for the thread, never a measurement


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[str, object]]:
    path = str(tmp_path / "store.db")
    engine = make_engine(f"sqlite:///{path}")
    with transaction(engine) as session:
        session.execute(text("CREATE TABLE t (x BLOB)"))
    try:
        yield path, engine
    finally:
        checkpoint.checkpointer(path).stop()
        engine.dispose()


def _write(engine: object, rows: int) -> None:
    with transaction(engine) as session:  # type: ignore[arg-type]
        for _ in range(rows):
            session.execute(text("INSERT INTO t VALUES (randomblob(4000))"))


_ROWS = 1_200  # of 4,000 octets: more pages than SQLite's default mark (1,000)


def test_a_commit_leaves_the_copying_to_the_thread(store: tuple[str, object]) -> None:
    path, engine = store
    with engine.connect() as connection:  # type: ignore[attr-defined]
        pages = connection.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one()
    assert pages == checkpoint.AUTOCHECKPOINT_PAGES
    worker = checkpoint.checkpointer(path)
    _write(engine, _ROWS)
    # Two checkpoints of the thread after the write: the first to end may have begun
    # before the write committed (the fixture's commit started the thread), the second
    # began after the first ended, so after the commit.
    for _ in range(2):
        before = worker.taken
        worker.committed()
        assert worker.wait_taken(before + 1, _WAIT)
    # The pages are in the database file now (in WAL mode it grows only by checkpoints).
    assert Path(path).stat().st_size > _ROWS * 4_000


def test_no_commit_copies_below_the_bound(
    store: tuple[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other side of the test above: with the thread's checkpoints undone, nothing is
    # copied back (no commit checkpointed at SQLite's default mark, under the write lock).
    path, engine = store
    monkeypatch.setattr(checkpoint, "checkpoint", lambda path: None)
    worker = checkpoint.checkpointer(path)
    before = worker.taken
    _write(engine, _ROWS)
    assert worker.wait_taken(before + 1, _WAIT)
    assert Path(path).stat().st_size < 100_000
    assert Path(path + "-wal").stat().st_size > _ROWS * 4_000


def test_the_thread_ends_when_commits_stop(
    store: tuple[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, engine = store
    monkeypatch.setattr(checkpoint, "INTERVAL", 0.01)
    monkeypatch.setattr(checkpoint, "IDLE", 0.05)
    worker = checkpoint.checkpointer(path)
    worker.stop()
    _write(engine, 1)
    thread = worker._thread
    assert thread is not None
    thread.join(_WAIT)
    assert not thread.is_alive() and worker._thread is None
    _write(engine, 1)  # a commit after it ended starts it again
    assert worker._thread is not None and worker._thread is not thread


def test_a_checkpoint_never_creates_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "gone.db"
    assert checkpoint.checkpoint(str(missing)) is None
    assert not missing.exists()
