"""The ingest and verify endpoints under generated capture bodies (issue 6, fuzzing): never
a 5xx, always the documented shape. fuzz/targets.py holds the property (``make fuzz`` runs
it for minutes under atheris); here it runs bounded and derandomized against the real app
on SQLite, with the vectors' trust file and clock so that seeds from the vectors get past
the signature and freshness checks and reach the store.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import mutated

from fuzz import seeds, targets
from tests.databases import Databases
from tests.test_capture_properties import WRAPPED, tree_edited
from tests.web.conftest import Api, start

HTTP = settings(
    deadline=None, derandomize=True, max_examples=40, suppress_health_check=list(HealthCheck)
)
CAPTURES = list(seeds.captures())


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def vectors_api(request: pytest.FixtureRequest, databases: Databases) -> Iterator[Api]:
    for api in start(databases.new(request.param), targets.VECTORS / "trust.json"):
        api.clock.now = targets.AT
        yield api


def poster(api: Api) -> targets.Post:
    def post(path: str, body: bytes, content_type: str | None, role: str) -> Any:
        headers = {} if content_type is None else {"Content-Type": content_type}
        return api.client.post(path, content=body, headers={**api.auth(role), **headers})

    return post


def test_the_seeds_reach_the_store(vectors_api: Api) -> None:
    """The vectors' captures are accepted as such (so the fuzzing below starts deep)."""
    post = poster(vectors_api)
    accepted = 0
    for content_type, body in CAPTURES:
        if content_type == "application/x-ndjson":
            response = post("/api/v1/ingest", body, content_type, "ingest")
            assert response.status_code == 200
            accepted += response.json()["counts"]["accept"]
    assert accepted >= 20


@HTTP
@given(data=st.binary(max_size=400), content_type=st.sampled_from(targets.CONTENT_TYPES))
def test_random_bodies(vectors_api: Api, data: bytes, content_type: str | None) -> None:
    targets.http_capture(data, content_type, poster(vectors_api))


@HTTP
@given(capture=st.sampled_from(CAPTURES), data=st.data())
def test_mutated_captures(vectors_api: Api, capture: tuple[str | None, bytes], data: Any) -> None:
    content_type, body = capture
    edited = data.draw(mutated(body), label="capture")
    targets.http_capture(edited, content_type, poster(vectors_api))


@HTTP
@given(st.lists(st.sampled_from(WRAPPED).flatmap(tree_edited), min_size=1, max_size=3))
def test_edited_payloads(vectors_api: Api, values: list[Any]) -> None:
    try:
        body = "".join(json.dumps(v) + "\n" for v in values).encode()
    except (TypeError, ValueError):
        return  # bytes inside: not JSON
    targets.http_capture(body, "application/x-ndjson", poster(vectors_api))


OTLP = [seed for seed in seeds.seeds("otlp") if seed[0] in (0, 1, 2)]  # protobuf, JSON, gzip


def otlp_poster(api: Api) -> targets.OtlpPost:
    def post(body: bytes, headers: dict[str, str]) -> Any:
        return api.client.post(
            "/v1/traces", content=body, headers={**api.auth("ingest"), **headers}
        )

    return post


def test_the_otlp_seeds_reach_the_store(vectors_api: Api) -> None:
    """The OTLP seeds carry the vectors' elements to the pipeline through ``/v1/traces``."""
    post = otlp_poster(vectors_api)
    judged = 0
    for seed in OTLP[:60]:
        shape, body = targets.pick(seed, targets.OTLP_SHAPES)
        response = post(
            gzip.compress(body) if shape[2] else body,
            {"Content-Type": shape[0]} | ({"Content-Encoding": "gzip"} if shape[1] else {}),
        )
        assert response.status_code in (200, 400), response.text
        judged += response.status_code == 200
    assert judged >= 20


@HTTP
@given(seed=st.sampled_from(OTLP), data=st.data())
def test_mutated_otlp_requests(vectors_api: Api, seed: bytes, data: Any) -> None:
    """``POST /v1/traces`` with the seeds edited byte by byte: never a 5xx, whatever the
    pipeline makes of the spans that still carry an element."""
    shape, body = targets.pick(seed, targets.OTLP_SHAPES)
    edited = data.draw(mutated(body), label="request")
    targets.http_otlp(edited, shape, otlp_poster(vectors_api))
