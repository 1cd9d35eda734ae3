"""The service under test: an app on a fresh database (SQLite and PostgreSQL), a trust file,
a pinned clock, and one token per role."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from handoff_context import trust_document

from app.settings import Settings
from app.store.db import transaction
from app.store.tokens import Role, create_token
from app.web.app import create_app
from tests.conftest import T0, World

NOW = T0 + 100  # the store's clock in these tests
ROLES = ("ingest", "read", "operator", "admin")


def write_trust(world: World, path: Path) -> Path:
    doc = trust_document([world.assistant, world.planner, world.coder, world.tester])
    doc["issuers"][1]["keys"].append(world.planner_alt.trust_entry()["keys"][0])
    path.write_text(json.dumps(doc))
    return path


@dataclass
class Clock:
    now: int = NOW

    def __call__(self) -> int:
        return self.now


@dataclass
class Api:
    """A started app and a client for it, with a token for each role."""

    app: FastAPI
    client: TestClient
    clock: Clock
    tokens: dict[str, str] = field(default_factory=dict)

    def auth(self, role: str | None) -> dict[str, str]:
        return {} if role is None else {"Authorization": f"Bearer {self.tokens[role]}"}

    def get(self, path: str, *, role: str | None = "admin", **kw: Any) -> Any:
        return self.client.get(path, headers={**self.auth(role), **kw.pop("headers", {})}, **kw)

    def post(
        self,
        path: str,
        body: bytes,
        *,
        content_type: str = "application/x-ndjson",
        role: str | None = "admin",
        **kw: Any,
    ) -> Any:
        headers = {**self.auth(role), "Content-Type": content_type, **kw.pop("headers", {})}
        return self.client.post(path, content=body, headers=headers, **kw)

    def patch(self, path: str, body: Any, *, role: str | None = "admin") -> Any:
        return self.client.patch(path, json=body, headers=self.auth(role))

    @property
    def engine(self) -> Any:
        return self.app.state.service.engine


def make_tokens(engine: Any) -> dict[str, str]:
    with transaction(engine) as session:
        return {
            role: create_token(session, name=f"{role}-token", role=Role(role), now=T0)
            for role in ROLES
        }


@pytest.fixture
def trust_file(world: World, tmp_path: Path) -> Path:
    return write_trust(world, tmp_path / "trust.json")


def start(url: str, trust_file: Path, **settings: Any) -> Iterator[Api]:
    clock = Clock()
    app = create_app(Settings(database_url=url, trust_file=trust_file, **settings), clock=clock)
    with TestClient(app, raise_server_exceptions=False) as client:
        api = Api(app, client, clock)
        api.tokens = make_tokens(api.engine)
        yield api


@pytest.fixture
def api(db_url: str, trust_file: Path) -> Iterator[Api]:
    """The service on each database."""
    yield from start(db_url, trust_file)


@pytest.fixture
def sqlite_api(databases: Any, trust_file: Path) -> Iterator[Api]:
    """The service on SQLite only, for tests of the HTTP layer that no database changes."""
    yield from start(databases.new("sqlite"), trust_file)
