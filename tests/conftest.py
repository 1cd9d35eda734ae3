"""Shared test parties: a few signing agents (fresh keys per run) and their trust store."""

from __future__ import annotations

import pytest
from parties import T0, World, make_world  # noqa: F401 (re-exported for the suite)


@pytest.fixture(scope="session")
def world() -> World:
    return make_world()


# --- databases for the store and ingest tests: SQLite and a throwaway PostgreSQL ----------
from tests.databases import databases, db_url, engine  # noqa: E402, F401
