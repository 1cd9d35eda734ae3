"""Schemathesis drives every operation of the app's own OpenAPI document with generated
requests (in process, on a store with data in it) with each role's token and with none: no
answer is a 5xx, and every answer, a 401 or 403 included, matches what the document says."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import positive_data_acceptance

from app.ingest.pipeline import ingest
from app.settings import Settings
from app.store.db import make_engine
from app.web.app import create_app
from tests.conftest import World
from tests.databases import Databases
from tests.store.builders import jsonl, pipeline
from tests.web.conftest import NOW, make_tokens, write_trust
from tests.web.test_api import Scenario

# Per operation and generation mode: the admin's run in full, each other role's briefly
# (most of its answers are a 401 or 403); the whole file stays about a minute.
EXAMPLES = 25
FEWER = 3
# The same examples on every run (hypothesis's derandomize), so a CI failure reproduces and a
# green run means the same thing twice; longer, random exploration is `make fuzz`'s job
# (fuzz/fuzz_http.py) and tests/web/test_fuzz_http.py's.
FIXED = {"derandomize": True, "deadline": None, "suppress_health_check": list(HealthCheck)}
ROLES = (None, "read", "ingest", "operator")


@pytest.fixture(scope="module")
def served(
    databases: Databases, world: World, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, dict[str, str]]]:
    url = databases.new("sqlite")
    trust = write_trust(world, tmp_path_factory.mktemp("openapi") / "trust.json")
    engine = make_engine(url)
    try:
        tokens = make_tokens(engine)
        ingest(pipeline(engine, world.trust), [("seed.jsonl", jsonl(Scenario(world).records))])
    finally:
        engine.dispose()
    app = create_app(Settings(database_url=url, trust_file=Path(trust)), clock=lambda: NOW)
    DEFERRED.app = app
    try:
        yield app, tokens
    finally:
        asgi.shutdown_lifespans()  # schemathesis started the app's lifespan; end it


@schemathesis.serializer("application/x-ndjson", "application/cbor", "application/x-protobuf")
def _octets(ctx: Any, value: Any) -> bytes:
    """The capture types whose schema is any octets: sent as generated."""
    return value if isinstance(value, bytes) else str(value).encode()


class Deferred:
    """An ASGI app that forwards to the app the ``served`` fixture builds: the schema is
    loaded (and the tests generated) at import time, before any database exists."""

    app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


DEFERRED = Deferred()
# The document does not depend on the deployment: any app's is the app's.
schema = schemathesis.openapi.from_dict(create_app(Settings()).openapi())
schema.app = DEFERRED


def _call(case: Any, token: str | None) -> None:
    case.call_and_validate(
        headers={} if token is None else {"Authorization": f"Bearer {token}"},
        # A schema-valid request may still be refused on purpose: a cursor this API never
        # gave out (400), a snooze into the past or a resolve without a note (422). JSON
        # Schema cannot say either, so "valid requests are accepted" is not checked.
        excluded_checks=[positive_data_acceptance],
    )


@schema.parametrize()
@settings(max_examples=EXAMPLES, **FIXED)
def test_no_operation_answers_a_server_error(case: Any, served: tuple[Any, dict[str, str]]) -> None:
    """With the admin's token every operation runs in full."""
    _call(case, served[1]["admin"])


@schema.parametrize()
@pytest.mark.parametrize("role", ROLES, ids=lambda r: r or "anonymous")
@settings(max_examples=FEWER, **FIXED)
def test_every_role_gets_a_documented_answer(
    case: Any, role: str | None, served: tuple[Any, dict[str, str]]
) -> None:
    """Each other role, and no token: allowed operations run, the rest are a documented
    401 or 403, never a 5xx."""
    _call(case, None if role is None else served[1][role])
