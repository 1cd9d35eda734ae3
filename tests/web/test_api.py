"""The API end to end, on SQLite and PostgreSQL: ingest, then read back hops, dialogs, flags,
elements and metrics; flag actions and their audit log; verify stores nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import cbor2
import pytest
from fastapi.testclient import TestClient
from handoff_context import Form, make_offer
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.exc import IntegrityError, OperationalError

import app.ingest.judge as judge_module
import app.web.api as api_module
from app.ingest.verifying import VerifyOptions, verify_inputs
from app.settings import Settings
from app.store import db
from app.store.queries import list_flags
from app.web.app import create_app
from app.web.service import ServiceConfigError
from tests.conftest import World
from tests.store.builders import (
    DIALOG,
    T0,
    bundle,
    digest,
    jsonl,
    offer,
    rec,
    st,
    status,
    twin,
)
from tests.web.conftest import NOW, Api, start
from tests.web.test_errors import assert_error

LOST_AT = T0 + 6 + 3600 + 1  # past the lost-outcome deadline of ``accepted`` below


def b64(octets: bytes) -> str:
    from handoff_context import digest_text

    return digest_text(digest(octets))


class Scenario:
    """planner -> coder -> tester (a chain), a split the two receivers saw apart, and an
    accepted hop that never finishes."""

    def __init__(self, w: World) -> None:
        self.p = offer(w.planner, w.coder, iat=T0)
        self.q = offer(w.coder, w.tester, iat=T0 + 2, prev=digest(self.p))
        self.x1 = offer(w.planner, w.coder, iat=T0 + 3, dialog="ctx-split")
        self.x2 = twin(w.planner, self.x1, aud=w.tester.iss)
        self.lost = offer(w.assistant, w.planner, iat=T0 + 4, dialog="ctx-lost")
        self.records = [
            rec(bundle(self.p), T0 + 1, w.coder.iss),
            rec(st(status(w.coder, self.p, "accepted", iat=T0 + 1)), T0 + 2),
            rec(bundle(self.q, self.p), T0 + 3, w.tester.iss),
            rec(st(status(w.tester, self.q, "completed", iat=T0 + 8)), T0 + 9),
            rec(bundle(self.x1), T0 + 4, w.coder.iss),
            rec(bundle(self.x2), T0 + 5, w.tester.iss),
            rec(bundle(self.lost), T0 + 5, w.planner.iss),
            rec(st(status(w.planner, self.lost, "accepted", iat=T0 + 6)), T0 + 6),
        ]


@pytest.fixture
def loaded(api: Api, world: World) -> tuple[Api, Scenario]:
    return _load(api, world)


def _load(api: Api, world: World) -> tuple[Api, Scenario]:
    s = Scenario(world)
    response = api.post("/api/v1/ingest", jsonl(s.records), role="ingest")
    assert response.status_code == 200, response.text
    return api, s


def test_ingest_answers_the_spec_11_verdicts_and_counts(api: Api, world: World) -> None:
    s = Scenario(world)
    body = jsonl(s.records)
    response = api.post("/api/v1/ingest", body, role="ingest")
    assert response.status_code == 200
    answer = response.json()
    assert set(answer) == {
        "verdicts",
        "verdicts_omitted",
        "counts",
        "errors",
        "envelope_errors",
        "stored",
        "not_stored_from",
    }
    assert (answer["stored"], answer["not_stored_from"], answer["verdicts_omitted"]) == (
        True,
        None,
        0,
    )
    assert [v["outcome"] for v in answer["verdicts"]] == ["accept"] * 5 + ["reject"] + [
        "accept"
    ] * 2
    assert answer["verdicts"][5]["reason"] == "equivocation"
    assert answer["verdicts"][5]["equivocation"] == {"first": b64(s.x1), "variant": "content"}
    assert answer["counts"] == {
        "accept": 7,
        "reject": 1,
        "duplicate": 0,
        "pending": 0,
        "verdicts": 8,
        "errors": 0,
        "skipped": 0,
        "stored": 8,  # the refused twin too: kept as evidence
        "envelopes": 0,
        "envelope_errors": 0,
        "redelivered": 0,  # no record repeated an observation id
    }
    assert answer["errors"] == answer["envelope_errors"] == []
    # The same JSON per element as `verify --json` (profile §11), sources named "request:N".
    expected = verify_inputs([("request", body)], trust=world.trust, options=VerifyOptions(at=NOW))
    assert answer["verdicts"] == [v.to_json() for v in expected.verdicts]
    # Idempotent: the same octets again are retransmissions, and nothing new is stored.
    again = api.post("/api/v1/ingest", body, role="ingest").json()
    assert again["counts"]["stored"] == 0
    assert {v["outcome"] for v in again["verdicts"]} == {"duplicate", "reject"}


def test_hops_can_be_filtered_and_paged(loaded: tuple[Api, Scenario], world: World) -> None:
    api, s = loaded
    page = api.get("/api/v1/hops", role="read").json()
    assert page["next"] is None
    hops = page["hops"]
    assert [h["offer"] for h in hops] == [b64(s.p), b64(s.q), b64(s.x1), b64(s.lost)]
    p = hops[0]
    assert p == {
        "offer": b64(s.p),
        "iss": world.planner.iss,
        "aud": world.coder.iss,
        "hop": p["hop"],
        "dialog": DIALOG,
        "task": None,
        "state": "accepted",
        "a2a_state": "TASK_STATE_WORKING",
        "flags": [],
        "iat": T0,
        "exp": p["exp"],
        "accepted_at": T0 + 2,  # when the status was received
        "terminal_at": None,
    }
    assert hops[2]["flags"] == ["equivocation"]

    def offers(query: str) -> list[str]:
        return [h["offer"] for h in api.get(f"/api/v1/hops?{query}").json()["hops"]]

    assert offers("state=completed") == [b64(s.q)]
    assert offers("flag=equivocation") == [b64(s.x1)]
    assert offers(f"dialog={DIALOG}") == [b64(s.p), b64(s.q)]
    assert offers(f"agent={world.tester.iss}") == [b64(s.q)]
    assert offers(f"since={T0 + 2}&until={T0 + 3}") == [b64(s.q), b64(s.x1)]
    # Keyset pagination walks every hop once, in order.
    walked, cursor = [], None
    while True:
        query = "limit=1" + (f"&cursor={cursor}" if cursor else "")
        page = api.get(f"/api/v1/hops?{query}").json()
        walked += [h["offer"] for h in page["hops"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert walked == [h["offer"] for h in hops]


def test_a_hop_in_detail(loaded: tuple[Api, Scenario], world: World) -> None:
    api, s = loaded
    detail = api.get(f"/api/v1/hops/{b64(s.q)}", role="read").json()
    assert (detail["offer"], detail["state"]) == (b64(s.q), "completed")
    assert [(e["type"], e["state"], e["iss"]) for e in detail["elements"]] == [
        ("offer", None, world.coder.iss),
        ("status", "completed", world.tester.iss),
    ]
    assert detail["flag_details"] == []
    # Either offer of a split finds the hop; the flag is there with its evidence.
    for twin_offer in (s.x1, s.x2):
        split = api.get(f"/api/v1/hops/{b64(twin_offer)}").json()
        assert split["offer"] == b64(s.x1)
        assert len(split["elements"]) == 2
        [flag] = split["flag_details"]
        assert (flag["kind"], flag["variant"], flag["severity"]) == (
            "equivocation",
            "content",
            "critical",
        )
        assert sorted(flag["evidence"]) == sorted([b64(s.x1), b64(s.x2)])


def test_dialogs_and_their_trees(loaded: tuple[Api, Scenario]) -> None:
    api, s = loaded
    listing = api.get("/api/v1/dialogs").json()
    assert [(d["dialog"], d["hops"]) for d in listing["dialogs"]] == [
        (DIALOG, 2),
        ("ctx-lost", 1),
        ("ctx-split", 1),
    ]
    first = api.get("/api/v1/dialogs?limit=2").json()
    rest = api.get(f"/api/v1/dialogs?limit=2&cursor={first['next']}").json()
    assert [d["dialog"] for d in first["dialogs"] + rest["dialogs"]] == [
        d["dialog"] for d in listing["dialogs"]
    ]
    assert rest["next"] is None
    tree = api.get(f"/api/v1/dialogs/{DIALOG}").json()
    assert tree["dialog"] == DIALOG
    assert tree["roots"] == [b64(s.p)]
    nodes = {n["offer"]: n for n in tree["nodes"]}
    assert (nodes[b64(s.p)]["parent"], nodes[b64(s.p)]["children"]) == (None, [b64(s.q)])
    assert (nodes[b64(s.q)]["parent"], nodes[b64(s.q)]["children"]) == (b64(s.p), [])


def test_agents(loaded: tuple[Api, Scenario], world: World) -> None:
    api, _ = loaded
    agents = {a["agent"]: a for a in api.get("/api/v1/agents").json()["agents"]}
    assert agents[world.planner.iss] == {
        "agent": world.planner.iss,
        "issued": 2,
        "received": 1,
        "trusted": True,
    }
    assert set(agents) == {
        w.iss for w in (world.assistant, world.planner, world.coder, world.tester)
    }


def test_flag_actions_are_recorded_with_who_and_when(loaded: tuple[Api, Scenario]) -> None:
    api, s = loaded
    [flag] = api.get("/api/v1/flags?kind=equivocation", role="read").json()["flags"]
    assert (flag["status"], flag["offer"], flag["assignee"]) == ("open", b64(s.x1), None)
    path = f"/api/v1/flags/{flag['id']}"

    api.clock.now = NOW + 1
    done = api.patch(
        path, {"action": "acknowledge", "note": "paging the planner team"}, role="operator"
    )
    assert done.status_code == 200, done.text
    assert (done.json()["status"], done.json()["note"]) == (
        "acknowledged",
        "paging the planner team",
    )
    api.clock.now = NOW + 2
    assert api.patch(path, {"action": "assign", "assignee": "alice"}).json()["assignee"] == "alice"
    api.clock.now = NOW + 3
    snoozed = api.patch(path, {"action": "snooze", "snoozed_until": NOW + 60}, role="operator")
    assert (snoozed.json()["status"], snoozed.json()["snoozed_until"]) == ("snoozed", NOW + 60)
    past = api.patch(path, {"action": "snooze", "snoozed_until": NOW}, role="operator")
    assert_error(past, 422, "invalid-action")
    assert_error(api.patch(path, {"action": "resolve"}), 422, "invalid-request")
    assert api.get("/api/v1/flags?status=snoozed").json()["flags"][0]["id"] == flag["id"]
    api.clock.now = NOW + 61  # the snooze runs out
    assert api.get(path).json()["status"] == "open"
    resolved = api.patch(path, {"action": "resolve", "note": "keys rotated"}, role="operator")
    assert resolved.json()["status"] == "resolved"
    assert api.get("/api/v1/flags?status=open").json()["flags"] == []
    log = [(a["actor"], a["at"], a["action"], a["note"]) for a in api.get(path).json()["actions"]]
    assert log == [
        ("token:operator-token", NOW + 1, "acknowledge", "paging the planner team"),
        ("token:admin-token", NOW + 2, "assign", None),
        ("token:operator-token", NOW + 3, "snooze", None),
        ("token:operator-token", NOW + 61, "resolve", "keys rotated"),
    ]
    assert_error(api.patch("/api/v1/flags/999999", {"action": "acknowledge"}), 404, "not-found")


def test_a_lost_outcome_appears_when_the_clock_passes_its_deadline(
    loaded: tuple[Api, Scenario],
) -> None:
    api, s = loaded
    assert api.get("/api/v1/flags?kind=lost-outcome").json()["flags"] == []
    api.clock.now = LOST_AT  # no new element: the query's sweep applies the clock
    flags = api.get("/api/v1/flags?kind=lost-outcome").json()["flags"]
    assert sorted(f["offer"] for f in flags) == sorted([b64(s.p), b64(s.lost)])
    hop = api.get(f"/api/v1/hops/{b64(s.lost)}").json()
    assert hop["flags"] == ["lost-outcome"]


@contextmanager
def write_lock_held_elsewhere(service: Any) -> Iterator[None]:
    """Another thread holds the database's write lock (an ingest at work) for the block."""
    held, release = threading.Event(), threading.Event()

    def writer() -> None:
        with db.transaction(service.engine):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    assert held.wait(30)
    try:
        yield
    finally:
        release.set()
        thread.join()


def test_a_query_does_not_queue_behind_a_writer_for_its_sweep(
    sqlite_api: Api, world: World
) -> None:
    """SQLite only: PostgreSQL has no database-wide write lock to queue behind."""
    api, s = _load(sqlite_api, world)
    service = api.app.state.service
    with write_lock_held_elsewhere(service):
        # Nothing due: the read-only check says so, and even the background sweep (which
        # waits for the lock when it has work) returns without writing.
        assert service.sweep(force=True) == 0
        api.clock.now = LOST_AT
        # Due, but the lock is taken: the query reads the last sweep's answers.
        assert api.get("/api/v1/flags?kind=lost-outcome").json()["flags"] == []
    flags = api.get("/api/v1/flags?kind=lost-outcome").json()["flags"]
    assert sorted(f["offer"] for f in flags) == sorted([b64(s.p), b64(s.lost)])


def test_the_background_sweep_applies_the_clock_without_a_query(
    loaded: tuple[Api, Scenario],
) -> None:
    api, _ = loaded
    service = api.app.state.service
    api.clock.now = LOST_AT
    assert service.sweep(force=True) >= 1
    with service.reading() as session:
        kinds = [f.flag.kind for f in list_flags(session, now=LOST_AT)]
    assert kinds == ["equivocation", "lost-outcome", "lost-outcome"]


def test_element_octets_come_back_byte_for_byte(api: Api, world: World) -> None:
    jws = offer(world.planner, world.coder)
    cose = make_offer(world.coder, aud=world.tester.iss, dialog=DIALOG, iat=T0, form=Form.COSE)
    assert api.post("/api/v1/ingest", jsonl([rec(bundle(jws), T0 + 1)])).status_code == 200
    cbor_body = cbor2.dumps({"offer": cose})
    response = api.post("/api/v1/ingest", cbor_body, content_type="application/cbor")
    assert [v["form"] for v in response.json()["verdicts"]] == ["cose"]
    for octets, media_type in ((jws, "application/jose"), (cose, "application/cose")):
        got = api.get(f"/api/v1/elements/{b64(octets)}", role="read")
        assert got.status_code == 200
        assert got.content == octets
        assert got.headers["content-type"] == media_type
        assert got.headers["x-content-type-options"] == "nosniff"


def test_verify_stores_nothing(api: Api, world: World) -> None:
    s = Scenario(world)
    body = jsonl(s.records)
    answer = api.post("/api/v1/verify?receiver=x", body, role="operator").json()
    assert set(answer) == {"verdicts", "verdicts_omitted", "counts"}
    assert answer["counts"]["verdicts"] == 8 and answer["verdicts_omitted"] == 0
    assert api.get("/api/v1/hops").json()["hops"] == []
    assert api.get(f"/api/v1/elements/{b64(s.p)}").status_code == 404
    assert scrape(api)[("handoff_trace_observations", ())] == 0
    # Each request starts with an empty replay memory, as `verify` does.
    again = api.post("/api/v1/verify", body, role="ingest").json()
    assert again["counts"]["duplicate"] == 0


def test_freshness_is_judged_at_the_capture_records_receive_time(api: Api, world: World) -> None:
    o = offer(world.planner, world.coder, iat=T0)
    api.clock.now = T0 + 7 * 24 * 3600  # uploaded a week later
    verdict = api.post("/api/v1/ingest", jsonl([rec(bundle(o), T0 + 1)])).json()["verdicts"][0]
    assert verdict["outcome"] == "accept"
    # Without a record's receive time, ``at`` says when; without either, the clock does.
    bare = jsonl([bundle(offer(world.planner, world.coder, iat=T0))])
    judged_at = api.post(f"/api/v1/verify?at={T0 + 1}", bare).json()["verdicts"][0]
    assert judged_at["outcome"] == "accept"
    late = api.post("/api/v1/verify", bare).json()["verdicts"][0]
    assert (late["outcome"], late["reason"]) == ("reject", "stale")


def test_the_receiver_parameter_is_the_audience(api: Api, world: World) -> None:
    body = jsonl([bundle(offer(world.planner, world.coder, iat=T0))])
    wrong = api.post(f"/api/v1/verify?at={T0 + 1}&receiver={world.tester.iss}", body).json()
    assert wrong["verdicts"][0]["reason"] == "wrong-audience"


def test_a_malformed_item_gets_its_verdict_and_the_rest_is_stored(api: Api, world: World) -> None:
    good = offer(world.planner, world.coder)
    body = b'{"received_at": 1, "payload": {"offer": 42}}\n{broken json\n' + jsonl(
        [rec(bundle(good), T0 + 1)]
    )
    answer = api.post("/api/v1/ingest", body).json()
    assert [(v["source"], v["outcome"], v["reason"]) for v in answer["verdicts"]] == [
        ("request:1", "reject", "malformed"),
        ("request:2", "reject", "malformed"),
        ("request:3", "accept", None),
    ]
    assert api.get(f"/api/v1/elements/{b64(good)}").status_code == 200


def test_a_database_error_in_one_item_is_reported_not_a_500(
    api: Api, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A database error that is the item's own (a constraint): the rest goes on, and the
    # answer is 503 since that item was not stored.
    o1, o2 = offer(world.planner, world.coder), offer(world.planner, world.coder)
    real = judge_module.add_observation

    def failing(session: Any, **kw: Any) -> int:
        if kw["source"] == "request:1":
            raise IntegrityError("INSERT INTO observation", {}, Exception("item on fire"))
        return real(session, **kw)

    monkeypatch.setattr(judge_module, "add_observation", failing)
    response = api.post("/api/v1/ingest", jsonl([rec(bundle(o1), T0), rec(bundle(o2), T0)]))
    assert response.status_code == 503 and response.headers["Retry-After"] == "5"
    answer = response.json()
    assert answer["errors"] == [{"source": "request:1", "detail": "database error: item on fire"}]
    assert [v["source"] for v in answer["verdicts"]] == ["request:2"]
    assert (answer["counts"]["errors"], answer["counts"]["stored"]) == (1, 1)
    assert (answer["stored"], answer["not_stored_from"]) == (False, None)
    assert api.get(f"/api/v1/elements/{b64(o1)}").status_code == 404


def test_a_database_that_cannot_be_written_cuts_the_request_short(
    api: Api, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An operational error (an outage, a full disk) is the database's: nothing after the
    # item is tried, and the answer names where to start again.
    o1, o2, o3 = (offer(world.planner, world.coder) for _ in range(3))
    real = judge_module.add_observation

    def failing(session: Any, **kw: Any) -> int:
        if kw["source"] == "request:2":
            raise OperationalError("INSERT INTO observation", {}, Exception("disk on fire"))
        return real(session, **kw)

    monkeypatch.setattr(judge_module, "add_observation", failing)
    records = [rec(bundle(o), T0) for o in (o1, o2, o3)]
    response = api.post("/api/v1/ingest", jsonl(records))
    assert response.status_code == 503 and response.headers["Retry-After"] == "5"
    answer = response.json()
    assert (answer["stored"], answer["not_stored_from"]) == (False, "request:2")
    assert answer["errors"] == [{"source": "request:2", "detail": "database error: disk on fire"}]
    # The batch failed as a whole and its items ran alone: request:1 was stored, request:3
    # never tried.
    assert [v["source"] for v in answer["verdicts"]] == ["request:1"]
    assert api.get(f"/api/v1/elements/{b64(o3)}").status_code == 404


def test_every_capture_content_type(api: Api, world: World) -> None:
    o = offer(world.planner, world.coder)
    record = rec(bundle(o), T0 + 1)
    har = {
        "log": {
            "version": "1.2",
            "creator": {"name": "test", "version": "1"},
            "entries": [
                {
                    "startedDateTime": "2026-10-26T00:00:00Z",
                    "request": {
                        "method": "POST",
                        "url": "http://b.example/a2a",
                        "postData": {"mimeType": "application/json", "text": _json(bundle(o))},
                    },
                    "response": {"status": 200, "content": {"mimeType": "text/plain"}},
                }
            ],
        }
    }
    bodies = {
        "application/json": _json([record]).encode(),
        "application/x-ndjson": jsonl([record]),
        "application/cbor": cbor2.dumps(bundle(o)),
        "application/har+json; charset=utf-8": _json(har).encode(),
    }
    for content_type, body in bodies.items():
        answer = api.post(f"/api/v1/verify?at={T0 + 1}", body, content_type=content_type).json()
        assert [v["digest"] for v in answer["verdicts"]] == [b64(o)], content_type


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def scrape(api: Api, role: str = "read") -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a metrics scrape, by name and sorted labels."""
    response = api.get("/api/v1/metrics", role=role)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert response.text.endswith("\n")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def test_metrics_in_the_prometheus_text_format(loaded: tuple[Api, Scenario]) -> None:
    api, _ = loaded
    before = scrape(api)
    api.post("/api/v1/verify", b"", role="ingest")
    after = scrape(api)
    for (name, labels), value in {
        ("handoff_trace_elements", (("type", "offer"),)): 5,
        ("handoff_trace_elements", (("type", "status"),)): 3,
        ("handoff_trace_observations", ()): 9,
        ("handoff_trace_verdicts", (("outcome", "accept"),)): 7,
        ("handoff_trace_verdicts", (("outcome", "reject"),)): 1,
        ("handoff_trace_verdicts", (("outcome", "pending"),)): 0,  # zeros are series too
        ("handoff_trace_hops", (("state", "completed"),)): 1,
        ("handoff_trace_flags", (("kind", "equivocation"), ("status", "open"))): 1,
        ("handoff_trace_open_flags", (("kind", "equivocation"), ("severity", "critical"))): 1,
        ("handoff_trace_open_flags", (("kind", "lost-outcome"), ("severity", "high"))): 0,
    }.items():
        assert after[(name, labels)] == value, (name, labels)
    # Counters are the process's own (other tests' apps count too): compare deltas.
    verify = ("handoff_trace_ingest_requests_total", (("route", "verify"), ("status", "200")))
    assert after[verify] - before.get(verify, 0) == 1
    accepted = ("handoff_trace_ingest_items_total", (("outcome", "accept"), ("route", "ingest")))
    assert after[accepted] >= 7
    scraped = (
        "handoff_trace_http_requests_total",
        (("method", "GET"), ("route", "/api/v1/metrics"), ("status", "200")),
    )
    assert after[scraped] - before.get(scraped, 0) == 1
    assert any(name == "process_cpu_seconds_total" for name, _ in after)
    assert any(
        name == "handoff_trace_http_request_duration_seconds_bucket"
        and dict(labels).get("route") == "/api/v1/verify"
        for name, labels in after
    )


def test_metrics_say_how_long_writers_waited_for_and_held_the_sqlite_write_lock(
    sqlite_api: Api, world: World
) -> None:
    """The counters ``app.store.db.observe_write_lock`` feeds, moved by one ingest."""
    names = [
        f"handoff_trace_sqlite_write_{n}_total"
        for n in ("lock_wait_seconds", "lock_held_seconds", "transactions")
    ]
    before = scrape(sqlite_api)
    _load(sqlite_api, world)
    after = scrape(sqlite_api)
    waited, held, transactions = (after[(n, ())] - before[(n, ())] for n in names)
    assert transactions >= 1 and held > 0 and waited >= 0


def test_metrics_may_go_without_a_token(databases: Any, trust_file: Any) -> None:
    for api in start(databases.new("sqlite"), trust_file, metrics_require_token=False):
        assert api.get("/api/v1/metrics", role=None).status_code == 200
    for api in start(databases.new("sqlite"), trust_file):
        assert api.get("/api/v1/metrics", role=None).status_code == 401


def test_the_service_sweeps_on_its_own(databases: Any, trust_file: Any, world: World) -> None:
    running = start(databases.new("sqlite"), trust_file, sweep_seconds=1)
    api = next(running)
    try:
        s = Scenario(world)
        assert api.post("/api/v1/ingest", jsonl(s.records)).status_code == 200
        service = api.app.state.service
        api.clock.now = LOST_AT
        deadline = time.monotonic() + 10
        while True:
            # Read the store directly: an API query would sweep by itself.
            with service.reading() as session:
                kinds = [f.flag.kind for f in list_flags(session, now=LOST_AT)]
            if "lost-outcome" in kinds or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert kinds.count("lost-outcome") == 2
    finally:
        running.close()


@pytest.mark.parametrize("trust", [None, "missing.json"])
def test_the_service_fails_closed_without_a_usable_trust_file(
    tmp_path: Any, trust: str | None
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
        trust_file=None if trust is None else tmp_path / trust,
    )
    with pytest.raises(ServiceConfigError), TestClient(create_app(settings)):
        pass


def test_a_worker_runs_its_json_ingests_in_turns_and_one_more_waits(
    sqlite_api: Api, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20: the batch that holds the write lock shares its worker's GIL with no more
    than ``INGESTS_PER_WORKER`` - 1 other ingests (app.web.api); one more waits, then is
    answered as usual."""
    turns = api_module.INGESTS_PER_WORKER
    state = {"asked": 0, "active": 0, "most": 0}
    changed = threading.Condition()
    release = threading.Event()

    class Turns(threading.BoundedSemaphore):
        def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
            with changed:
                state["asked"] += 1
                changed.notify_all()
            return super().acquire(blocking, timeout)

        def __enter__(self) -> bool:
            return self.acquire()

    real = api_module.ingest

    def ingest(*args: Any, **kw: Any) -> Any:
        with changed:
            state["active"] += 1
            state["most"] = max(state["most"], state["active"])
            changed.notify_all()
        try:
            assert release.wait(60)
            return real(*args, **kw)
        finally:
            with changed:
                state["active"] -= 1

    monkeypatch.setattr(api_module, "_INGESTS", Turns(turns))
    monkeypatch.setattr(api_module, "ingest", ingest)
    bodies = [
        jsonl([rec(bundle(offer(world.planner, world.coder)), T0 + 1)]) for _ in range(turns + 1)
    ]
    statuses: list[int] = []

    def post(body: bytes) -> None:
        statuses.append(sqlite_api.post("/api/v1/ingest", body, role="ingest").status_code)

    threads = [threading.Thread(target=post, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    try:
        with changed:
            # All asked for a turn; as many as there are turns run, one more waits.
            seen = changed.wait_for(
                lambda: state["asked"] == turns + 1 and state["active"] == turns, 60
            )
            assert seen, state
    finally:
        release.set()
        for thread in threads:
            thread.join()
    assert statuses == [200] * (turns + 1)
    assert state["most"] == turns
