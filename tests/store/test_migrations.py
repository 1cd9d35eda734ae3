"""The Alembic migration is the schema: it creates exactly the tables of the models."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text
from sqlmodel import SQLModel

from app.store import models  # noqa: F401  (the tables)
from app.store.db import current_revision, ensure_schema, head_revision, make_engine, upgrade


def test_the_migration_creates_exactly_the_models_tables(engine: Engine) -> None:
    # ``engine`` is a database built by the migration alone (tests/databases.py).
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, SQLModel.metadata) == []
    assert current_revision(engine) == head_revision()


def test_upgrade_is_idempotent(engine: Engine) -> None:
    upgrade(engine)
    upgrade(engine)
    assert current_revision(engine) == head_revision()


def test_sqlite_runs_in_wal_with_foreign_keys_and_a_busy_timeout(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'deep' / 'dir' / 'store.db'}")
    try:
        ensure_schema(engine)  # the directory is created on demand
        with engine.connect() as connection:
            pragma = connection.exec_driver_sql
            assert pragma("PRAGMA journal_mode").scalar() == "wal"
            assert pragma("PRAGMA foreign_keys").scalar() == 1
            assert pragma("PRAGMA busy_timeout").scalar() == 30_000
        assert "element" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_downgrade_removes_everything(tmp_path: Path) -> None:
    from alembic import command
    from app.store.db import alembic_config

    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        upgrade(engine)
        with engine.begin() as connection:
            cfg = alembic_config()
            cfg.attributes["connection"] = connection
            command.downgrade(cfg, "base")
        tables = set(inspect(engine).get_table_names())
        assert tables <= {"alembic_version"}
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 0
    finally:
        engine.dispose()
