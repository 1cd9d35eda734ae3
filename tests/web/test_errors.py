"""Every error the API answers has one shape,
``{"error": {"code", "message", "request_id"[, "details"]}}``
(STYLE habit 2): pinned here for each kind of error, including the last-resort 500."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from tests.web.conftest import Api, start


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["error"]
    error = body["error"]
    assert set(error) <= {"code", "message", "request_id", "details"}
    assert error["request_id"] == response.headers["x-request-id"]
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in response.text
    return error


@pytest.fixture
def small(databases: Any, trust_file: Path) -> Iterator[Api]:
    """The service with the smallest request limit the settings allow (1 KiB)."""
    yield from start(
        databases.new("sqlite"), trust_file, max_request_bytes=1024, max_element_bytes=1024
    )


def test_the_error_shape_is_pinned(sqlite_api: Api) -> None:
    sent = {"X-Request-ID": "client-id-42"}
    response = sqlite_api.get("/api/v1/hops?limit=0", headers=sent)
    error = assert_error(response, 422, "invalid-request")
    assert error.pop("request_id") == "client-id-42"  # the client's own id, echoed
    assert error == {
        "code": "invalid-request",
        "message": "query.limit: Input should be greater than or equal to 1",
        "details": [
            {"loc": ["query", "limit"], "message": "Input should be greater than or equal to 1"}
        ],
    }
    error = assert_error(sqlite_api.get("/api/v1/flags/999"), 404, "not-found")
    assert len(error.pop("request_id")) == 16  # none sent, so one was made
    assert error == {"code": "not-found", "message": "no flag 999"}


@pytest.mark.parametrize(
    ("method", "path", "role", "status", "code"),
    [
        ("GET", "/api/v1/no-such-route", "admin", 404, "not-found"),
        ("GET", "/no-such-route", None, 404, "not-found"),
        ("DELETE", "/api/v1/hops", "admin", 405, "method-not-allowed"),
        ("GET", "/api/v1/hops", None, 401, "unauthorized"),
        ("GET", "/api/v1/hops", "ingest", 403, "forbidden"),
        ("GET", "/api/v1/hops?limit=501", "admin", 422, "invalid-request"),
        ("GET", "/api/v1/hops?state=lost", "admin", 422, "invalid-request"),
        ("GET", "/api/v1/hops?state=offered&state=accepted", "admin", 422, "invalid-request"),
        ("GET", "/api/v1/cases?q=a&q=b", "admin", 422, "invalid-request"),
        ("GET", "/api/v1/hops?cursor=bm9wZQ", "admin", 400, "bad-cursor"),
        ("GET", "/api/v1/hops?cursor=%%%", "admin", 400, "bad-cursor"),
        ("GET", "/api/v1/flags?cursor=WyJ4Il0", "admin", 400, "bad-cursor"),
        ("GET", "/api/v1/hops/short", "admin", 422, "invalid-request"),
        # 43 characters of base64url whose last one has unused bits set: not canonical.
        ("GET", "/api/v1/elements/" + "A" * 42 + "B", "admin", 422, "invalid-request"),
        ("GET", "/api/v1/elements/" + "A" * 43, "admin", 404, "not-found"),
        ("GET", "/api/v1/hops/" + "A" * 43, "admin", 404, "not-found"),
        ("GET", "/api/v1/dialogs/nothing-here", "admin", 404, "not-found"),
        ("GET", "/api/v1/flags/0", "admin", 422, "invalid-request"),
        ("GET", "/api/v1/flags/x", "admin", 422, "invalid-request"),
    ],
)
def test_each_kind_of_error_has_the_shape(
    sqlite_api: Api, method: str, path: str, role: str | None, status: int, code: str
) -> None:
    response = sqlite_api.client.request(method, path, headers=sqlite_api.auth(role))
    assert_error(response, status, code)


def test_405_says_what_is_allowed(sqlite_api: Api) -> None:
    response = sqlite_api.client.delete("/api/v1/hops", headers=sqlite_api.auth("admin"))
    assert_error(response, 405, "method-not-allowed")
    assert response.headers["allow"] == "GET, HEAD"
    # Every method the resource serves, not only those of the first route matched.
    response = sqlite_api.client.put("/api/v1/flags/1", headers=sqlite_api.auth("admin"))
    assert response.headers["allow"] == "GET, HEAD, PATCH"


def test_bad_bodies_and_parameters(sqlite_api: Api) -> None:
    patch = sqlite_api.patch("/api/v1/flags/1", {"action": "explode"})
    error = assert_error(patch, 422, "invalid-request")
    assert error["details"][0]["loc"] == ["body", "action"]
    patch = sqlite_api.client.patch(
        "/api/v1/flags/1",
        content=b"{not json",
        headers={**sqlite_api.auth("admin"), "Content-Type": "application/json"},
    )
    assert_error(patch, 422, "invalid-request")
    assert_error(sqlite_api.patch("/api/v1/flags/1", {"action": "resolve"}), 422, "invalid-request")
    assert_error(
        sqlite_api.patch("/api/v1/flags/1", {"action": "acknowledge", "extra": 1}),
        422,
        "invalid-request",
    )
    # Profile §12 parameters are checked, and unknown ones refused rather than ignored.
    for query in ("skew=-1", "max_chain=0", "ref_policy=sometimes", "at=-5", "recever=x"):
        response = sqlite_api.post(f"/api/v1/verify?{query}", b"")
        assert_error(response, 422, "invalid-request")


def test_unsupported_content_type_is_415(sqlite_api: Api) -> None:
    for content_type in ("text/plain", "application/xml", "multipart/form-data; boundary=x"):
        for route in ("ingest", "verify"):
            response = sqlite_api.post(f"/api/v1/{route}", b"{}", content_type=content_type)
            error = assert_error(response, 415, "unsupported-media-type")
            assert "application/x-ndjson" in error["message"]
    response = sqlite_api.client.post(
        "/api/v1/ingest", content=b"{}", headers=sqlite_api.auth("admin")
    )
    assert_error(response, 415, "unsupported-media-type")


def test_a_body_over_the_limit_is_413_before_it_is_read(small: Api) -> None:
    body = b"[" + b" " * 2000 + b"]"
    for route in ("ingest", "verify"):
        assert_error(small.post(f"/api/v1/{route}", body), 413, "payload-too-large")
    # Before authentication too: nothing of the body is read, whoever sends it.
    assert_error(small.post("/api/v1/ingest", body, role=None), 413, "payload-too-large")
    assert_error(small.patch("/api/v1/flags/1", {"note": "x" * 2000}), 413, "payload-too-large")
    # Exactly at the limit is fine (and an empty JSON array holds no element).
    at_limit = b"[" + b" " * 1022 + b"]"
    response = small.post("/api/v1/ingest", at_limit, content_type="application/json")
    assert response.status_code == 200, response.text


def test_a_chunked_body_is_counted_as_it_arrives(small: Api) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(10):
            yield b" " * 300

    for route in ("ingest", "verify"):
        response = small.client.post(
            f"/api/v1/{route}",
            content=chunks(),
            headers={**small.auth("admin"), "Content-Type": "application/json"},
        )
        assert "content-length" not in response.request.headers
        assert_error(response, 413, "payload-too-large")


def test_a_bad_content_length_is_400(small: Api) -> None:
    response = small.client.post(
        "/api/v1/ingest",
        content=b"[]",
        headers={**small.auth("admin"), "Content-Type": "application/json", "Content-Length": "x"},
    )
    assert_error(response, 400, "bad-request")


def test_an_unexpected_error_is_a_logged_500_without_a_traceback(
    sqlite_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    def boom() -> None:
        raise RuntimeError("secret internals")

    sqlite_api.app.add_api_route("/api/v1/boom", boom)
    with caplog.at_level(logging.ERROR, logger="handoff_trace.web"):
        response = sqlite_api.get("/api/v1/boom")
    error = assert_error(response, 500, "internal-error")
    assert error.pop("request_id") == response.headers["x-request-id"]
    assert error == {"code": "internal-error", "message": "internal error (logged)"}
    assert "secret" not in response.text
    assert any("secret internals" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


def test_a_database_that_does_not_answer_is_503(
    sqlite_api: Api, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service = sqlite_api.app.state.service
    working = service.engine
    # A file where a directory should be: SQLite cannot open it.
    (tmp_path / "file").write_text("")
    service.engine = create_engine(f"sqlite:///{tmp_path / 'file' / 'db.sqlite'}")
    try:
        with caplog.at_level(logging.WARNING, logger="handoff_trace.web"):
            assert_error(sqlite_api.get("/api/v1/hops"), 503, "unavailable")
            assert_error(sqlite_api.get("/api/v1/readyz", role=None), 503, "not-ready")
        # Liveness does not depend on the database.
        assert sqlite_api.get("/api/v1/healthz", role=None).json() == {"status": "ok"}
    finally:
        service.engine.dispose()
        service.engine = working
