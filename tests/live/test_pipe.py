"""``handoff-trace ingest -`` fed live: each line is committed within about a second while
the pipe stays open, not only every BATCH_ITEMS (256) items or at the end of input."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from handoff_context import handoff_object, make_offer
from sqlalchemy import func, select

from app.store.db import ensure_schema, make_engine, transaction
from app.store.models import ObservationRow

from .servers import wait_until
from .service import CLI
from .system import CLIENT, PLANNER, TRUST


def stored(db: str) -> int:
    engine = make_engine(db)
    try:
        with transaction(engine) as session:
            return int(session.execute(select(func.count(ObservationRow.id))).scalar_one())
    finally:
        engine.dispose()


def record(n: int) -> bytes:
    offer = make_offer(CLIENT, aud=PLANNER.iss, dialog=f"d-{n}", iat=int(time.time()))
    line = {"id": f"line-{n}", "received_at": time.time(), "received_by": PLANNER.iss}
    return json.dumps({**line, "payload": handoff_object(offer)}).encode() + b"\n"


def test_a_trickling_pipe_is_committed_while_it_is_open(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'trace.db'}"
    trust = tmp_path / "trust.json"
    trust.write_text(json.dumps(TRUST))
    engine = make_engine(db)
    ensure_schema(engine)  # so that the store can be counted from the first line on
    engine.dispose()
    proc = subprocess.Popen(
        [CLI, "ingest", "--db", db, "--trust", str(trust), "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    try:
        for n in (1, 2):
            proc.stdin.write(record(n))
            proc.stdin.flush()
            # Stored while the pipe stays open (polled, within 30 s at most).
            wait_until(lambda n=n: stored(db) == n, what=f"line {n} committed", interval=0.1)
        assert proc.poll() is None  # still reading
    finally:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert stored(db) == 2
