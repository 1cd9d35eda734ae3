"""Three instances, one log (issue 24, third "Done when"): three real ``handoff-trace serve``
processes on one throwaway PostgreSQL, each running its sequencer every second, take a demo
run's capture in parallel (some batches sent to two of them). The log they build together
holds every stored element and every refused octet string exactly once, at contiguous
indexes; every checkpoint any of them published (and every one served while ingest ran)
is the root of a prefix of that one sequence of leaves, and consecutive ones are proved
consistent."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, func, select

from app.cli.root import main
from app.log import prove
from app.log.checkpoint import Checkpoint, open_checkpoint
from app.log.keys import write_key
from app.log.merkle import Frontier, check_consistency, leaf_hash
from app.store.db import make_engine, read_only, transaction
from app.store.models import ElementRow, LogCheckpointRow, LogLeafRow, RejectedOctetsRow
from app.store.tlog import unlogged_count
from app.store.tokens import Role, create_token
from tests.conftest import T0
from tests.databases import Databases
from tests.log.deployment import demo_run
from tests.web.conftest import make_tokens
from tests.web.test_served import serving

BATCH_LINES = 25
CATCH_UP_SECONDS = 90


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + CATCH_UP_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen in {CATCH_UP_SECONDS} s"
        time.sleep(0.2)


def _count(engine: Engine, column: object) -> int:
    with transaction(read_only(engine)) as session:
        return int(session.execute(select(func.count(column))).scalar_one())  # type: ignore[call-overload]


def make_tokens_named(engine: Engine, name: str) -> str:
    with transaction(engine) as session:
        return create_token(session, name=name, role=Role.READ, now=T0)


def test_three_instances_build_one_log(
    databases: Databases,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = demo_run(tmp_path / "run", seed=9, dialogs=16)
    lines = run.out.read_bytes().splitlines(keepends=True)
    batches = [b"".join(lines[i : i + BATCH_LINES]) for i in range(0, len(lines), BATCH_LINES)]
    url = databases.new("postgresql")
    engine = make_engine(url)
    signer = write_key(tmp_path / "log.key", "handoff-trace.test/three")
    env = {
        "HANDOFF_TRACE_LOG_KEY_FILE": str(tmp_path / "log.key"),
        "HANDOFF_TRACE_LOG_SECONDS": "1",
    }
    try:
        token = make_tokens(engine)["admin"]
        auth = {"Authorization": f"Bearer {token}"}
        seen: list[bytes] = []
        done = threading.Event()
        errors: list[BaseException] = []
        with contextlib.ExitStack() as stack:
            bases = [stack.enter_context(serving(url, run.trust, tmp_path, env)) for _ in range(3)]

            def send(k: int) -> None:
                try:
                    with httpx.Client(headers=auth, timeout=120) as client:
                        # Instance k takes every third batch, and the next instance's too
                        # every fourth time: those are stored once, whoever stores them.
                        for i, body in enumerate(batches):
                            if i % 3 == k or (i % 3 == (k + 1) % 3 and i % 4 == 0):
                                response = client.post(
                                    f"{bases[k]}/api/v1/ingest",
                                    content=body,
                                    headers={"Content-Type": "application/x-ndjson"},
                                )
                                assert response.status_code == 200, response.text
                except BaseException as exc:  # reported by the main thread
                    errors.append(exc)

            def watch() -> None:
                with httpx.Client(headers=auth, timeout=30) as client:
                    i = 0
                    while not done.is_set():
                        response = client.get(f"{bases[i % 3]}/api/v1/log/checkpoint")
                        if response.status_code == 200:
                            seen.append(response.content)
                        i += 1

            senders = [threading.Thread(target=send, args=(k,)) for k in range(3)]
            watcher = threading.Thread(target=watch)
            for t in [*senders, watcher]:
                t.start()
            for t in senders:
                t.join()
            assert not errors, errors
            _until(lambda: _caught_up(engine), "the log catching up with the store")
            done.set()
            watcher.join()
            seen.append(httpx.get(f"{bases[0]}/api/v1/log/checkpoint", headers=auth).content)
            # An auditor's `log verify` over HTTP, against another instance, agrees.
            monkeypatch.setenv("HANDOFF_TRACE_LOG_TOKEN", make_tokens_named(engine, "auditor"))
            vkey = signer.verifier.text()
            assert main(["log", "verify", f"{bases[1]}/api/v1/log", "--key", vkey]) == 0
            assert "entries rebuild the signed root" in capsys.readouterr().out

        # Every stored row exactly once, at indexes 0..n-1.
        stored = _count(engine, ElementRow.digest) + _count(engine, RejectedOctetsRow.digest)
        assert stored > 150
        with transaction(read_only(engine)) as session:
            leaves = session.execute(
                select(
                    LogLeafRow.idx, LogLeafRow.source, LogLeafRow.digest, LogLeafRow.leaf
                ).order_by(LogLeafRow.idx)
            ).all()
            published = list(
                session.scalars(select(LogCheckpointRow).order_by(LogCheckpointRow.size))
            )
            assert [r.idx for r in leaves] == list(range(stored))
            assert len({(r.source, r.digest) for r in leaves}) == stored
            elements = set(session.scalars(select(ElementRow.digest)))
            assert {r.digest for r in leaves if r.source == 1} == elements

            # Every checkpoint is a prefix of that one log; consecutive ones are consistent.
            roots, tree = {0: Frontier().root()}, Frontier()
            for r in leaves:
                tree.add(leaf_hash(r.leaf))
                roots[tree.size] = tree.root()
            checkpoints = [open_checkpoint(p.note, signer.verifier) for p in published]
            checkpoints += [open_checkpoint(note, signer.verifier) for note in seen]
            assert len(seen) > 3 and checkpoints[-1].size == stored
            for c in checkpoints:
                assert c.root == roots[c.size], f"checkpoint {c.size} is not a prefix of the log"
            by_size: dict[int, Checkpoint] = {c.size: c for c in checkpoints}
            sizes = sorted(by_size)
            for old, new in itertools.pairwise(sizes):
                proof = prove.consistency(session, old=old, size=new)
                check_consistency(old, by_size[old].root, new, by_size[new].root, proof)
    finally:
        engine.dispose()


def _caught_up(engine: Engine) -> bool:
    with transaction(read_only(engine)) as session:
        return unlogged_count(session) == 0
