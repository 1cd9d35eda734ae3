"""Envelope cases over HTTP on both databases: envelopes ingested through
``POST /api/v1/ingest``, the cases API, case flags in ``/api/v1/flags`` and in the
dashboard's triage queue."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.settings import Settings
from app.store.db import transaction
from app.store.tokens import Role
from app.store.users import create_user
from app.web.app import create_app
from app.web.service import ServiceConfigError
from tests.conftest import T0
from tests.envelope.builders import (
    BILLING,
    CASE,
    TRANSCRIPT,
    TRIAGE,
    envelope,
    event,
    jsonl,
    message_v1,
    record,
    send_v1,
    worked_example,
)
from tests.web.conftest import Api, start

PASSWORD = "a long enough password"


def stale_write_example() -> list[Any]:
    """The worked example, but the case system applied triage's stale retry."""
    return [*worked_example()[:-1], event(TRIAGE, "write", T0 + 90, epoch=3, outcome="applied")]


def test_ingest_counts_envelopes_and_names_their_errors(api: Api) -> None:
    bad = record(send_v1(message_v1(envelope(goal=None, handoff_id="h-bad"))), T0, BILLING)
    response = api.post("/api/v1/ingest", jsonl([*stale_write_example(), bad]), role="ingest")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["counts"]["envelopes"] == 6 and body["counts"]["envelope_errors"] == 1
    [error] = body["envelope_errors"]
    assert error == {
        "source": "request:6",
        "detail": "(envelope): 'goal' is a required property",
    }
    assert body["verdicts"] == [] and body["errors"] == []


def test_the_cases_api(api: Api) -> None:
    api.post("/api/v1/ingest", jsonl(stale_write_example()), role="ingest")
    listing = api.get("/api/v1/cases", role="read")
    assert listing.status_code == 200
    assert listing.json() == {
        "cases": [
            {
                "case_id": CASE,
                "owner": BILLING,
                "epoch": 4,
                "handoffs": 1,
                "open_flags": 1,
                "last_at": T0 + 90,
            }
        ],
        "next_offset": None,
    }
    assert api.get("/api/v1/cases?q=nothing-like-it").json()["cases"] == []
    assert len(api.get("/api/v1/cases?flagged=true").json()["cases"]) == 1
    detail = api.get(f"/api/v1/cases/{CASE}", role="read").json()
    assert [(e["epoch"], e["owner"]) for e in detail["epochs"]] == [(3, TRIAGE), (4, BILLING)]
    assert [e["kind"] for e in detail["events"]] == [
        "write",
        "handoff",
        "accepted",
        "handed-off",
        "write",
    ]
    [env] = detail["envelopes"]
    assert (env["response"], env["epoch"], env["references"][0]["outcome"]) == (
        "accepted",
        3,
        "unverifiable",  # the service holds no objects here
    )
    [flag] = detail["flags"]
    assert (flag["kind"], flag["case_id"], flag["iss"], flag["severity"]) == (
        "two-owners",
        CASE,
        TRIAGE,
        "critical",
    )
    flags = api.get(f"/api/v1/flags?case_id={CASE}").json()["flags"]
    assert [f["id"] for f in flags] == [flag["id"]]
    assert api.get("/api/v1/flags?kind=two-owners").json()["flags"][0]["case_id"] == CASE


def test_an_unknown_case_is_404_and_reading_needs_a_token(api: Api) -> None:
    missing = api.get("/api/v1/cases/no-such-case")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "no such case"
    assert api.get("/api/v1/cases", role=None).status_code == 401


def test_case_ids_with_slashes(api: Api) -> None:
    records = [record(send_v1(message_v1(envelope(case_id="acme/2026/77"))), T0, BILLING)]
    api.post("/api/v1/ingest", jsonl(records), role="ingest")
    assert api.get("/api/v1/cases/acme/2026/77").json()["case_id"] == "acme/2026/77"


def test_the_triage_queue_shows_case_flags(api: Api) -> None:
    api.post("/api/v1/ingest", jsonl(stale_write_example()), role="ingest")
    with transaction(api.engine) as session:
        create_user(session, username="otto", role=Role.OPERATOR, password=PASSWORD, now=T0)
    login = {"username": "otto", "password": PASSWORD, "next": "/"}
    assert api.client.post("/login", data=login, follow_redirects=False).status_code == 303
    queue = api.client.get("/flags")
    assert queue.status_code == 200 and "two-owners" in queue.text
    assert api.client.get("/flags?kind=two-owners").status_code == 200
    flag_id = api.get(f"/api/v1/flags?case_id={CASE}").json()["flags"][0]["id"]
    page = api.client.get(f"/flags/{flag_id}")
    assert page.status_code == 200 and "two-owners" in page.text


def test_the_service_refuses_an_unreadable_objects_directory(
    tmp_path: Any, trust_file: Any
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
        trust_file=trust_file,
        objects_dir=tmp_path / "missing",
    )
    with (
        pytest.raises(ServiceConfigError, match="cannot read HANDOFF_TRACE_OBJECTS_DIR"),
        TestClient(create_app(settings)),
    ):
        pass


def test_the_service_checks_references_against_its_objects_directory(
    databases: Any, trust_file: Any, tmp_path: Any
) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    (objects / "transcript.txt").write_bytes(TRANSCRIPT)
    for api in start(databases.new("sqlite"), trust_file, objects_dir=objects):
        api.post("/api/v1/ingest", jsonl(worked_example()), role="ingest")
        [env] = api.get(f"/api/v1/cases/{CASE}").json()["envelopes"]
        assert [r["outcome"] for r in env["references"]] == ["verified"]
