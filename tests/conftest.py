"""Shared test parties: a few signing agents (fresh keys per run) and their trust store."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from parties import T0, World, make_world  # noqa: F401 (re-exported for the suite)

if TYPE_CHECKING:
    from tests.web.dashboard_data import Dataset


@pytest.fixture(scope="session")
def world() -> World:
    return make_world()


@pytest.fixture(scope="session")
def dashboard_data(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """The dashboard's data set (tests/web/dashboard_data.py), built once per run for the
    page and browser tests; its store is a template: ``dashboard_data.copy`` it first."""
    from tests.web.dashboard_data import build

    return build(tmp_path_factory.mktemp("dashboard"))


# --- databases for the store and ingest tests: SQLite and a throwaway PostgreSQL ----------
from tests.databases import databases, db_url, engine  # noqa: E402, F401
