"""``db.upsert_many`` (the driver's executemany of INSERT .. ON CONFLICT DO UPDATE, rows
converted once) stores exactly what SQLAlchemy's ``on_conflict_do_update`` stored before
it, on both databases: the derived hops and envelope cases of the simulator's mixed
capture, ingested in parts and again at a later clock (rows inserted, then updated)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from handoff_context import RefPolicy, TrustStore
from sqlalchemy import Engine

from app.demo import DemoConfig, DemoPaths, write_demo
from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions, load_objects
from app.store import db, derive, envelopes
from app.store.db import make_engine

_TABLES = ("hop", "envelope_case", "flag")


def _raw(engine: Engine) -> dict[str, list[tuple[str, ...]]]:
    """The rows of the upserted tables as the driver reads them back, in a fixed order. A
    hop's ``change`` is a transaction id on PostgreSQL (cluster-wide, so never the same in
    two databases): it is compared by its rank among the changes."""
    out = {}
    with engine.connect() as connection:
        for table in _TABLES:
            result = connection.exec_driver_sql(f"SELECT * FROM {table}")
            names = list(result.keys())
            rows = [list(row) for row in result]
            if "change" in names:
                at = names.index("change")
                rank = {c: i for i, c in enumerate(sorted({row[at] for row in rows}))}
                for row in rows:
                    row[at] = rank[row[at]]
            out[table] = sorted(tuple(repr(v) for v in row) for row in rows)
    return out


def _ingest_in_parts(engine: Engine, paths: DemoPaths, now: int) -> None:
    pipeline = Pipeline(
        engine=engine,
        trust=TrustStore.load(paths.trust),
        options=VerifyOptions(at=now, ref_policy=RefPolicy.CHECK_AVAILABLE),
        objects=load_objects(paths.objects),
    )
    for path, clock in ((paths.out, now), (paths.cbor, now), (paths.out, now + 3600)):
        report = ingest(pipeline, [(str(path), path.read_bytes())], now=clock)
        assert not report.errors


def test_the_driver_upsert_stores_what_sqlalchemy_upsert_stores(
    db_url: str, databases: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.dialects.postgresql import insert as pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    paths = DemoPaths.beside(tmp_path / "capture.jsonl", trust=None, answers=None)
    summary = write_demo(DemoConfig(seed=11, dialogs=12, agents=6, fault_rate=0.3), paths)
    kind = db_url.split(":", 1)[0].split("+", 1)[0]
    engines = [make_engine(db_url), make_engine(databases.new(kind))]
    try:
        _ingest_in_parts(engines[0], paths, summary.suggested_now)

        def through_sqlalchemy(session: Any, model: Any, rows: Any, keys: Any) -> None:
            if rows:
                dialect = session.get_bind().dialect.name
                insert = (pg_insert if dialect == "postgresql" else sqlite_insert)(model)
                update = {c: insert.excluded[c] for c in rows[0] if c not in keys}
                statement = insert.on_conflict_do_update(index_elements=keys, set_=update)
                session.connection().execute(statement, [dict(r) for r in rows])

        for module in (db, derive, envelopes):
            monkeypatch.setattr(module, "upsert_many", through_sqlalchemy)
        _ingest_in_parts(engines[1], paths, summary.suggested_now)
        stored = _raw(engines[0])
        assert stored == _raw(engines[1])
        assert stored["hop"] and stored["envelope_case"], "hops and cases were written"
        # Updated, not only inserted: hops derived at the first clock were derived again
        # at the later one.
        with engines[0].connect() as connection:
            clocks = connection.exec_driver_sql("SELECT DISTINCT derived_at FROM hop").all()
        assert summary.suggested_now + 3600 in {c for (c,) in clocks}
    finally:
        for engine in engines:
            engine.dispose()
