"""Request ids, request metrics and structured logs (issue 15, items 3 and 5): every
request, a 500 included, is counted by route template and logged as one line with its id,
route, status, duration and principal; one line per ingest carries its counts."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest

from app.web.logs import JsonFormatter, TextFormatter, log_config, use_json
from tests.conftest import World
from tests.store.builders import bundle, jsonl, offer, rec
from tests.web.conftest import Api
from tests.web.test_api import scrape


def records(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger]


def test_one_line_per_request_with_id_route_status_and_principal(
    sqlite_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="handoff_trace.request"):
        response = sqlite_api.get("/api/v1/hops", role="read", headers={"X-Request-ID": "abc-1"})
        anonymous = sqlite_api.get("/api/v1/hops", role=None)
    assert response.headers["x-request-id"] == "abc-1"
    made = anonymous.headers["x-request-id"]
    assert len(made) == 16 and made != "abc-1"
    first, second = records(caplog, "handoff_trace.request")
    assert (first.request_id, first.route, first.status) == ("abc-1", "/api/v1/hops", 200)  # type: ignore[attr-defined]
    assert first.principal == "token:read-token"  # type: ignore[attr-defined]
    assert first.duration_ms >= 0  # type: ignore[attr-defined]
    assert (second.request_id, second.status, second.principal) == (made, 401, None)  # type: ignore[attr-defined]


def test_an_unusable_request_id_is_replaced(sqlite_api: Api) -> None:
    for sent in ("", "a b", "x" * 129, "tab\there"):
        got = sqlite_api.get("/api/v1/healthz", role=None, headers={"X-Request-ID": sent})
        assert got.headers["x-request-id"] != sent and len(got.headers["x-request-id"]) == 16


def test_a_500_is_counted_and_logged(sqlite_api: Api, caplog: pytest.LogCaptureFixture) -> None:
    def boom() -> None:
        raise RuntimeError("internals")

    sqlite_api.app.add_api_route("/api/v1/boom-{n}", boom)
    key = (
        "handoff_trace_http_requests_total",
        (("method", "GET"), ("route", "/api/v1/boom-{n}"), ("status", "500")),
    )
    before = scrape(sqlite_api).get(key, 0)
    with caplog.at_level(logging.INFO, logger="handoff_trace.request"):
        assert sqlite_api.get("/api/v1/boom-1").status_code == 500
        assert sqlite_api.get("/api/v1/boom-2").status_code == 500
    assert scrape(sqlite_api)[key] - before == 2  # one series for the route template
    lines = [r for r in records(caplog, "handoff_trace.request") if r.status == 500]  # type: ignore[attr-defined]
    assert [r.route for r in lines] == ["/api/v1/boom-{n}"] * 2  # type: ignore[attr-defined]


def test_one_line_per_ingest_with_its_counts(
    sqlite_api: Api, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    capture = jsonl([rec(bundle(offer(world.planner, world.coder)), 1)])
    with caplog.at_level(logging.INFO, logger="handoff_trace.ingest"):
        answer = sqlite_api.post("/api/v1/ingest", capture, headers={"X-Request-ID": "ing-7"})
    [line] = records(caplog, "handoff_trace.ingest")
    assert line.request_id == "ing-7"  # type: ignore[attr-defined]
    assert line.counts == answer.json()["counts"]  # type: ignore[attr-defined]


def _record(**extra: Any) -> logging.LogRecord:
    record = logging.makeLogRecord(
        {"name": "handoff_trace.request", "msg": "GET / 200", "levelname": "INFO"}
    )
    record.__dict__.update(extra)
    return record


def test_json_lines_hold_the_event_fields() -> None:
    line = JsonFormatter().format(_record(request_id="r1", status=200, principal=None))
    doc = json.loads(line)
    assert doc["message"] == "GET / 200" and doc["logger"] == "handoff_trace.request"
    assert (doc["request_id"], doc["status"], doc["principal"]) == ("r1", 200, None)
    assert doc["ts"].endswith("Z") and doc["level"] == "info"
    assert "request_id=r1" in TextFormatter().format(_record(request_id="r1"))


def test_json_by_default_off_a_terminal() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert use_json("auto", io.StringIO()) and not use_json("auto", Terminal())
    assert use_json("json", Terminal()) and not use_json("text", io.StringIO())
    config = log_config("warning", "json")
    assert config["handlers"]["default"]["formatter"] == "json"
    assert config["loggers"]["handoff_trace"]["level"] == "WARNING"
