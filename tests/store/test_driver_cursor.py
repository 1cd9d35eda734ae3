"""``db._driver_cursor``: on SQLite, inside a transaction, the store's driver statements
(``insert_many``, ``insert_tuples``, ``upsert_many``, ``select_rows``) run on the driver's
own cursor, not through ``exec_driver_sql``; they store and answer what they did through
it, and a driver error is raised as ``exec_driver_sql`` raised it. A statement listener
(``before_cursor_execute``, as tests and benches count statements) sends them back through
SQLAlchemy, which is what the comparisons below run against. Host task states, once a Core
INSERT, go through ``insert_many`` too, and store what that INSERT stored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    Column,
    Connection,
    Engine,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    bindparam,
    event,
    select,
)
from sqlalchemy.exc import IntegrityError

from app.store import db

_METADATA = MetaData()
_TABLE = Table(
    "t",
    _METADATA,
    Column("id", Integer, primary_key=True),
    Column("name", Text, nullable=False),
    Column("blob", LargeBinary),
    Column("doc", JSON),
)


class _Model:
    __table__ = _TABLE


_READ = select(_TABLE.c.id, _TABLE.c.name, _TABLE.c.blob, _TABLE.c.doc).where(
    _TABLE.c.id.in_(bindparam("b_ids", expanding=True))
)
_ROWS = [
    {"id": i, "name": f"n{i}", "blob": bytes([i]) * i, "doc": {"i": i, "l": ["ü"] * i}}
    for i in range(1, 8)
]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = db.make_engine(f"sqlite:///{tmp_path / 'driver.db'}")
    _METADATA.create_all(engine)
    yield engine
    engine.dispose()


def _listened(engine: Engine) -> Callable[[], None]:
    """A statement listener on ``engine`` (statements then go through SQLAlchemy); returns
    its removal."""

    def listener(*_args: Any) -> None:
        return None

    event.listen(engine, "before_cursor_execute", listener)
    return lambda: event.remove(engine, "before_cursor_execute", listener)


def _write_and_read(engine: Engine) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with db.transaction(engine) as session:
        db.insert_many(session, _Model, _ROWS[:4])
        db.insert_tuples(session, _Model, ("id", "name", "blob", "doc"), [(9, "nine", None, [])])
        db.upsert_many(session, _Model, [{"id": 2, "name": "two", "doc": None}], ["id"])
        db.insert_ignore_many(session, _Model, _ROWS, ["id"])
        answered = db.select_rows(session, _READ, {"b_ids": [1, 2, 3, 9, 100]})
    with engine.connect() as connection:
        stored = connection.exec_driver_sql("SELECT * FROM t ORDER BY id").fetchall()
    return sorted(answered), [tuple(row) for row in stored]


def test_the_driver_cursor_stores_and_answers_what_sqlalchemy_does(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through the driver's cursor: exec_driver_sql is never called in the transaction.
    def refuse(connection: Connection, *args: Any, **kw: Any) -> Any:
        assert not connection.in_transaction(), "went through exec_driver_sql"
        return plain(connection, *args, **kw)

    plain = Connection.exec_driver_sql
    with monkeypatch.context() as patched:
        patched.setattr(Connection, "exec_driver_sql", refuse)
        fast = _write_and_read(engine)
    other = db.make_engine(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        _METADATA.create_all(other)
        remove = _listened(other)
        try:
            slow = _write_and_read(other)
        finally:
            remove()
    finally:
        other.dispose()
    assert fast == slow
    assert len(fast[0]) == 4 and len(fast[1]) == 8


def _duplicate(engine: Engine) -> IntegrityError:
    with db.transaction(engine) as session:
        db.insert_many(session, _Model, _ROWS[:2])
    with pytest.raises(IntegrityError) as raised, db.transaction(engine) as session:
        db.insert_many(session, _Model, _ROWS[1:3])
    return raised.value


def test_a_driver_error_is_raised_as_exec_driver_sql_raises_it(engine: Engine) -> None:
    fast = _duplicate(engine)
    with engine.begin() as connection:
        connection.exec_driver_sql("DELETE FROM t")
    remove = _listened(engine)
    try:
        slow = _duplicate(engine)
    finally:
        remove()
    assert type(fast) is type(slow)
    assert type(fast.orig) is type(slow.orig) and str(fast.orig) == str(slow.orig)
    assert fast.statement == slow.statement
    assert fast.connection_invalidated is slow.connection_invalidated is False
    assert not db.unavailable(fast) and not db.is_transient(fast)
    # The transaction was rolled back whole, and the engine goes on.
    with db.transaction(engine) as session:
        assert db.select_rows(session, _READ, {"b_ids": [1, 2, 3]}) == [
            (1, "n1", b"\x01", {"i": 1, "l": ["ü"]}),
            (2, "n2", b"\x02\x02", {"i": 2, "l": ["ü", "ü"]}),
        ]


def test_host_states_are_stored_as_sqlalchemy_insert_stored_them(tmp_path: Path) -> None:
    """``host.add_host_states`` (``insert_many``) stores what its Core INSERT stored."""
    from sqlalchemy import insert

    from app.store import host
    from app.store.models import HostStateRow

    base = {"task_state": "TASK_STATE_WORKING", "dialog": None, "received_at": 1_700_000_000}
    rows = [
        {
            **base,
            "task_id": f"t{i}",
            "received_exact": exact,
            "seq": i,
            "received_by": by,
            "source": "capture.jsonl",
            "carrier": "a2a",
            "element": i % 2 == 0,
            "ingested_at": 1_700_000_100,
            "observation_key": key,
        }
        for i, (exact, by, key) in enumerate(
            [(1_700_000_000.25, "agent", "k1"), (None, None, None), (1.5e9, "b", "k2")]
        )
    ]
    stored = []
    for name, write in (
        ("driver", lambda s: host.add_host_states(s, rows)),
        ("core", lambda s: s.connection().execute(insert(HostStateRow), rows)),
    ):
        engine = db.make_engine(f"sqlite:///{tmp_path / name}.db")
        try:
            db.ensure_schema(engine)
            with db.transaction(engine) as session:
                write(session)
            with engine.connect() as connection:
                found = connection.exec_driver_sql("SELECT * FROM host_state ORDER BY id")
                stored.append([tuple(map(repr, row)) for row in found])
        finally:
            engine.dispose()
    assert stored[0] == stored[1]
    assert len(stored[0]) == 3


def test_an_echoing_engine_still_logs_the_statements(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = db.make_engine(f"sqlite:///{tmp_path / 'echo.db'}")
    try:
        _METADATA.create_all(engine)
        engine.echo = True
        with caplog.at_level("INFO", logger="sqlalchemy.engine"), db.transaction(engine) as s:
            db.insert_many(s, _Model, _ROWS[:1])
            db.select_rows(s, _READ, {"b_ids": [1]})
    finally:
        engine.dispose()
    logged = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("INSERT INTO t ") for m in logged)
    assert any(m.startswith("SELECT t.id") for m in logged)
