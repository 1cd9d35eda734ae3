"""Engines, sessions and the few dialect-specific statements the store needs.

Two databases are supported: the embedded SQLite file (the default, zero set-up) and
PostgreSQL (``postgresql+psycopg://``). Everything dialect-specific lives here:

- SQLite runs in WAL mode with foreign keys on and a busy timeout, and every transaction
  starts with ``BEGIN IMMEDIATE``: SQLite has one writer at a time, and taking the write
  lock up front means a transaction never reads state another writer is about to change.
  Writers on one file queue for it on a lock of their own first (``_sqlite_writer``),
  and the WAL is copied back into the file by a thread beside them (``checkpoint``).
- PostgreSQL serialises the transactions that touch the same hops and elements with
  transaction-scoped advisory locks (``Locks``), so a re-derivation always sees every
  change that could alter it. (SERIALIZABLE would do the same without locks, but on the
  small tables of a young store its predicate locks cover whole tables, and nearly every
  pair of concurrent items failed to serialize.)
- ``insert_ignore`` / ``upsert`` use each dialect's ``INSERT .. ON CONFLICT``, which is what
  makes dedupe, the replay memory and flag identity correct with many workers.
"""

from __future__ import annotations

import collections
import fcntl
import functools
import hashlib
import json
import operator
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import (
    Connection,
    Engine,
    Float,
    and_,
    any_,
    bindparam,
    cast,
    create_engine,
    event,
    func,
    not_,
    select,
    text,
    tuple_,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.elements import BinaryExpression, BindParameter, Tuple
from sqlmodel import Session

from alembic import command
from app import resources
from app.errors import HandoffTraceError
from app.store.checkpoint import AUTOCHECKPOINT_PAGES, checkpointer

T = TypeVar("T")
# The packaged copy of alembic/ (env.py and versions/), wherever the service is installed.
MIGRATIONS = resources.migrations()
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Serialises concurrent `db upgrade` runs on one PostgreSQL (any constant will do).
_UPGRADE_LOCK = 0x68616E646F6666  # "handoff"
# SQLSTATEs worth retrying: deadlock detected, serialization failure, lock not available.
_TRANSIENT_SQLSTATES = {"40P01", "40001", "55P03"}


# The store is handed a database URL by the edge (the CLI, the web app factory), which read
# it from the settings once; nothing here reads the settings or the environment.
SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg")


class UnsupportedDatabase(HandoffTraceError):
    """A database URL for a database the store does not support."""

    reason = "unsupported-database"


def check_url(url: str) -> str:
    """Accept only the databases the store supports. Raises UnsupportedDatabase."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in SCHEMES:
        raise UnsupportedDatabase(
            "DATABASE_URL must start with sqlite:/// or postgresql+psycopg://, "
            f"not {scheme + '://' if scheme else repr(url[:20])}"
        )
    return url


def normalise_url(url: str) -> str:
    """Check the URL and pick the psycopg 3 driver for a bare ``postgresql://``.

    Raises UnsupportedDatabase for an unsupported database.
    """
    check_url(url)
    if url.startswith("postgresql://"):
        return "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


def make_engine(url: str, *, pool_size: int | None = None) -> Engine:
    """An engine for ``url`` with the store's connection settings. SQLite: the file's
    directory is created on demand. Raises UnsupportedDatabase for an unsupported URL."""
    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        )
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
        register_sqlite_adapters()
        return engine
    if pool_size is None:
        return create_engine(url, pool_pre_ping=True)
    # HANDOFF_TRACE_DB_POOL_SIZE connections per process, and as many again in a burst:
    # PostgreSQL's max_connections bounds instances x workers x (pool + overflow).
    return create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=pool_size)


def shown_url(url: str) -> str:
    """The URL without its password, for messages. Raises UnsupportedDatabase."""
    return make_url(normalise_url(url)).render_as_string(hide_password=True)


def ping(engine: Engine) -> None:
    """Raises (SQLAlchemyError) when the database does not answer."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))


# An SQLite store is not ready with less free space than this where its file lives: a
# write probe alone can pass on a full disk, since SQLite rewrites its write-ahead log in
# place after a checkpoint and so needs no new space for a small write.
MIN_FREE_BYTES = 4 * 1024 * 1024
_PROBE_ROW = f"{os.uname().nodename[:100]}:{os.getpid()}"


class NotWritable(HandoffTraceError):
    """The database answers but cannot take writes now."""

    reason = "not-writable"


def probe(engine: Engine, *, now: int) -> None:
    """A real write, small and bounded, in a transaction of its own: this process's row of
    ``write_probe`` rewritten (a read-only database, a lost connection or a server shutting
    down fails it). On PostgreSQL a temporary table gets one row too: a new relation file
    in the database's default tablespace, so a full disk there fails the probe as it fails
    ingest (rewriting a row may fit in the page it had). On an SQLite file, the disk must
    also have ``MIN_FREE_BYTES`` free. Raises SQLAlchemyError or NotWritable."""
    from app.store.models import WriteProbeRow  # the store's tables import this module

    row = {"name": _PROBE_ROW, "at": now}
    with transaction(engine, wait=True) as session:
        upsert_many(session, WriteProbeRow, [row], ["name"])
        if engine.dialect.name == "postgresql":
            connection = session.connection()
            connection.exec_driver_sql("CREATE TEMPORARY TABLE probe (b bytea) ON COMMIT DROP")
            connection.exec_driver_sql(
                "INSERT INTO probe VALUES (decode(repeat('00', 4096), 'hex'))"
            )
    if (database := _sqlite_file(engine)) is not None:
        stat = os.statvfs(Path(database).parent)
        free = stat.f_bavail * stat.f_frsize
        if free < MIN_FREE_BYTES:
            raise NotWritable(f"{free} bytes free beside the database, under {MIN_FREE_BYTES}")


def _sqlite_file(engine: Engine) -> str | None:
    """The path of an SQLite file database; None for PostgreSQL or an in-memory one."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return None
    return None if database.startswith("file:") else database


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite's own is DEFERRED).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    # The bound on the WAL; this process's checkpoints run beside its writers (checkpoint.py).
    cursor.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES}")
    cursor.close()


def register_sqlite_adapters() -> None:
    """Adapters that hand bytes, None and booleans to SQLite as they are (a boolean as its
    integer, as the driver binds it anyway): the values stored do not change, only the
    cost of binding them.

    The driver binds only exact int, float and str without asking its adapter registry;
    any other value (a digest, a NULL, a boolean: ~40 of a stored element's parameters)
    misses the registry and then looks for ``PrepareProtocol.__adapt__``, which raises and
    swallows an AttributeError whose message is formatted each time, ~1,800 instructions
    a value. A registered adapter is found at the first lookup. The registry is the
    process's (``sqlite3`` has no other); these identity adapters change nothing for any
    other user of it (tests/store/test_sqlite_adapters.py pins what is stored)."""
    sqlite3.register_adapter(bytes, bytes)  # ``bytes(b)`` is ``b`` itself, in C
    sqlite3.register_adapter(type(None), {}.get)  # a C function that answers None for None
    sqlite3.register_adapter(bool, int)


def _sqlite_begin(connection: Connection) -> None:
    mode = connection.get_execution_options().get("sqlite_begin", "IMMEDIATE")
    connection.exec_driver_sql(f"BEGIN {mode}")


def read_only(engine: Engine) -> Engine:
    """The same engine for read-only sessions: on SQLite they take no write lock (WAL lets
    them read while a writer works); on PostgreSQL they read one consistent snapshot and
    never fail to serialize. Anything that writes (a sweep) must use the plain engine."""
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="REPEATABLE READ")
    return engine.execution_options(sqlite_begin="DEFERRED")


class WriterBusy(HandoffTraceError):
    """Another transaction holds the SQLite write lock (``transaction(..., wait=False)``)."""

    reason = "writer-busy"

    def __init__(self, detail: str = "another transaction holds the SQLite write lock") -> None:
        super().__init__(detail)


@contextmanager
def transaction(engine: Engine, *, wait: bool = True) -> Iterator[Session]:
    """One session in one transaction: committed on success, rolled back on any error.

    ``wait=False``: raise WriterBusy instead of queueing when another writer holds an SQLite
    file's write lock (a query's sweep, which the background sweep will do anyway)."""
    with (
        _sqlite_writer(engine, wait=wait),
        Session(engine, expire_on_commit=False) as session,
        session.begin(),
    ):
        yield session


@contextmanager
def _sqlite_writer(engine: Engine, *, wait: bool = True) -> Iterator[None]:
    """On an SQLite file, wait for the write lock in the open before ``BEGIN IMMEDIATE``.

    SQLite has one writer at a time, and a writer that finds the lock taken polls for it,
    sleeping up to 100 ms between tries: under many concurrent writers (HTTP ingest with
    several workers and threads) the lock sat free while they slept, and the unlucky ones
    waited seconds. A thread lock and an ``flock`` on a file beside the database queue the
    writers of this process and of other processes instead, and wake the next one as soon
    as the lock is released. Read-only (DEFERRED) transactions do not take it. Not
    ``wait``ing, raises WriterBusy when either lock is taken."""
    path = _writer_lock_path(engine)
    if path is None:
        yield
        return
    lock = _writer_lock(path)
    asked = time.perf_counter()
    if not lock.thread_lock.acquire(blocking=wait):
        raise WriterBusy
    try:
        try:
            fcntl.flock(lock.fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WriterBusy from None
        got = time.perf_counter()
        try:
            yield
        finally:
            fcntl.flock(lock.fd, fcntl.LOCK_UN)
            if _write_lock_observer is not None:
                _write_lock_observer(got - asked, time.perf_counter() - got)
    finally:
        lock.thread_lock.release()
    # Outside the write lock: the WAL copied back by a thread beside the writers.
    checkpointer(str(engine.url.database)).committed()


# Called with the seconds each SQLite write transaction waited for the write lock and held
# it (``app.web.metrics`` counts them); None: nobody asked.
_write_lock_observer: Callable[[float, float], None] | None = None


def observe_write_lock(observer: Callable[[float, float], None] | None) -> None:
    """Have ``observer(waited, held)`` called, in seconds, after every transaction that took
    an SQLite file's write lock, in the thread that ran it; it must not raise."""
    global _write_lock_observer
    _write_lock_observer = observer


@dataclass
class _WriterLock:
    thread_lock: threading.RLock
    fd: int


_WRITER_LOCKS: dict[str, _WriterLock] = {}
_WRITER_LOCKS_GUARD = threading.Lock()


def _writer_lock_path(engine: Engine) -> str | None:
    if engine.dialect.name != "sqlite":
        return None
    if engine.get_execution_options().get("sqlite_begin", "IMMEDIATE") != "IMMEDIATE":
        return None
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return database + ".writer"


def _writer_lock(path: str) -> _WriterLock:
    with _WRITER_LOCKS_GUARD:
        lock = _WRITER_LOCKS.get(path)
        if lock is None:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            lock = _WRITER_LOCKS[path] = _WriterLock(threading.RLock(), fd)
        return lock


def run(
    engine: Engine, work: Callable[[Session], T], *, attempts: int = 10, wait: bool = True
) -> T:
    """Run ``work`` in one transaction, retrying it from the start after a transient error
    (serialization failure, deadlock, a busy SQLite). ``work`` must have no effect outside
    the session. Raises the last error when every attempt failed, or any other error
    (WriterBusy when not ``wait``ing, see ``transaction``)."""
    for attempt in range(attempts):
        try:
            with transaction(engine, wait=wait) as session:
                return work(session)
        except DBAPIError as exc:
            if attempt + 1 >= attempts or not is_transient(exc):
                raise
            # Jittered exponential back-off, so the same two transactions do not collide
            # again in lock step.
            time.sleep(random.uniform(0, 0.005 * 2**attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def unavailable(exc: BaseException) -> bool:
    """Whether a database error says the database cannot be written now, whatever the item:
    a lost or refused connection, a full disk, a read-only database, an I/O error, a
    server shutting down (SQLAlchemy's OperationalError and InterfaceError, and the
    SQLSTATEs below), or no pooled connection in time. Only a constraint or a value the
    database refuses (IntegrityError, DataError) is the item's own."""
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    sqlstate = str(getattr(exc.orig, "sqlstate", None) or "")
    if sqlstate[:2] in _UNAVAILABLE_CLASSES or sqlstate in _UNAVAILABLE_STATES:
        return True
    return not isinstance(exc, IntegrityError | DataError)


# PostgreSQL SQLSTATE classes and codes (PostgreSQL manual, appendix A) that say the server
# cannot take writes: connection exceptions, insufficient resources (disk full, out of
# memory, too many connections), operator intervention (shutdown), system errors (I/O);
# and a read-only transaction (hot standby, default_transaction_read_only).
_UNAVAILABLE_CLASSES = frozenset({"08", "53", "57", "58"})
_UNAVAILABLE_STATES = frozenset({"25006"})


def is_transient(exc: BaseException) -> bool:
    """True for errors that a retry of the same transaction may not meet again."""
    if not isinstance(exc, DBAPIError):
        return False
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if sqlstate in _TRANSIENT_SQLSTATES:
        return True
    return "database is locked" in str(exc.orig)


# --- migrations -------------------------------------------------------------------------


def alembic_config() -> Config:
    """Alembic configured in code, without alembic.ini (which only the ``alembic`` command
    line in a checkout reads): the packaged script directory, nothing else."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def upgrade(engine: Engine) -> None:
    """Run the Alembic migrations up to head (``handoff-trace db upgrade``)."""
    cfg = alembic_config()
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _UPGRADE_LOCK})
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def ensure_schema(engine: Engine) -> None:
    """Bring the schema to head when it is not there yet (the embedded database needs no
    set-up step); a no-op on an up-to-date database."""
    if current_revision(engine) != head_revision():
        upgrade(engine)


# --- dialect-specific statements ----------------------------------------------------------
#
# The hot statements of ingest are built once per dialect and table and run on the
# session's Core connection with a parameter dict: building a statement anew on every call,
# and running it through the ORM session, cost ~5x what SQLite takes to execute it (see
# BENCHMARKS.md, "Where the time goes").


def pairs_in(first: Any, second: Any, name: str = "b_hops") -> Any:
    """``(first, second) IN`` the pairs bound as ``name`` (``pair_params``), for many pairs
    at once (a batch's hops). Each column's own ``IN`` stands beside the row-value one:
    given only the latter for a few hundred pairs, SQLite's planner scans the whole table
    and probes the list (1 s per batch at 500,000 elements, so ingest slowed as the store
    grew); with both it searches the (first, second) index, ~100 times faster there. On
    PostgreSQL ``select_rows`` sends each list as arrays (``_ArrayLists``), where the pairs
    are joined to the (first, second) index once the table is large."""
    return and_(
        first.in_(bindparam(f"{name}_first", expanding=True)),
        second.in_(bindparam(f"{name}_second", expanding=True)),
        tuple_(first, second).in_(bindparam(name, expanding=True)),
    )


def pair_params(pairs: Iterable[Sequence[Any]], name: str = "b_hops") -> dict[str, Any]:
    """The parameters of a ``pairs_in`` condition."""
    listed = [(a, b) for a, b in pairs]
    return {
        name: listed,
        f"{name}_first": sorted({a for a, _ in listed}),
        f"{name}_second": sorted({b for _, b in listed}),
    }


def execute(session: Session, statement: Any, params: Mapping[str, Any] | None = None) -> Any:
    """Run a prebuilt Core statement on the session's connection (no ORM layer)."""
    return session.connection().execute(statement, dict(params or {}))


@functools.cache
def _insert_ignore_statement(dialect: str, table: Any, keys: tuple[str, ...]) -> Any:
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    return insert(table).on_conflict_do_nothing(index_elements=keys).returning(table.c[keys[0]])


@functools.cache
def _upsert_statement(dialect: str, table: Any, keys: tuple[str, ...], columns: Any) -> Any:
    insert = (pg_insert if dialect == "postgresql" else sqlite_insert)(table)
    update = {c: insert.excluded[c] for c in columns if c not in keys}
    return insert.on_conflict_do_update(index_elements=keys, set_=update)


def _dialect(session: Session) -> str:
    return session.get_bind().dialect.name


def insert_ignore(
    session: Session, model: Any, values: Mapping[str, Any], keys: Sequence[str]
) -> bool:
    """INSERT .. ON CONFLICT (keys) DO NOTHING. True when this call inserted the row.

    RETURNING tells, where the driver's rowcount may not (-1 from psycopg here)."""
    stmt = _insert_ignore_statement(_dialect(session), model.__table__, tuple(keys))
    return execute(session, stmt, values).first() is not None


class SharedJson(list):  # type: ignore[type-arg]
    """A JSON list that many rows share (one object, never changed once built, such as a
    verdict's checks: a few dozen distinct lists among thousands of verdicts):
    ``insert_many`` converts it for the driver once, not once for every row it is in."""

    __slots__ = ()


@dataclass(frozen=True)
class _BulkInsert:
    """One table's INSERT in the driver's own SQL, with each column's conversion to what
    the driver takes (SQLAlchemy's bind processors for the dialect: JSON text or wrapper,
    booleans, doubles) and its scalar default."""

    sql: str
    columns: tuple[str, ...]
    convert: tuple[Callable[[Any], Any] | None, ...]
    defaults: tuple[Any, ...]
    # PostgreSQL: ``sql`` takes one array per column (``_unnest``), not a row per
    # execution; ``unique``: the conflict keys' positions, when a row's update must win.
    arrays: bool = False
    unique: tuple[int, ...] | None = None
    floats: tuple[int, ...] = ()  # the positions of float columns (arrays hold one type)
    # What each SharedJson value was converted to, by its id (the value kept beside it).
    shared: dict[int, tuple[Any, Any]] = field(default_factory=dict, compare=False)

    def params(self, rows: Iterable[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        # A row that names every column (the usual case: rows are built alike) is read by
        # one C-level itemgetter; only a row leaving some out pays for the defaults. Then
        # only the columns that have a converter are touched (a few of a table's columns),
        # a column at a time.
        pick = operator.itemgetter(*self.columns)
        columns = tuple(zip(self.columns, self.defaults, strict=True))
        single = len(columns) == 1  # an itemgetter of one key gives the value itself
        picked: list[tuple[Any, ...]] = []
        for row in rows:
            try:
                picked.append((pick(row),) if single else pick(row))
            except KeyError:
                picked.append(tuple(row.get(name, default) for name, default in columns))
        return self.converted(picked)

    def converted(self, picked: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Rows of ``columns``' values, each converted for the driver."""
        converted = [(i, c) for i, c in enumerate(self.convert) if c is not None]
        if not converted or not picked:
            return picked
        by_column: list[Any] = list(zip(*picked, strict=True))
        for i, convert in converted:
            by_column[i] = self._column(by_column[i], convert)
        return list(zip(*by_column, strict=True))

    def _column(self, values: Sequence[Any], convert: Callable[[Any], Any]) -> list[Any]:
        """One column's values converted: every value through the converter, None too
        (JSON writes it as 'null'). None and an empty list (JSON's '[]', the usual value of
        a list column) are converted once for the column, the converters being pure."""
        none = convert(None)
        try:
            empty = convert([])
        except (TypeError, ValueError):  # not a JSON column: a list is converted as it was
            return [none if v is None else convert(v) for v in values]
        shared = self._shared
        return [
            none
            if v is None
            else empty
            if type(v) is list and not v
            else shared(v, convert)
            if type(v) is SharedJson
            else convert(v)
            for v in values
        ]

    def _shared(self, value: SharedJson, convert: Callable[[Any], Any]) -> Any:
        hit = self.shared.get(id(value))
        if hit is None or hit[0] is not value:
            converted = convert(value)
            if hasattr(converted, "obj") and hasattr(converted, "dumps"):
                # psycopg's Json wrapper writes its text again for every row: written once
                # here, with the wrapper's own function (psycopg's default: json.dumps).
                text = (converted.dumps or json.dumps)(converted.obj)
                converted = type(converted)(value, dumps=lambda _obj, text=text: text)
            hit = (value, converted)
            if len(self.shared) < 4096:
                self.shared[id(value)] = hit
        return hit[1]


@functools.lru_cache(maxsize=64)
def _bulk_insert(
    dialect: Any,
    table: Any,
    columns: tuple[str, ...],
    conflict: tuple[str, ...] | None,
    update: bool = False,
) -> _BulkInsert:
    preparer = dialect.identifier_preparer
    chosen = [table.c[name] for name in columns]
    # Columns with a scalar default that a row may leave out are written too, as
    # SQLAlchemy's INSERT writes them.
    chosen += [
        c
        for c in table.columns
        if c.name not in columns and c.default is not None and c.default.is_scalar
    ]
    names = ", ".join(preparer.format_column(c) for c in chosen)
    arrays = dialect.name == "postgresql"
    if arrays:
        sql = f"INSERT INTO {preparer.format_table(table)} ({names}) " + _unnest(dialect, chosen)
    else:
        placeholder = "?" if dialect.paramstyle == "qmark" else "%s"
        sql = (
            f"INSERT INTO {preparer.format_table(table)} ({names}) "
            f"VALUES ({', '.join([placeholder] * len(chosen))})"
        )
    if conflict is not None:
        sql += f" ON CONFLICT ({', '.join(map(preparer.quote, conflict))}) DO "
        # ``upsert_many``: every column the rows name, their conflict keys aside, as
        # SQLAlchemy's ``on_conflict_do_update(set_={c: excluded.c ...})`` sets them.
        changed = [preparer.format_column(table.c[c]) for c in columns if c not in conflict]
        sql += (
            f"UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in changed)}"
            if update
            else "NOTHING"
        )
    return _BulkInsert(
        sql=sql,
        columns=tuple(c.name for c in chosen),
        convert=tuple(c.type._cached_bind_processor(dialect) for c in chosen),
        defaults=tuple(
            c.default.arg if c.default is not None and c.default.is_scalar else None for c in chosen
        ),
        arrays=arrays,
        unique=tuple(columns.index(k) for k in conflict) if arrays and update else None,
        floats=tuple(i for i, c in enumerate(chosen) if isinstance(c.type, Float)),
    )


def _unnest(dialect: Any, columns: Sequence[Any]) -> str:
    """PostgreSQL's rows for ``_bulk_insert``: one array parameter per column, read back
    in the order given. The driver's executemany sends a Bind and an Execute per row, each
    handled by the server on its own (~20 us of the server's CPU a row, measured, as
    much as the insert itself; ingest writes six rows an element), where one statement of arrays is
    one of each however many rows."""
    # ``%b``: each array sent in binary; psycopg writes a text array of bytes a value at a
    # time in Python (8.6 ms for 256 digests, against 39 us in binary).
    arrays = ", ".join(f"%b::{c.type.compile(dialect=dialect)}[]" for c in columns)
    picked = ", ".join(f"u.c{i}" for i in range(len(columns)))
    listed = ", ".join(f"c{i}" for i in range(len(columns)))
    return f"SELECT {picked} FROM unnest({arrays}) WITH ORDINALITY AS u({listed}, n) ORDER BY u.n"


@contextmanager
def _driver_cursor(
    connection: Connection, sql: str, params: Any, *, many: bool = False
) -> Iterator[Any]:
    """The driver's cursor having run ``sql`` with ``params`` (``many``: executemany),
    closed afterwards.

    On SQLite, in the connection's transaction, the driver's own cursor: SQLAlchemy's
    ``exec_driver_sql`` sets up an execution context and a result for each statement,
    ~100,000 instructions, ten times what SQLite takes to run a small one, and a batch of
    ingest runs ~40 (HTTP ingest, a batch per request, ~70,000 instructions an element).
    A driver error is raised as ``exec_driver_sql`` raises it: SQLAlchemy's own handler
    wraps it (the same ``DBAPIError`` class, the driver's error as ``orig``, a disconnect
    invalidating the connection). Where someone listens for the statements
    (``before_cursor_execute``: tests and benches count them) or the engine logs them
    (``echo``), outside a transaction and on PostgreSQL, ``exec_driver_sql`` runs it."""
    dispatch = connection.dispatch
    if (
        connection.dialect.name != "sqlite"
        or not connection.in_transaction()
        or dispatch.before_cursor_execute
        or dispatch.after_cursor_execute
        or connection._echo
    ):
        result = connection.exec_driver_sql(sql, params)
        try:
            yield result.cursor
        finally:
            result.close()
        return
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        try:
            (cursor.executemany if many else cursor.execute)(sql, params)
        except connection.dialect.loaded_dbapi.Error as exc:
            connection._handle_dbapi_exception(exc, sql, params, cursor, None)
        yield cursor
    finally:
        cursor.close()


def _execute_many(connection: Connection, plan: _BulkInsert, rows: Sequence[Any]) -> None:
    """``plan`` run for each of ``rows``: the driver's executemany (``_driver_cursor``), or
    on PostgreSQL one execution with a column's values in each array parameter."""
    if not plan.arrays:
        with _driver_cursor(connection, plan.sql, rows, many=True):
            pass
        return
    if plan.unique is not None:
        # One statement cannot update a row twice (executemany's rows one after another
        # could): the last row of each key wins, as it won there.
        key = operator.itemgetter(*plan.unique)
        rows = list({key(row): row for row in rows}.values())
    columns = list(map(list, zip(*rows, strict=True)))
    for i in plan.floats:
        # An integral receive time is an int: the driver dumps a list of one type only.
        columns[i] = [float(v) if type(v) is int else v for v in columns[i]]
    with _driver_cursor(connection, plan.sql, tuple(columns)):
        pass


def insert_many(
    session: Session,
    model: Any,
    rows: Sequence[Mapping[str, Any]],
    *,
    ignore: Sequence[str] | None = None,
) -> None:
    """INSERT many rows of ``model`` in one executemany, in the driver's own SQL: the
    statement is built once per table and columns (those of the first row), and each row
    is converted as SQLAlchemy would convert it, without its per-row compiler work (~10 us
    a row, more than SQLite takes to insert it). ``ignore``: ON CONFLICT (ignore) DO
    NOTHING. Rows must have the first row's keys (a missing one is NULL or its default)."""
    if not rows:
        return
    connection = session.connection()
    table = model.__table__
    plan = _bulk_insert(
        connection.dialect, table, tuple(rows[0]), tuple(ignore) if ignore is not None else None
    )
    _execute_many(connection, plan, plan.params(rows))


def insert_tuples(
    session: Session,
    model: Any,
    columns: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
    *,
    ignore: Sequence[str] | None = None,
) -> None:
    """``insert_many`` for rows given as tuples of ``columns`` (named tuples, say), which
    must be every column of the table that has a scalar default: no mapping is built per
    row."""
    if not rows:
        return
    connection = session.connection()
    conflict = tuple(ignore) if ignore is not None else None
    plan = _bulk_insert(connection.dialect, model.__table__, columns, conflict)
    if plan.columns != columns:
        raise ValueError(f"insert_tuples needs the columns {plan.columns}")
    _execute_many(connection, plan, plan.converted([tuple(r) for r in rows]))


@dataclass(frozen=True)
class _Shape:
    """One shape of a read's expanding lists: its SQL text, where each driver parameter
    comes from (a parameter, and its index in that parameter's flattened list or -1 for
    the value itself), the statement's own literal values, and for a driver of named
    parameters (psycopg) their names."""

    sql: str
    recipe: tuple[tuple[str, int], ...]
    constants: dict[str, Any]
    keys: tuple[str, ...] | None

    def driver_params(self, params: dict[str, Any], names: list[str]) -> Any:
        flat = {n: _flat(params[n]) for n in names}
        constants = self.constants
        values: list[Any] = []
        # The recipe in runs: a run of consecutive values of one list is one slice.
        for n, start, stop in self.runs:
            if start < 0:
                values.append(params[n] if n in params else constants[n])
            else:
                values += flat[n][start:stop]
        return tuple(values) if self.keys is None else dict(zip(self.keys, values, strict=True))

    @functools.cached_property
    def runs(self) -> tuple[tuple[str, int, int], ...]:
        """``recipe`` as (parameter, start, stop) runs; start -1: the value itself."""
        runs: list[tuple[str, int, int]] = []
        for n, i in self.recipe:
            if i >= 0 and runs and runs[-1][0] == n and runs[-1][2] == i:
                runs[-1] = (n, runs[-1][1], i + 1)
            else:
                runs.append((n, i, i + 1) if i >= 0 else (n, -1, -1))
        return tuple(runs)


@dataclass
class _Read:
    """A prebuilt SELECT compiled once for a dialect, with each result column's conversion
    from what the driver gives (SQLAlchemy's result processors for the dialect and the
    column types the driver reports, found at the first run), and the SQL text and
    parameter order of each shape of its expanding ``IN`` lists met so far (their
    lengths): the text is then the same for the same shape, so the driver can keep it
    prepared (SQLite's statement cache). On PostgreSQL the lists are arrays instead
    (``arrays``), one text for every length."""

    statement: Any  # kept so that its id stays its own while cached
    compiled: Any
    expanding: frozenset[str]
    convert: tuple[tuple[int, Callable[[Any], Any]], ...] | None = None  # (column, converter)
    named: Any = None  # ``select_named``'s row type, a named tuple of the column names
    # shape -> its plan, or None where SQLAlchemy's expansion is needed (bind processors).
    shapes: dict[tuple[int, ...], _Shape | None] = field(default_factory=dict)
    # PostgreSQL: each ``IN`` list's array parameters (``_ArrayLists``), the SQL text once.
    arrays: _ArrayLists | None = None


_READS: dict[tuple[str, int], _Read] = {}


def _read(dialect: Any, statement: Any) -> _Read:
    key = (dialect.name, id(statement))
    found = _READS.get(key)
    if found is None or found.statement is not statement:
        if dialect.name == "postgresql":
            arrays = _ArrayLists.of(statement, dialect)
            found = _READS[key] = _Read(statement, arrays.compiled, frozenset(), arrays=arrays)
            return found
        compiled = statement.compile(dialect=dialect)
        expanding = frozenset(b.key for b in compiled.binds.values() if b.expanding)
        found = _READS[key] = _Read(statement, compiled, expanding)
    return found


@dataclass(frozen=True)
class _ArrayLists:
    """A prebuilt read for PostgreSQL with every expanding ``IN`` list made one array
    parameter per column: ``column = ANY(array)``, and for a list of pairs ``(a, b) IN
    (SELECT unnest(firsts), unnest(seconds))``. Expanded, a batch's read has a parameter
    per value (hundreds), which psycopg parses out of the SQL text again at every run (it
    keeps no text with more than 50) and the server parses and plans as a list of
    constants; with arrays the text is one and short, so psycopg keeps it and prepares it.
    Arrays are sent in binary (``%(name)b``: psycopg writes a text array of bytes a value
    at a time in Python). ``lists``: each list parameter's array parameters, a column
    each."""

    compiled: Any
    sql: str
    lists: dict[str, tuple[str, ...]]

    @classmethod
    def of(cls, statement: Any, dialect: Any) -> _ArrayLists:
        lists: dict[str, tuple[str, ...]] = {}

        def replace(element: Any, **_kw: Any) -> Any:
            if not (
                isinstance(element, BinaryExpression)
                and element.operator in (operators.in_op, operators.not_in_op)
                and isinstance(element.right, BindParameter)
                and element.right.expanding
            ):
                return None
            key, left = element.right.key, element.left
            columns = list(left.clauses) if isinstance(left, Tuple) else [left]
            names = lists[key] = tuple(f"{key}__{i}" for i in range(len(columns)))
            arrays = [
                cast(bindparam(n), ARRAY(c.type)) for n, c in zip(names, columns, strict=True)
            ]
            if isinstance(left, Tuple):
                found = left.in_(select(*map(func.unnest, arrays)))
            else:
                found = left == any_(arrays[0])
            return found if element.operator is operators.in_op else not_(found)

        compiled = visitors.replacement_traverse(statement, {}, replace).compile(dialect=dialect)
        sql = compiled.string
        for name in (n for names in lists.values() for n in names):
            sql = sql.replace(f"%({name})s", f"%({name})b")
        return cls(compiled, sql, lists)

    def driver_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with each list given as its arrays, each value converted as
        SQLAlchemy converts it (an array's members by its column's type)."""
        given = dict(params)
        for key, names in self.lists.items():
            values = list(given.pop(key))
            if len(names) == 1:
                given[names[0]] = values
                continue
            columns = list(zip(*values, strict=True)) if values else [()] * len(names)
            for name, column in zip(names, columns, strict=True):
                given[name] = list(column)
        processors = self.compiled._bind_processors
        return {
            n: processors[n](v) if n in processors else v
            for n, v in self.compiled.construct_params(given).items()
        }


def _result_conversions(
    dialect: Any, statement: Any, description: Sequence[Sequence[Any]]
) -> tuple[tuple[int, Callable[[Any], Any]], ...]:
    columns = statement.selected_columns
    return tuple(
        (i, processor)
        for i, (c, described) in enumerate(zip(columns, description, strict=True))
        if (processor := c.type._cached_result_processor(dialect, described[1])) is not None
    )


def _flat(values: Iterable[Any]) -> list[Any]:
    """An expanding parameter's values as the driver gets them: a tuple's members in turn."""
    values = list(values)
    if not any(issubclass(t, tuple) for t in set(map(type, values))):
        return values  # no tuple among them (a list of digests, say): as they are
    out: list[Any] = []
    for value in values:
        if isinstance(value, tuple):
            out.extend(value)
        else:
            out.append(value)
    return out


def _padded(values: Any) -> Any:
    """An ``IN`` list lengthened to the next power of two by repeating its last value (the
    same answer): a read then has a few shapes, not one for every length a batch has."""
    values = list(values)
    n = len(values)
    if n > 1 and n & (n - 1):
        values += [values[-1]] * ((1 << n.bit_length()) - n)
    return values


def _driver_sql(read: _Read, params: dict[str, Any]) -> tuple[str, Any]:
    """The SQL text and driver parameters of one run of ``read`` with ``params``."""
    if read.arrays is not None:
        return read.arrays.sql, read.arrays.driver_params(params)
    names = sorted(n for n in params if n in read.expanding)
    for n in names:
        params[n] = _padded(params[n])
    shape = tuple(len(params[n]) for n in names)
    plan = read.shapes.get(shape, False)
    if isinstance(plan, _Shape):
        return plan.sql, plan.driver_params(params, names)
    state = read.compiled.construct_expanded_state(params)
    processors = state.processors
    values = {
        name: processors[name](value) if name in processors else value
        for name, value in state.parameters.items()
    }
    driver: Any = values
    if state.positiontup is not None:
        driver = tuple(values[n] for n in state.positiontup)
    if plan is False and len(read.shapes) < 256:
        read.shapes[shape] = _shape_plan(state, params, names, driver)
    return state.statement, driver


def _shape_plan(state: Any, params: dict[str, Any], names: list[str], driver: Any) -> _Shape | None:
    """Where each driver parameter of this expansion comes from; kept only when no value
    is converted and the recipe gives back exactly what SQLAlchemy's expansion gave."""
    if state.processors:
        return None
    where: dict[str, tuple[str, int]] = {}
    for original, expanded in state.parameter_expansion.items():
        for i, name in enumerate(expanded):
            where[name] = (original, i)
    positional = state.positiontup is not None
    order = tuple(state.positiontup if positional else state.parameters)
    recipe = tuple(where.get(n, (n, -1)) for n in order)
    constants = {n: state.parameters[n] for n, i in recipe if i < 0 and n not in params}
    plan = _Shape(state.statement, recipe, constants, None if positional else order)
    return plan if plan.driver_params(params, names) == driver else None


def select_rows(
    session: Session, statement: Any, params: Mapping[str, Any] | None = None
) -> list[tuple[Any, ...]]:
    """Run a prebuilt SELECT in the driver's own SQL and answer plain tuples in its column
    order: compiled once per dialect, its expanding ``IN`` lists filled in for these
    ``params`` (each list padded to a power of two by repeating a value, which leaves an
    ``IN`` as it was, and filled in from a plan kept per shape; on PostgreSQL each list
    an array per column, ``_ArrayLists``) and each value
    converted as SQLAlchemy would convert it, without its per-call cache key, compiler
    lookup or ``Row`` objects (the read side of ``insert_many``). Only for module-level
    statements built once."""
    connection = session.connection()
    dialect = connection.dialect
    read = _read(dialect, statement)
    sql, driver_params = _driver_sql(read, dict(params or {}))
    with _driver_cursor(connection, sql, driver_params) as cursor:
        if read.convert is None:
            read.convert = _result_conversions(dialect, statement, cursor.description)
        rows = cursor.fetchall()
    if not read.convert:
        return [tuple(row) for row in rows]
    out = []
    for row in rows:
        listed = list(row)
        for i, processor in read.convert:
            listed[i] = processor(listed[i])
        out.append(tuple(listed))
    return out


def select_named(
    session: Session, statement: Any, params: Mapping[str, Any] | None = None
) -> list[Any]:
    """``select_rows`` with each row a named tuple of the statement's column names: read by
    name and by position as SQLAlchemy's ``Row`` is, without its per-statement cache key,
    compiler lookup and per-row objects. Only for module-level statements built once."""
    rows = select_rows(session, statement, params)
    read = _read(session.connection().dialect, statement)
    if read.named is None:
        read.named = collections.namedtuple("Row", statement.selected_columns.keys())  # type: ignore[misc]
    return list(map(read.named._make, rows))


def insert_ignore_many(
    session: Session, model: Any, rows: Sequence[Mapping[str, Any]], keys: Sequence[str]
) -> None:
    """INSERT .. ON CONFLICT (keys) DO NOTHING for many rows in one statement
    (executemany), when which of them were new does not matter."""
    insert_many(session, model, rows, ignore=keys)


def upsert_many(
    session: Session, model: Any, rows: Sequence[Mapping[str, Any]], keys: Sequence[str]
) -> None:
    """``upsert`` for many rows with the same columns, in one statement: the driver's
    executemany, as ``insert_many`` writes (rows must have the first row's keys)."""
    if rows:
        connection = session.connection()
        table = model.__table__
        plan = _bulk_insert(connection.dialect, table, tuple(rows[0]), tuple(keys), update=True)
        _execute_many(connection, plan, plan.params(rows))


def upsert(session: Session, model: Any, values: Mapping[str, Any], keys: Sequence[str]) -> None:
    """INSERT .. ON CONFLICT (keys) DO UPDATE every other column of ``values``."""
    columns = tuple(values)
    stmt = _upsert_statement(_dialect(session), model.__table__, tuple(keys), columns)
    execute(session, stmt, values)


# --- advisory locks -----------------------------------------------------------------------


class NeedLocks(HandoffTraceError):
    """A lock was taken by another transaction: start over holding ``keys`` from the start
    (taken in one global order, so waiting for them cannot deadlock)."""

    reason = "need-locks"

    def __init__(self, keys: frozenset[str]) -> None:
        super().__init__(f"{len(keys)} locks needed")
        self.keys = keys


def lock_id(key: str) -> int:
    """A signed 64-bit advisory lock id for a text key."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big", signed=True)


def hop_lock(hop: str) -> str:
    """Held by every transaction that writes facts of a hop or derives it."""
    return "hop:" + hop


def digest_lock(digest: bytes) -> str:
    """Held by every transaction that stores, or reads by digest, the element ``digest``
    (or elements linked to it), so such reads see every concurrent write."""
    return "digest:" + digest.hex()


# Several locks in one round trip each, taken in the order of the (sorted) array.
_LOCK = text("SELECT count(pg_advisory_xact_lock(k)) FROM unnest(CAST(:ks AS bigint[])) AS k")
_TRY_LOCK = text(
    "SELECT bool_and(pg_try_advisory_xact_lock(k)) FROM unnest(CAST(:ks AS bigint[])) AS k"
)


class Locks:
    """The transaction-scoped advisory locks of one transaction (PostgreSQL; a no-op on
    SQLite, whose IMMEDIATE transactions already run one at a time).

    ``first`` is taken up front, waiting, in sorted order. ``need`` takes more without
    waiting: a lock held elsewhere raises NeedLocks, and the caller starts the transaction
    again with everything it needed in ``first``. A transaction therefore only waits while it
    holds nothing it might be waited for with, which keeps lock waits free of cycles (a
    batch of items, ``app.ingest.pipeline``, passes every lock its items take as ``first``).
    """

    def __init__(self, session: Session, first: Iterable[str] = ()) -> None:
        self.session = session
        self.active = session.get_bind().dialect.name == "postgresql"
        self.held: set[str] = set()
        if self.active and first:
            keys = set(first)
            execute(session, _LOCK, {"ks": sorted(lock_id(key) for key in keys)})
            self.held |= keys

    def need(self, keys: Iterable[str]) -> None:
        """Hold ``keys`` too. Raises NeedLocks when one is held by another transaction
        (the ones that were free may then be held too, until the transaction or savepoint
        ends: harmless, as the caller starts it again)."""
        if not self.active:
            return
        missing = set(keys) - self.held
        if not missing:
            return
        ids = sorted(lock_id(key) for key in missing)
        if not execute(self.session, _TRY_LOCK, {"ks": ids}).scalar_one():
            raise NeedLocks(frozenset(self.held | missing))
        self.held |= missing
