"""The real thing: ``handoff-trace serve`` processes answering over loopback.

- The README's example, step by step: make a token, start the service, ingest the example
  capture with curl, read the hops back.
- Two server processes on one PostgreSQL, many client threads posting the same and
  conflicting elements at once (issue 3, "Done when"): one stored copy of each element,
  one accept per hop, one equivocation flag per split.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from handoff_context import Form, parse_element
from sqlalchemy import select

from app.store.db import make_engine, transaction
from app.store.models import ElementRow, FlagRow, ObservationRow
from tests.conftest import World
from tests.databases import Databases
from tests.store.builders import T0, bundle, digest, jsonl, offer, rec, resign, st, status, twin
from tests.web.conftest import make_tokens

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())"]
STARTUP_SECONDS = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANDOFF_TRACE_")}
    env.pop("DATABASE_URL", None)
    return env


@contextlib.contextmanager
def serving(url: str, trust: Path, logs: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """``handoff-trace serve`` on a free loopback port until the block ends; yields its base
    URL once ``/readyz`` answers. ``env`` adds settings (``HANDOFF_TRACE_*``). The process
    is stopped (killed if need be) in any case."""
    port = _free_port()
    log_path = logs / f"serve-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*CLI, "serve", "--port", str(port), "--db", url, "--trust", str(trust)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=logs,
            env={**_environment(), **(env or {})},
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"serve exited with {process.returncode}:\n{log_path.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/api/v1/readyz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"serve was not ready in {STARTUP_SECONDS} s:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def curl(*args: str) -> tuple[int, str]:
    """curl as the README runs it (httpx doing the same where curl is not installed)."""
    if shutil.which("curl"):
        done = subprocess.run(
            ["curl", "-sS", "-w", "\n%{http_code}", *args],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        )
        body, _, code = done.stdout.rpartition("\n")
        return int(code), body
    headers, data, url = {}, None, ""
    items = iter(args)
    for arg in items:
        if arg == "-H":
            name, _, value = next(items).partition(": ")
            headers[name] = value
        elif arg == "--data-binary":
            data = (REPO / next(items).removeprefix("@")).read_bytes()
        else:
            url = arg
    response = httpx.request(
        "POST" if data is not None else "GET", url, headers=headers, content=data
    )
    return response.status_code, response.text


def test_the_readme_example(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'handoff-trace.db'}"
    made = subprocess.run(
        [*CLI, "tokens", "create", "--role", "admin", "--name", "readme", "--db", url],
        capture_output=True,
        text=True,
        check=True,
        env=_environment(),
    )
    token = made.stdout.splitlines()[-1]
    with serving(url, REPO / "examples" / "trust.json", tmp_path) as base:
        auth = f"Authorization: Bearer {token}"
        code, body = curl(
            "-H",
            auth,
            "-H",
            "Content-Type: application/x-ndjson",
            "--data-binary",
            "@examples/capture.jsonl",
            f"{base}/api/v1/ingest",
        )
        assert code == 200, body
        answer = json.loads(body)
        # examples/README.md: eight accepted, line 6 a retransmission, line 8 pending.
        assert [v["outcome"] for v in answer["verdicts"]] == [
            "accept", "accept", "accept", "accept", "accept",
            "duplicate", "accept", "pending", "accept", "accept",
        ]  # fmt: skip
        code, body = curl("-H", auth, f"{base}/api/v1/hops?state=completed")
        assert code == 200
        assert len(json.loads(body)["hops"]) == 3
        code, body = curl(f"{base}/api/v1/hops")
        assert code == 401 and json.loads(body)["error"]["code"] == "unauthorized"
        code, body = curl(f"{base}/api/v1/healthz")
        assert (code, json.loads(body)) == (200, {"status": "ok"})


# --- many processes, one PostgreSQL ------------------------------------------------------

SERVERS = 2
CLIENTS = 8
SPLITS = 4


def _records(w: World) -> tuple[list[dict[str, Any]], int]:
    """Hops each signed three ways (content splits) seen by different receivers, a
    signature-only split, and a small chain with statuses."""
    records = []
    for i in range(SPLITS):
        first = offer(w.planner, w.coder, iat=T0 + i, dialog=f"ctx-{i}")
        records += [
            rec(bundle(first), T0 + 10 + i, w.coder.iss),
            rec(bundle(twin(w.planner, first, aud=w.tester.iss)), T0 + 11 + i, w.tester.iss),
            rec(bundle(twin(w.planner, first, task=f"task-{i}")), T0 + 12 + i, w.coder.iss),
        ]
    y1 = offer(w.coder, w.tester, iat=T0 + 4)
    records += [rec(bundle(y1), T0 + 5, w.tester.iss), rec(bundle(resign(w.coder, y1)), T0 + 6)]
    p = offer(w.assistant, w.planner, iat=T0)
    q = offer(w.planner, w.coder, iat=T0 + 2, prev=digest(p))
    records += [
        rec(bundle(p), T0 + 1, w.planner.iss),
        rec(bundle(q, p), T0 + 3, w.coder.iss),
        rec(st(status(w.planner, p, "accepted", iat=T0 + 2)), T0 + 2),
        rec(st(status(w.coder, q, "accepted", iat=T0 + 4)), T0 + 4),
        rec(st(status(w.coder, q, "completed", iat=T0 + 9)), T0 + 9),
    ]
    return records, SPLITS + 1


def _elements(records: list[dict[str, Any]]) -> set[bytes]:
    found = set()
    for r in records:
        obj = r["payload"]
        for octets in [obj.get("offer") or obj.get("status"), *obj.get("chain", [])]:
            found.add(parse_element(octets.encode(), Form.JWS).digest)
    return found


def test_two_server_processes_on_one_postgresql(
    databases: Databases, world: World, trust_file: Path, tmp_path: Path
) -> None:
    url = databases.new("postgresql")
    engine = make_engine(url)
    try:
        token = make_tokens(engine)["ingest"]
        records, splits = _records(world)
        with contextlib.ExitStack() as stack:
            bases = [
                stack.enter_context(serving(url, trust_file, tmp_path)) for _ in range(SERVERS)
            ]
            answers = _post_all_at_once(bases, token, records)
        # Every request was answered, every item stored (no item error, no 5xx).
        assert [a["errors"] for a in answers] == [[]] * (CLIENTS * len(records))
        verdicts = [v for a in answers for v in a["verdicts"]]
        # Exactly one accept per offered hop, whichever process and client got there first.
        accepts = Counter(
            (v["iss"], v["hop"])
            for v in verdicts
            if v["element"] == "offer" and v["outcome"] == "accept"
        )
        offered = {(v["iss"], v["hop"]) for v in verdicts if v["element"] == "offer"}
        assert set(accepts) == offered and set(accepts.values()) == {1}
        with transaction(engine) as session:
            stored = list(session.execute(select(ElementRow.digest)).scalars())
            flags = list(
                session.execute(select(FlagRow).where(FlagRow.kind == "equivocation")).scalars()
            )
            receipts = Counter(
                session.execute(
                    select(ObservationRow.digest).where(ObservationRow.via.is_(None))
                ).scalars()
            )
        # One stored copy of each element; every client's receipt of each kept.
        assert sorted(stored) == sorted(_elements(records))
        top = [
            parse_element(
                (r["payload"].get("offer") or r["payload"]["status"]).encode(), Form.JWS
            ).digest
            for r in records
        ]
        assert receipts == Counter({d: CLIENTS for d in top})
        # One equivocation flag per split, with every variant as evidence.
        assert len(flags) == splits
        assert len({(f.iss, f.hop) for f in flags}) == splits
        assert sorted(len(f.evidence) for f in flags) == [2] + [3] * SPLITS
    finally:
        engine.dispose()


def _post_all_at_once(bases: list[str], token: str, records: list[dict[str, Any]]) -> list[Any]:
    """CLIENTS threads post every record, one per request, each in its own order and to a
    server picked at random, all starting together."""
    answers: list[Any] = []
    failures: list[str] = []
    start = threading.Barrier(CLIENTS)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}

    def client(seed: int) -> None:
        rng = random.Random(seed)
        mine = rng.sample(records, len(records))
        with httpx.Client(headers=headers, timeout=60) as http:
            start.wait()
            for record in mine:
                response = http.post(f"{rng.choice(bases)}/api/v1/ingest", content=jsonl([record]))
                if response.status_code != 200:
                    failures.append(f"{response.status_code} {response.text[:300]}")
                else:
                    answers.append(response.json())

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    return answers
