"""SQLite writers queue on a lock file beside the database (``app.store.db._sqlite_writer``)
instead of polling SQLite's busy handler; read-only transactions do not take it."""

from __future__ import annotations

import fcntl
from pathlib import Path

from app.store.db import make_engine, read_only, transaction


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
