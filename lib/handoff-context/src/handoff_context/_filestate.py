"""An agent's memories in one SQLite file: replay memory that survives a restart (profile §6.4).

``FileState`` implements every memory Protocol of ``_memory.py`` (``ReplayMemory``,
``OfferIndex``, ``SeenStatuses``, ``AnswerMemory``) over the standard library's ``sqlite3`` in
WAL mode, so the worker processes of one agent can share one file: each process opens its
own connection and SQLite serialises the writers. Every write is one statement in autocommit
mode, so two processes remembering the same (iss, hop) at once cannot both record it: the
primary key lets exactly one insert win and the other reads the winner.

Choices made where the profile is silent (docs/profile.md §6.4):
- Replay rows are kept until the offer's ``exp + skew`` and then pruned: past that moment the
  freshness check rejects the offer before the replay check runs, so the row can no longer
  decide anything. A row past its time that has not been pruned yet is treated as absent,
  so the pruning cadence never changes a verdict.
- Answers (the last status signed for an offer) are kept until the offer's ``exp + skew``
  too: a retransmission arriving later is refused as stale before the replay check.
- Known offers and seen statuses are kept ``keep`` seconds longer (default one hour): a
  status answering long work arrives after the offer's ``exp``, and it can only be judged
  while the offer is known. Work that runs longer than ``keep`` gets its statuses judged
  ``pending``; raise ``keep`` for it.
- The offers an agent works under, by name (its task, its dialog), for the delegations it
  makes in them (``keep_working``; ``handoff-trace tap --egress-listen`` ties an outgoing
  call to its task through them): kept until the offer's ``exp + skew``, past which no
  delegation can continue it (profile §7). An additive table: schema version 1 still.
- ``synchronous=NORMAL``: a commit survives the process (a crash, a restart, SIGKILL), not a
  power loss of the machine before the next checkpoint.

Memory stays flat: rows leave once past their time, freed pages are reused, the WAL is
truncated after checkpoints and the page cache is bounded (bench/replay_memory.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from handoff_context._memory import Remembered, content_fingerprint
from handoff_context._model import Element, Form, Offer

__all__ = ["FileState"]

# Bumped when the tables change; a file written by another version is refused, not guessed at.
SCHEMA_VERSION = 1

_SCHEMA = """
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS replay (
    iss TEXT NOT NULL, hop TEXT NOT NULL, digest BLOB NOT NULL, content BLOB NOT NULL,
    until INTEGER NOT NULL, PRIMARY KEY (iss, hop)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS replay_until ON replay (until);
CREATE TABLE IF NOT EXISTS offer (
    digest BLOB PRIMARY KEY, form TEXT NOT NULL, octets BLOB NOT NULL, until INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS offer_until ON offer (until);
CREATE TABLE IF NOT EXISTS status (
    digest BLOB PRIMARY KEY, until INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS status_until ON status (until);
CREATE TABLE IF NOT EXISTS answer (
    offer BLOB PRIMARY KEY, status BLOB NOT NULL, until INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS answer_until ON answer (until);
CREATE TABLE IF NOT EXISTS working (
    name TEXT NOT NULL, offer BLOB NOT NULL, handoff BLOB NOT NULL, ended INTEGER NOT NULL,
    until INTEGER NOT NULL, PRIMARY KEY (name, offer)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS working_until ON working (until);
COMMIT;
"""

_TABLES = ("replay", "offer", "status", "answer")

# Pruning runs at most this often, and after this many writes, whichever comes first.
_PRUNE_SECONDS = 10
_PRUNE_WRITES = 1024


def _switch_to_wal(db: sqlite3.Connection, *, tries: int = 300) -> str:
    """``PRAGMA journal_mode = WAL``, retried while another process holds the new file:
    SQLite does not call its busy handler for this switch, so two worker processes opening
    one new state file at once would otherwise see "database is locked" (at most ~30 s)."""
    for attempt in range(tries):
        try:
            return str(db.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == tries - 1:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


class FileState:
    """Replay memory, known offers, seen statuses and last answers in the SQLite file at
    ``path`` (created 0600 if missing), shared by every process of one agent that opens it.

    ``skew`` is the receiver's clock skew (profile §6.3); replay rows live until
    ``exp + skew``. ``keep`` is how much longer known offers, seen statuses and answers are
    kept. ``clock`` gives the current time in seconds (``time.time``).

    Raises OSError when the file cannot be created or opened, and ValueError when it is
    not a state file of this version (or SQLite cannot run it in WAL mode, e.g. on a
    network file system). The memory methods raise ValueError once closed, and
    ``sqlite3.Error`` when the file cannot be written (a full disk, or another process
    holding the write lock for more than 30 s): fail closed, the offer was not remembered.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        skew: int = 60,
        keep: int = 3600,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if skew < 0 or keep < 0:
            raise ValueError("skew and keep must not be negative")
        self.path = Path(path)
        self.skew = skew
        self.keep = keep
        self._clock = clock
        self._lock = threading.Lock()
        self._writes = 0
        self._next_prune = 0
        self._db: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._db = self._open()

    @classmethod
    def for_agent(
        cls, iss: str, directory: str | os.PathLike[str] = ".", *, skew: int = 60, keep: int = 3600
    ) -> FileState:
        """The state file of agent ``iss`` in ``directory``/.handoff-state/, named after the
        identifier (readable part plus a hash, so two identifiers never share a file)."""
        readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", iss).strip("-.")[-60:] or "agent"
        tag = hashlib.sha256(iss.encode("utf-8")).hexdigest()[:12]
        folder = Path(directory) / ".handoff-state"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        return cls(folder / f"{readable}-{tag}.sqlite3", skew=skew, keep=keep)

    # -- connection ----------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if not self.path.exists():
            # The file names who talked to this agent; nobody else needs to read it.
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            os.close(fd)
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA busy_timeout = 30000")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise ValueError(
                    f"{self.path} is a state file of schema version {version}, not {SCHEMA_VERSION}"
                )
            mode = _switch_to_wal(db)
            if str(mode).lower() != "wal":
                raise ValueError(f"{self.path}: SQLite cannot use WAL mode here ({mode})")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA cache_size = -2048")  # at most 2 MiB of pages per connection
            db.execute("PRAGMA journal_size_limit = 4194304")  # WAL truncated to 4 MiB
            db.executescript(_SCHEMA)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            db.close()
            raise ValueError(f"{self.path} is not a usable state file: {exc}") from exc
        except BaseException:
            db.close()
            raise
        return db

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise ValueError(f"the state file {self.path} is closed")
        if os.getpid() != self._pid:
            # A connection must not cross fork(): the child opens its own.
            self._pid = os.getpid()
            self._db = self._open()
        return self._db

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> FileState:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _now(self) -> int:
        return int(self._clock())

    def _wrote(self, db: sqlite3.Connection, now: int) -> None:
        self._writes += 1
        if self._writes >= _PRUNE_WRITES or now >= self._next_prune:
            self._prune(db, now)

    def _prune(self, db: sqlite3.Connection, now: int) -> int:
        removed = 0
        for table in (*_TABLES, "working"):
            removed += db.execute(f"DELETE FROM {table} WHERE until < ?", (now,)).rowcount
        self._writes = 0
        self._next_prune = now + _PRUNE_SECONDS
        return removed

    def prune(self) -> int:
        """Remove every row past its time now; returns how many. Runs on its own every few
        seconds of writes, so calling it is never needed for correctness."""
        with self._lock:
            return self._prune(self._conn(), self._now())

    def counts(self) -> dict[str, int]:
        """Rows held per memory (replay, offer, status, answer), pruned or not."""
        with self._lock:
            db = self._conn()
            return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in _TABLES}

    # -- ReplayMemory ----------------------------------------------------------------------

    def remember(self, element: Element) -> tuple[Remembered, bool]:
        payload = element.payload
        now = self._now()
        until = payload.exp + self.skew if isinstance(payload, Offer) else now + self.keep
        content = content_fingerprint(element)
        with self._lock:
            db = self._conn()
            # One statement: inserted, or replacing a row past its time, or nothing (the
            # first element for this (iss, hop) stays). SQLite runs it atomically across
            # processes, so exactly one of two concurrent callers records.
            recorded = db.execute(
                "INSERT INTO replay (iss, hop, digest, content, until) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (iss, hop) DO UPDATE SET digest = excluded.digest, "
                "content = excluded.content, until = excluded.until WHERE replay.until < ?",
                (payload.iss, payload.hop, element.digest, content, until, now),
            ).rowcount
            if recorded == 1:
                self._wrote(db, now)
                return Remembered(element.digest, content), True
            row = db.execute(
                "SELECT digest, content FROM replay WHERE iss = ? AND hop = ?",
                (payload.iss, payload.hop),
            ).fetchone()
        return Remembered(bytes(row[0]), bytes(row[1])), False

    # -- OfferIndex ------------------------------------------------------------------------

    def get_offer(self, digest: bytes) -> Element | None:
        from handoff_context._verify import parse_element  # _verify imports _memory

        with self._lock:
            row = (
                self._conn()
                .execute("SELECT form, octets FROM offer WHERE digest = ?", (digest,))
                .fetchone()
            )
        if row is None:
            return None
        return parse_element(bytes(row[1]), Form(row[0]))

    def add_offer(self, element: Element) -> None:
        payload = element.payload
        now = self._now()
        end = payload.exp if isinstance(payload, Offer) else now
        with self._lock:
            db = self._conn()
            db.execute(
                "INSERT INTO offer (digest, form, octets, until) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (digest) DO NOTHING",
                (element.digest, element.form.value, element.octets, end + self.skew + self.keep),
            )
            self._wrote(db, now)

    # -- SeenStatuses ----------------------------------------------------------------------

    def has_status(self, digest: bytes) -> bool:
        with self._lock:
            row = (
                self._conn().execute("SELECT 1 FROM status WHERE digest = ?", (digest,)).fetchone()
            )
        return row is not None

    def add_status(self, digest: bytes) -> None:
        now = self._now()
        with self._lock:
            db = self._conn()
            db.execute(
                "INSERT INTO status (digest, until) VALUES (?, ?) ON CONFLICT (digest) DO NOTHING",
                (digest, now + self.skew + self.keep),
            )
            self._wrote(db, now)

    # -- AnswerMemory ----------------------------------------------------------------------

    def record_answer(self, offer_digest: bytes, status: bytes) -> None:
        now = self._now()
        with self._lock:
            db = self._conn()
            # Kept until the offer's exp + skew: a retransmission arriving later is refused
            # as stale before the replay check, so the answer could not be used. An offer
            # not in this file keeps its answer ``skew`` from now.
            db.execute(
                "INSERT INTO answer (offer, status, until) VALUES (?, ?, max(?, coalesce("
                "(SELECT until - ? FROM offer WHERE digest = ?), 0))) ON CONFLICT (offer) DO "
                "UPDATE SET status = excluded.status, until = max(answer.until, excluded.until)",
                (offer_digest, bytes(status), now + self.skew, self.keep, offer_digest),
            )
            self._wrote(db, now)

    def last_answer(self, offer_digest: bytes) -> bytes | None:
        with self._lock:
            row = (
                self._conn()
                .execute("SELECT status FROM answer WHERE offer = ?", (offer_digest,))
                .fetchone()
            )
        return None if row is None else bytes(row[0])

    # -- the offers worked under (a sidecar's egress) ---------------------------------------

    def keep_working(self, name: str, offer: Element, handoff: bytes) -> None:
        """Remember that ``offer`` (its handoff object's octets, ``handoff``) is worked on
        under ``name`` (a task or a dialog, as the caller names them)."""
        payload = offer.payload
        now = self._now()
        until = payload.exp + self.skew if isinstance(payload, Offer) else now
        with self._lock:
            db = self._conn()
            db.execute(
                "INSERT INTO working (name, offer, handoff, ended, until) VALUES (?, ?, ?, 0, ?)"
                " ON CONFLICT (name, offer) DO NOTHING",
                (name, offer.digest, bytes(handoff), until),
            )
            self._wrote(db, now)

    def end_working(self, offer_digest: bytes) -> None:
        """The work under the offer ``offer_digest`` ended (under every name)."""
        now = self._now()
        with self._lock:
            db = self._conn()
            db.execute("UPDATE working SET ended = 1 WHERE offer = ?", (offer_digest,))
            self._wrote(db, now)

    def working(self, name: str) -> list[tuple[bytes, bytes, bool]]:
        """The offers worked on under ``name``, oldest first: (digest, handoff octets,
        ended), rows past their time left out."""
        with self._lock:
            rows = (
                self._conn()
                .execute(
                    "SELECT offer, handoff, ended FROM working WHERE name = ? AND until >= ? "
                    "ORDER BY until",
                    (name, self._now()),
                )
                .fetchall()
            )
        return [(bytes(r[0]), bytes(r[1]), bool(r[2])) for r in rows]
