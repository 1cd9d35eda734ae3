"""PostgreSQL plans the reads of hop facts by index from a new store's first write on,
before autovacuum has given the planner any statistics (``app.store.derive._counts``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from app.store import db
from app.store.db import make_engine
from app.store.derive import _DOWNSTREAM_MANY


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def test_whether_an_offer_counts_is_asked_per_row_not_of_every_observation(
    databases: Any,
) -> None:
    """Flattened into a join, the EXISTS let PostgreSQL hash every observation and verdict
    on each call while the tables had no statistics: 13 to 22 ms a call at 10,000
    elements, growing with the store. As a subplan it probes the observations of each
    row by index."""
    engine = make_engine(databases.new("postgresql"))
    try:
        with engine.connect() as connection:
            # The statement as select_rows sends it: each list one array.
            read = db._read(connection.dialect, _DOWNSTREAM_MANY)
            sql, params = db._driver_sql(read, {"b_offers": [bytes(32), bytes([1]) * 32]})
            (plan,) = connection.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {sql}", params).one()
        nodes = list(_nodes(plan[0]["Plan"]))
        subplans = [n for n in nodes if n.get("Parent Relationship") == "SubPlan"]
        assert any(m.get("Relation Name") == "observation" for s in subplans for m in _nodes(s)), (
            nodes
        )
        assert not any(n.get("Join Type") == "Semi" for n in nodes), nodes
    finally:
        engine.dispose()
