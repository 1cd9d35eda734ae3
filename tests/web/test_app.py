"""A ``serve`` worker readies itself before its first request (``app.web.app``): the table
of query names is built at start-up, and the start-up heap is frozen out of the cyclic
collector's full collections (which hold the GIL, and with it the event loop) while the app
runs, and given back when it stops."""

from __future__ import annotations

import gc
import inspect
from pathlib import Path

from fastapi.testclient import TestClient

from app.settings import Settings
from app.web.app import create_app
from app.web.params import reject_unknown_query
from app.web.service import current_service
from tests.databases import Databases
from tests.web.conftest import make_tokens


def test_a_served_app_is_ready_before_its_first_request(
    databases: Databases, trust_file: Path
) -> None:
    settings = Settings(database_url=databases.new("sqlite"), trust_file=trust_file)
    app = create_app(settings, served=True)
    assert getattr(app.state, "query_names", None) is None
    assert gc.get_freeze_count() == 0
    with TestClient(app, raise_server_exceptions=False) as client:
        names = app.state.query_names
        assert names[("get", "/api/v1/hops")] >= {"state", "limit", "cursor"}
        assert gc.get_freeze_count() > 0
        token = make_tokens(app.state.service.engine)["read"]
        auth = {"Authorization": f"Bearer {token}"}
        # The table built at start-up is the one requests are checked against.
        assert client.get("/api/v1/hops?limit=5", headers=auth).status_code == 200
        refused = client.get("/api/v1/hops?stat=offered", headers=auth)
        assert refused.status_code == 422
        assert "stat" in refused.text
        assert app.state.query_names is names
    assert gc.get_freeze_count() == 0


def test_an_app_not_served_builds_the_table_on_its_first_request(
    databases: Databases, trust_file: Path
) -> None:
    settings = Settings(database_url=databases.new("sqlite"), trust_file=trust_file)
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        assert getattr(app.state, "query_names", None) is None
        assert gc.get_freeze_count() == 0
        assert client.get("/api/v1/hops?stat=offered").status_code == 422
        assert ("get", "/api/v1/hops") in app.state.query_names


def test_the_dependencies_of_every_api_request_run_on_the_event_loop() -> None:
    # FastAPI runs a plain ``def`` dependency in a worker thread; under ingest load each
    # such hop waits for the GIL. The service and the query check do no I/O: async, they
    # run in place (the token check reads the database and keeps its thread).
    assert inspect.iscoroutinefunction(current_service)
    assert inspect.iscoroutinefunction(reject_unknown_query)
