"""Every crashing input found by fuzzing or the hostile-input tests, kept as a named
regression vector (tests/vectors/fuzz, listed in its README.md): each must now
get its expected error, on SQLite and PostgreSQL where it reaches the store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from handoff_context import _jws as jws
from handoff_context.errors import MalformedError

from fuzz import targets
from tests.databases import Databases
from tests.web.conftest import Api, start

FOLDER = targets.FUZZ_VECTORS
INDEX = json.loads((FOLDER / "index.json").read_bytes())


def octets(entry: dict[str, Any]) -> bytes:
    return (FOLDER / f"{entry['name']}.bin").read_bytes()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def vectors_api(request: pytest.FixtureRequest, databases: Databases) -> Iterator[Api]:
    for api in start(databases.new(request.param), targets.VECTORS / "trust.json"):
        api.clock.now = targets.AT
        yield api


def test_the_index_names_every_file() -> None:
    names = {p.stem for p in FOLDER.glob("*.bin")}
    assert names == {e["name"] for e in INDEX}
    assert {e["target"] for e in INDEX} <= {"jws", "cose", "http", "capture", "carriers"}


def test_the_readme_lists_every_vector() -> None:
    """The README's table is written by hand from the index: the two must agree."""
    readme = (FOLDER / "README.md").read_text()
    for entry in INDEX:
        row = (
            f"| [{entry['name']}]({entry['name']}.bin) | {entry['target']} | {entry['rule']} "
            f"| {entry['expect']} | {entry['description']} |"
        )
        assert row in readme, entry["name"]


@pytest.mark.parametrize(
    "entry", [e for e in INDEX if e["target"] == "http"], ids=lambda e: e["name"]
)
def test_http_vectors(vectors_api: Api, entry: dict[str, Any]) -> None:
    for path in ("/api/v1/ingest", "/api/v1/verify"):
        response = vectors_api.post(
            path, octets(entry), content_type=entry["content_type"], role="admin"
        )
        assert response.status_code == 200, response.text[:300]
        body = response.json()
        assert body.get("errors", []) == []
        outcome, reason = entry["expect"].split()[:2]
        assert [(v["outcome"], v["reason"]) for v in body["verdicts"]] == [(outcome, reason)]


@pytest.mark.parametrize(
    "entry", [e for e in INDEX if e["target"] == "jws"], ids=lambda e: e["name"]
)
def test_jws_vectors(entry: dict[str, Any]) -> None:
    with pytest.raises(MalformedError) as refused:
        jws.parse(octets(entry))
    assert refused.value.detail.isprintable()
    targets.jws_element(octets(entry))
