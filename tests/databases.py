"""Database fixtures for the store and ingest tests, registered in tests/conftest.py.

``db_url`` is parametrized over SQLite and PostgreSQL: every test that asks for it runs on
both, each time against a fresh database migrated by the Alembic migration.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests import pg

DB_KINDS = ("sqlite", "postgresql")


class Databases:
    """Fresh migrated databases, each copied from a template that the Alembic migration
    built once per run (the migration is what the tests exercise, never create_all).

    PostgreSQL starts on first use. Without its binaries the postgresql tests fail, unless
    HANDOFF_TRACE_NO_PG=1 says that this run deliberately goes without.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cluster: pg.Cluster | None = None
        self._sqlite_template: Path | None = None
        self._count = itertools.count()

    def new(self, kind: str) -> str:
        n = next(self._count)
        if kind == "sqlite":
            if self._sqlite_template is None:
                self._sqlite_template = self.root / "template.db"
                _migrate(f"sqlite:///{self._sqlite_template}")
            path = self.root / f"test-{n}.db"
            shutil.copyfile(self._sqlite_template, path)
            return f"sqlite:///{path}"
        if self.cluster is None:
            bin_dir = pg.find_bin()
            if bin_dir is None:
                if os.environ.get(pg.NO_PG_ENV) == "1":
                    pytest.skip(f"PostgreSQL binaries not installed ({pg.NO_PG_ENV}=1)")
                pytest.fail(
                    "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin: install "
                    f"them (apt-get install -y postgresql) or set {pg.NO_PG_ENV}=1 to skip",
                    pytrace=False,
                )
            self.cluster = pg.start(bin_dir, in_memory=True)
            _migrate(self.cluster.create_database("template_store"))
        return self.cluster.create_database(f"test_{n}", template="template_store")

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


def _migrate(url: str) -> None:
    from app.store.db import make_engine, upgrade

    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Databases]:
    dbs = Databases(tmp_path_factory.mktemp("databases"))
    try:
        yield dbs
    finally:
        dbs.close()


@pytest.fixture(params=DB_KINDS)
def db_url(request: pytest.FixtureRequest, databases: Databases) -> str:
    """A fresh, migrated, empty database of each kind."""
    return databases.new(request.param)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    from app.store.db import make_engine

    eng = make_engine(db_url)
    try:
        yield eng
    finally:
        eng.dispose()
