"""SQLite's WAL checkpoints, taken off the write lock.

In WAL mode a commit appends the pages it changed to the ``-wal`` file, and SQLite copies
them back into the database file (a checkpoint) from inside the commit that brings the
WAL past ``wal_autocheckpoint`` pages (1,000 by default): inside the write lock
(``db._sqlite_writer``), where every other writer of the file waits for it. With two
``serve`` workers the write lock is what HTTP ingest queues on (it was held ~100 % of a
run), and checkpoints were a quarter of the time it was held (BENCHMARKS.md, "HTTP ingest").

Here a thread of each process that writes the file checkpoints it instead, on a connection
of its own, at most every ``INTERVAL`` seconds while commits come: ``PASSIVE``, so it waits
for no reader or writer and a writer never waits for it. The copying then runs beside the
writers (on another core where there is one). The thread ends after ``IDLE`` seconds without
a commit and is started again by the next one. SQLite's own checkpoint stays as the bound
on the WAL, at ``AUTOCHECKPOINT_PAGES``: should the thread fall behind (a reader holding an
old snapshot stops any checkpoint short, this one or SQLite's), a commit checkpoints as
before. A checkpoint that fails (a full disk, a file removed) is left to the next one:
what it would copy is already durable in the WAL.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path

# Seconds between two checkpoints of one file by one process while commits come.
INTERVAL = 0.1
# Seconds without a commit after which the thread ends.
IDLE = 2.0
# SQLite's own automatic checkpoint, from inside a commit: the bound on the WAL (4 KiB
# pages: 32 MiB) should the thread fall behind.
AUTOCHECKPOINT_PAGES = 8_192


class Checkpointer:
    """The checkpoints of one SQLite file by this process (``committed`` after each write
    transaction)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._guard = threading.Lock()
        self._taken = threading.Condition(self._guard)
        self._stop = threading.Event()
        self._pending = False
        self._thread: threading.Thread | None = None
        self.taken = 0  # checkpoints tried by the thread

    def committed(self) -> None:
        """A write transaction ended: a checkpoint within ``INTERVAL``."""
        with self._guard:
            self._pending = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sqlite-checkpoint", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        idle = 0.0
        while not self._stop.wait(INTERVAL):
            with self._guard:
                pending, self._pending = self._pending, False
                if not pending:
                    idle += INTERVAL
                    if idle >= IDLE:
                        self._thread = None
                        return
                    continue
            idle = 0.0
            checkpoint(self.path)
            with self._taken:
                self.taken += 1
                self._taken.notify_all()
        with self._guard:
            self._thread = None

    def wait_taken(self, count: int, timeout: float) -> bool:
        """Whether the thread has tried ``count`` checkpoints within ``timeout`` seconds."""
        with self._taken:
            return self._taken.wait_for(lambda: self.taken >= count, timeout)

    def stop(self) -> None:
        """End the thread (tests; a process that ends need not: it is a daemon)."""
        self._stop.set()
        with self._guard:
            thread = self._thread
        if thread is not None:
            thread.join()
        self._stop.clear()


def checkpoint(path: str) -> tuple[int, int, int] | None:
    """One ``PASSIVE`` checkpoint of the SQLite file at ``path``: SQLite's answer (busy,
    frames in the WAL, frames checkpointed), or None when it could not be taken. Opens
    the file without creating it."""
    try:
        connection = sqlite3.connect(
            f"{Path(path).absolute().as_uri()}?mode=rw",
            uri=True,
            timeout=0,
            isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error:
        return None
    try:
        row = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    except sqlite3.Error:
        return None
    finally:
        with contextlib.suppress(sqlite3.Error):
            connection.close()
    return None if row is None else (int(row[0]), int(row[1]), int(row[2]))


_CHECKPOINTERS: dict[str, Checkpointer] = {}
_GUARD = threading.Lock()


def checkpointer(path: str) -> Checkpointer:
    """This process's checkpointer of the file at ``path``."""
    with _GUARD:
        found = _CHECKPOINTERS.get(path)
        if found is None:
            found = _CHECKPOINTERS[path] = Checkpointer(path)
        return found


def _forked() -> None:
    # A forked child has none of the parent's threads; its own writes start their own.
    global _GUARD
    _GUARD = threading.Lock()
    _CHECKPOINTERS.clear()


os.register_at_fork(after_in_child=_forked)
