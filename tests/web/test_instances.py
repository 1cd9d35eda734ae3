"""Three instances on one database (issue 15, "Done when"): three real ``handoff-trace
serve`` processes on one throwaway PostgreSQL, as behind a round-robin balancer.

- the login limit per name holds across them (failures on any count on all);
- a trust-file change reaches all three, and what it re-judges is the same on each;
- the request counters summed over the instances match the requests sent;
- an upload report begun through one instance is read through another.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from handoff_context import digest_text, trust_document
from prometheus_client.parser import text_string_to_metric_families

from app.store.db import make_engine, transaction
from app.store.tokens import Role
from app.store.users import create_user
from tests.conftest import World
from tests.databases import Databases
from tests.store.builders import T0, bundle, digest, jsonl, offer, rec
from tests.web.conftest import make_tokens
from tests.web.test_served import serving

PASSWORD = "a long enough password"
ROLLOUT_SECONDS = 60  # only an instance that never sees the new file waits this long


def write_trust(world: World, path: Path, *, with_alt: bool) -> None:
    doc = trust_document([world.assistant, world.planner, world.coder, world.tester])
    if with_alt:
        doc["issuers"][1]["keys"].append(world.planner_alt.trust_entry()["keys"][0])
    path.write_text(json.dumps(doc))


@pytest.fixture
def three(
    databases: Databases, world: World, tmp_path: Path
) -> Iterator[tuple[list[str], str, Path]]:
    """The three instances' base URLs, an admin token and the trust file they share."""
    url = databases.new("postgresql")
    engine = make_engine(url)
    try:
        token = make_tokens(engine)["admin"]
        with transaction(engine) as session:
            for name in ("ada", "otto"):
                create_user(session, username=name, role=Role.ADMIN, password=PASSWORD, now=T0)
    finally:
        engine.dispose()
    trust = tmp_path / "trust.json"
    write_trust(world, trust, with_alt=False)
    with contextlib.ExitStack() as stack:
        bases = [stack.enter_context(serving(url, trust, tmp_path)) for _ in range(3)]
        yield bases, token, trust


def login(base: str, name: str, password: str, client: httpx.Client | None = None) -> Any:
    form = {"username": name, "password": password, "next": "/"}
    if client is not None:
        return client.post(f"{base}/login", data=form, follow_redirects=False)
    return httpx.post(f"{base}/login", data=form, follow_redirects=False)


def counter(base: str, token: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{base}/api/v1/metrics", headers={"Authorization": f"Bearer {token}"}).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def test_three_instances_share_what_matters(
    three: tuple[list[str], str, Path], world: World
) -> None:
    bases, token, trust = three
    auth = {"Authorization": f"Bearer {token}"}

    # --- the login limit holds across the instances (5 failures per name by default)
    for i in range(5):
        assert login(bases[i % 3], "otto", "not the password!!").status_code == 401
    for base in bases:
        refused = login(base, "otto", PASSWORD)
        assert refused.status_code == 429, base
        assert int(refused.headers["retry-after"]) > 0

    # --- an upload report begun on one instance is read through another
    with httpx.Client() as browser:
        assert login(bases[0], "ada", PASSWORD, browser).status_code == 303
        page = browser.get(f"{bases[0]}/upload").text
        csrf = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
        assert csrf
        capture = jsonl([rec(bundle(offer(world.planner, world.coder)), T0 + 1)])
        answer = browser.post(
            f"{bases[0]}/upload",
            data={"mode": "verify", "csrf": csrf.group(1)},
            files={"file": ("capture.jsonl", capture, "application/octet-stream")},
        )
        assert answer.status_code == 200, answer.text[:300]
        link = re.search(r'href="(/upload/reports/[^"]+\.json)"', answer.text)
        assert link
        report = browser.get(f"{bases[1]}{link.group(1)}")
        assert report.status_code == 200, report.text[:300]
        assert report.json()["counts"]["verdicts"] == 1

    # --- the counters summed over the instances match the requests sent
    key = ("handoff_trace_ingest_requests_total", {"route": "verify", "status": "200"})
    before = sum(counter(b, token, key[0], **key[1]) for b in bases)
    sent = {bases[0]: 3, bases[1]: 4, bases[2]: 5}
    for base, n in sent.items():
        for _ in range(n):
            verified = httpx.post(
                f"{base}/api/v1/verify",
                content=capture,
                headers={**auth, "Content-Type": "application/x-ndjson"},
            )
            assert verified.status_code == 200
    after = sum(counter(b, token, key[0], **key[1]) for b in bases)
    assert after - before == sum(sent.values())

    # --- a trust-file change reaches all three, and re-judges the same on each
    rolled = offer(world.planner_alt, world.coder)  # the planner's new key, not yet trusted
    ingested = httpx.post(
        f"{bases[2]}/api/v1/ingest",
        content=jsonl([rec(bundle(rolled), T0 + 1)]),
        headers={**auth, "Content-Type": "application/x-ndjson"},
    ).json()
    assert ingested["verdicts"][0]["reason"] == "bad-signature"
    old = {httpx.get(f"{b}/api/v1/readyz").json()["trust_fingerprint"] for b in bases}
    assert len(old) == 1
    write_trust(world, trust, with_alt=True)
    deadline = time.monotonic() + ROLLOUT_SECONDS
    while True:
        seen = {httpx.get(f"{b}/api/v1/readyz").json()["trust_fingerprint"] for b in bases}
        flags = [_rejected_flags(b, auth) for b in bases]
        same = len(seen) == 1 and seen != old and all(f == flags[0] for f in flags)
        if same and flags[0] and all(f["status"] == "resolved" for f in flags[0]):
            break
        assert time.monotonic() < deadline, (seen, flags)
        time.sleep(0.2)  # polling for the rollout to reach every instance
    # Each instance now accepts what the new key signs, and all report one store.
    for base in bases:
        again = httpx.post(
            f"{base}/api/v1/verify",
            content=jsonl([rec(bundle(rolled), T0 + 1)]),
            headers={**auth, "Content-Type": "application/x-ndjson"},
        ).json()
        assert again["verdicts"][0]["outcome"] == "accept", base
    hop = [
        httpx.get(f"{b}/api/v1/flags", params={"kind": "rejected-element"}, headers=auth).json()
        for b in bases
    ]
    assert hop[0] == hop[1] == hop[2]
    octets = httpx.get(f"{bases[0]}/api/v1/elements/{digest_text(digest(rolled))}", headers=auth)
    assert octets.status_code == 200 and octets.content == rolled


def _rejected_flags(base: str, auth: dict[str, str]) -> list[dict[str, Any]]:
    answer = httpx.get(f"{base}/api/v1/flags", params={"kind": "rejected-element"}, headers=auth)
    assert answer.status_code == 200, answer.text[:300]
    flags: list[dict[str, Any]] = answer.json()["flags"]
    return flags


def test_two_workers_answer_one_sum(databases: Databases, world: World, tmp_path: Path) -> None:
    """With ``--workers 2`` every scrape of the one port sums both workers' counters (they
    alternated between the workers' own counts before)."""
    url = databases.new("sqlite")
    engine = make_engine(url)
    try:
        token = make_tokens(engine)["admin"]
    finally:
        engine.dispose()
    trust = tmp_path / "trust.json"
    write_trust(world, trust, with_alt=False)
    env = {"HANDOFF_TRACE_WORKERS": "2"}
    with serving(url, trust, tmp_path, env=env) as base:
        auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
        capture = jsonl([rec(bundle(offer(world.planner, world.coder)), T0 + 1)])
        labels = {"route": "verify", "status": "200"}
        name = "handoff_trace_ingest_requests_total"
        before = counter(base, token, name, **labels)
        for _ in range(10):  # a new connection each time, so both workers take some
            answer = httpx.post(f"{base}/api/v1/verify", content=capture, headers=auth)
            assert answer.status_code == 200
        scrapes = {counter(base, token, name, **labels) - before for _ in range(6)}
    assert scrapes == {10.0}
    [log] = tmp_path.glob("serve-*.log")
    lines = [json.loads(line) for line in log.read_text().splitlines()]  # JSON off a terminal
    workers = {line["message"] for line in lines if line["message"].startswith("Started server")}
    assert len(workers) == 2
