"""Amplification drills (issue 20): a body of one-byte malformed items cannot make a large
answer, a large process or a deaf one.

A real ``handoff-trace serve`` gets a large body (up to what it takes, ``MAX_REQUEST_BYTES``,
8 MiB) of malformed one-byte JSON Lines items on ``/ingest`` and ``/verify``: each item is a
``malformed`` verdict, millions of them. The answer stays under ``ANSWER_BOUND`` (the
documented bound: 1,000 verdicts or 1 MiB of them, 1,000 errors), the server's peak
memory under 500 MB, and ``/healthz`` keeps answering while the work runs. Times are
measured and printed (``-s``), never asserted; BENCHMARKS.md reports them.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import World
from tests.databases import Databases
from tests.live.servers import wait_until
from tests.web.conftest import make_tokens, write_trust
from tests.web.test_served import CLI, _environment, _free_port

ANSWER_BOUND = 2 * 1024 * 1024
PASSWORD = "correct horse battery staple"
MEMORY_BOUND = 500 * 1024 * 1024
# The suite sends 128 KiB (65,536 items; the answer's bounds are reached after the first
# 1,000 and the upload report's after 20,000, so what they show does not depend on the
# size); the drill as the issue states it sends 8 MiB:
# HANDOFF_TRACE_AMPLIFICATION_BYTES=8388608 (minutes on two cores; BENCHMARKS.md).
SIZE = int(os.environ.get("HANDOFF_TRACE_AMPLIFICATION_BYTES", 128 * 1024))


class Served:
    def __init__(self, process: subprocess.Popen[bytes], base: str) -> None:
        self.process, self.base = process, base

    def peak_rss(self) -> int:
        """The process's peak resident memory (VmHWM), in bytes."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def served(
    databases: Databases, world: World, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, str]]:
    """One server for the module's drills (its peak memory is the largest of them all)."""
    tmp_path = tmp_path_factory.mktemp("amplification")
    from app.store import db
    from app.store.db import make_engine
    from app.store.tokens import Role
    from app.store.users import create_user

    url = databases.new("sqlite")
    engine = make_engine(url)
    try:
        token = make_tokens(engine)["ingest"]
        with db.transaction(engine) as session:
            create_user(session, username="otto", role=Role.OPERATOR, password=PASSWORD, now=0)
    finally:
        engine.dispose()
    trust = write_trust(world, tmp_path / "trust.json")
    port = _free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [*CLI, "serve", "--port", str(port), "--db", url, "--trust", str(trust)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_environment(),
        )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert process.poll() is None, (tmp_path / "serve.log").read_text()
        try:
            return httpx.get(f"{base}/api/v1/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, what="handoff-trace serve", timeout=60, interval=0.05)
        yield Served(process, base), token
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Health:
    """``/healthz`` asked again and again while the work runs: every answer and the
    slowest one (for the report, not for an assertion)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.answers: list[int] = []
        self.slowest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                self.answers.append(client.get(f"{self.base}/api/v1/healthz").status_code)
                self.slowest = max(self.slowest, time.monotonic() - started)
                self._stop.wait(0.05)  # a prober's period, not a readiness wait

    def __enter__(self) -> Health:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(120)


def malformed(size: int) -> bytes:
    """One-byte items, one a line: ``x`` is no JSON, so each is a malformed verdict."""
    return b"x\n" * (size // 2)


@pytest.mark.parametrize("route", ["ingest", "verify"])
def test_a_body_of_one_byte_malformed_items_gets_a_bounded_answer(
    served: tuple[Served, str], route: str
) -> None:
    server, token = served
    body = malformed(SIZE)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
    with Health(server.base) as health:
        started = time.monotonic()
        answer = httpx.post(
            f"{server.base}/api/v1/{route}", content=body, headers=headers, timeout=1800
        )
        took = time.monotonic() - started
    assert answer.status_code == 200, answer.text[:500]
    assert len(answer.content) < ANSWER_BOUND
    found = answer.json()
    items = len(body) // 2
    assert found["counts"]["verdicts"] == found["counts"]["reject"] == items
    assert len(found["verdicts"]) + found["verdicts_omitted"] == items
    assert {v["reason"] for v in found["verdicts"]} == {"malformed"}
    assert server.peak_rss() < MEMORY_BOUND
    assert health.answers and set(health.answers) == {200}
    print(
        f"\n{route}: {len(body)} bytes, {items} items in {took:.1f} s; answer "
        f"{len(answer.content)} bytes; peak RSS {server.peak_rss() / 2**20:.0f} MiB; "
        f"/healthz answered {len(health.answers)} times, slowest {health.slowest:.3f} s"
    )


def test_the_upload_page_stays_bounded_for_a_body_of_one_byte_malformed_items(
    served: tuple[Served, str],
) -> None:
    server, _ = served
    body = malformed(min(SIZE, 8 * 1024 * 1024 - 64 * 1024))  # the form needs some room
    with httpx.Client(base_url=server.base, timeout=1800) as client, Health(server.base) as health:
        login = client.post("/login", data={"username": "otto", "password": PASSWORD, "next": "/"})
        assert login.status_code in (200, 303), login.text[:300]
        found = re.search(r'<meta name="csrf-token" content="([^"]+)">', client.get("/upload").text)
        assert found is not None
        started = time.monotonic()
        page = client.post(
            "/upload",
            data={"csrf": found.group(1), "mode": "verify"},
            files={"file": ("tiny.jsonl", body, "application/x-ndjson")},
        )
        took = time.monotonic() - started
        key = re.search(r"/upload/reports/([A-Za-z0-9_-]+)\.json", page.text)
        assert key is not None, "the report is kept"
        report = client.get(f"/upload/reports/{key.group(1)}.json")
    assert page.status_code == 200, page.text[:500]
    assert len(page.content) < ANSWER_BOUND
    items = len(body) // 2
    kept = report.json()
    assert kept["counts"]["verdicts"] == kept["counts"]["reject"] == items
    assert len(kept["verdicts"]) + kept["left_out"] == items
    assert [v["item"] for v in kept["verdicts"][:3]] == [1, 2, 3]
    assert server.peak_rss() < MEMORY_BOUND
    assert health.answers and set(health.answers) == {200}
    print(
        f"\nupload: {len(body)} bytes, {items} items in {took:.1f} s; page "
        f"{len(page.content)} bytes, report {len(report.content)} bytes; peak RSS "
        f"{server.peak_rss() / 2**20:.0f} MiB; /healthz answered {len(health.answers)} times, "
        f"slowest {health.slowest:.3f} s"
    )


def test_ndjson_streams_every_verdict_and_a_summary_line(served: tuple[Served, str]) -> None:
    server, token = served
    body = malformed(4000)
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/x-ndjson",
        "Accept": "application/x-ndjson",
    }
    for route in ("ingest", "verify"):
        lines = []
        with httpx.stream(
            "POST", f"{server.base}/api/v1/{route}", content=body, headers=headers, timeout=120
        ) as answer:
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("application/x-ndjson")
            lines = list(answer.iter_lines())
        *verdicts, last = [httpx.Response(200, content=line).json() for line in lines]
        assert len(verdicts) == 2000 and {v["reason"] for v in verdicts} == {"malformed"}
        assert last["summary"]["counts"]["verdicts"] == 2000
        if route == "ingest":
            assert last["summary"]["stored"] is True
