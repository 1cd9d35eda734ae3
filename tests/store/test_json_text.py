"""``db.json_text`` (``json.dumps``'s C encoder built directly) writes exactly the text
``json.dumps`` writes, or raises what it raises, for the values JSON columns hold and for
the awkward ones (non-ASCII and lone surrogates, floats and their non-finite values,
integers beyond 64 bits, non-text keys, nesting, a circular list); and ``insert_many``
writes a JSON column on SQLite with it, as SQLAlchemy's own bind processor does."""

from __future__ import annotations

import json
import math
import re
from collections import OrderedDict
from typing import Any

import pytest
from sqlalchemy import JSON, Column, Integer, MetaData, Table, create_engine

from app.store import db

_CIRCULAR: list[Any] = []
_CIRCULAR.append(_CIRCULAR)

_VALUES: list[Any] = [
    None,
    True,
    0,
    -(2**70),
    1.5,
    1e-05,
    math.inf,
    -math.inf,
    math.nan,
    "text",
    'ünïcödé \u2028 \ud800 "quoted" \\ \n\t',
    [],
    {},
    ["a", 1, None, [2, {"b": [3.25, False]}]],
    {"z": 1, "a": {"nested": ["x", "ÿ"]}, "k": None},
    {1: "int key", 2.5: "float key", None: "none", False: "bool"},
    OrderedDict([("b", 1), ("a", 2)]),
    db.SharedJson([{"check": "signature", "result": "pass"}]),
    ("a", "tuple"),
]


@pytest.mark.parametrize("value", _VALUES, ids=repr)
def test_json_text_writes_what_json_dumps_writes(value: Any) -> None:
    assert db.json_text(value) == json.dumps(value)


@pytest.mark.parametrize("value", [object(), {("a",): 1}, _CIRCULAR, {"x": b"bytes"}])
def test_json_text_refuses_what_json_dumps_refuses(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as dumps:
        json.dumps(value)
    with pytest.raises(dumps.type, match=re.escape(str(dumps.value))):
        db.json_text(value)


def test_insert_many_writes_json_columns_as_sqlalchemy_writes_them() -> None:
    """Every value above that JSON can hold, through ``insert_many``'s plan for SQLite and
    through SQLAlchemy's INSERT: the same stored text."""
    metadata = MetaData()
    table = Table("t", metadata, Column("id", Integer, primary_key=True), Column("j", JSON))
    values = [v for v in _VALUES if v is not None]
    engine = create_engine("sqlite://")
    try:
        metadata.create_all(engine)
        plan = db._bulk_insert(engine.dialect, table, ("id", "j"), None)
        assert plan.convert[1] is not table.c.j.type._cached_bind_processor(engine.dialect)
        with engine.begin() as connection:
            connection.exec_driver_sql(
                plan.sql, plan.params([{"id": i, "j": v} for i, v in enumerate(values)])
            )
            offset = len(values)
            connection.execute(
                table.insert(), [{"id": offset + i, "j": v} for i, v in enumerate(values)]
            )
            rows = connection.exec_driver_sql("SELECT id, j FROM t ORDER BY id").fetchall()
        fast, slow = rows[:offset], rows[offset:]
        assert [text for _, text in fast] == [text for _, text in slow]
    finally:
        engine.dispose()
