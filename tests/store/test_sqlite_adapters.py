"""``db.register_sqlite_adapters`` (bytes, None and booleans found in the driver's adapter
registry at the first lookup, not after a swallowed AttributeError) stores exactly what the
driver stores without them: each value's SQLite type and value, bound one at a time and
by executemany, compared with the same values bound while the adapters are left out."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store import db

_VALUES = (b"\x00digest\xff", b"", None, True, False, 0, 7, "text", 1.5)
_ADAPTED = (bytes, type(None), bool)


def _stored(values: tuple[object, ...]) -> list[tuple[object, ...]]:
    """Each value as SQLite holds it (its type and value), bound by execute and by
    executemany."""
    con = sqlite3.connect(":memory:")
    try:
        con.execute("CREATE TABLE t (v)")
        for value in values:
            con.execute("INSERT INTO t VALUES (?)", (value,))
        con.executemany("INSERT INTO t VALUES (?)", [(v,) for v in values])
        return con.execute("SELECT typeof(v), v FROM t ORDER BY rowid").fetchall()
    finally:
        con.close()


@pytest.fixture
def without_adapters() -> Iterator[None]:
    """The driver's registry without this module's adapters, put back afterwards."""
    keys = [(kind, sqlite3.PrepareProtocol) for kind in _ADAPTED]
    kept = {key: sqlite3.adapters.pop(key) for key in keys if key in sqlite3.adapters}
    try:
        yield
    finally:
        sqlite3.adapters.update(kept)


def test_adapters_store_what_the_driver_stores(without_adapters: None, tmp_path: Path) -> None:
    plain = _stored(_VALUES)
    assert plain[:3] == [("blob", b"\x00digest\xff"), ("blob", b""), ("null", None)]
    db.make_engine(f"sqlite:///{tmp_path / 'a.db'}").dispose()  # registers them
    assert all((kind, sqlite3.PrepareProtocol) in sqlite3.adapters for kind in _ADAPTED)
    assert _stored(_VALUES) == plain
