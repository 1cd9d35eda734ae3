"""HTTP ingest's per-request work as a fixed workload for instruction counts (callgrind).

``--make DIR`` writes the capture ``http_ingest.py`` posts (its generator, JSON Lines only)
into DIR once; ``DIR`` alone builds the pipeline as ``serve`` does (``build_pipeline`` from
the default settings, one ``KnownItems`` kept across requests, as ``Service.known``) and
calls ``ingest()`` once per ``--chunk`` records (100) in capture order, as one worker
answering every request one after another would, on a fresh SQLite file, at the capture's
clock. ``--whole``: one call over the whole capture instead; ``--pipelines 2``: chunks
handed in turn to two pipelines (two engines, two ``KnownItems``) over one database, as
two workers would; ``--dry``: everything but the ingest, the start-up to subtract.
``--server``: the same chunks POSTed in order, one at a time, to ``/api/v1/ingest`` of the
real app (``create_app`` with the settings ``serve`` gives its workers, metrics in
prometheus_client's multiprocess mode as with ``serve --workers 2``, an admin token made
as the tests make one) through Starlette's ``TestClient``, so that the whole request
path runs in this one process (the client's side of each request, building it and reading
the answer, is counted too: less than uvicorn's parsing would be); with ``--dry`` it starts
the app and stops it. ``--answers`` prints a digest of every answer's status and body, to
compare two versions; its ``--rows`` leave out ``api_token`` (a new token every run). Under
callgrind::

    .venv/bin/python bench/http_instructions.py --make /tmp/hcap --elements 1000
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p .venv/bin/python \\
        bench/http_instructions.py /tmp/hcap [--whole] [--dry]
    callgrind_annotate --inclusive=yes /tmp/cg.PID | head -60

The difference of the two totals over the verdicts is the instructions per element.
Without valgrind it prints the CPU time of the ingest per element and, with ``--rows``, a
digest of every stored row (``ingest_instructions.rows_digests``), so that two versions of
the code, or chunked and whole runs, can be compared for identical output.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from handoff_context import TrustStore
from http_ingest import make_chunks
from ingest_instructions import rows_digests

from app.ingest.build import build_pipeline, freeze_start_up, verify_options
from app.ingest.cases import KnownItems
from app.ingest.pipeline import ingest
from app.settings import Settings
from app.store import db
from app.web.answers import NDJSON, Listing


def make(directory: Path, *, elements: int, seed: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cap = make_chunks(Path(tmp), elements=elements, seed=seed, chunk=1, sample=1)
        shutil.copy(cap["paths"].out, directory / "capture.jsonl")
        shutil.copy(cap["paths"].trust, directory / "trust.json")
        (directory / "now").write_text(json.dumps(cap["now"]))


def serve_chunks(
    chunks: list[bytes], trust: Path, path: Path, *, now: int, dry: bool
) -> tuple[int, list[tuple[int, bytes]]]:
    """POST every chunk in order to the real app (one worker of ``serve``), at the capture's
    clock; the verdicts counted and every answer's status and body."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path.parent)  # before prometheus_client loads
    from fastapi.testclient import TestClient

    from app.store.db import transaction
    from app.store.tokens import Role, create_token
    from app.web.app import create_app

    settings = Settings(database_url=f"sqlite:///{path}", trust_file=trust)
    app = create_app(settings, clock=lambda: now, served=True)
    answers: list[tuple[int, bytes]] = []
    elements = 0
    with TestClient(app) as client:
        with transaction(app.state.service.engine) as session:
            token = create_token(session, name="bench", role=Role.ADMIN, now=now)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": NDJSON}
        for chunk in [] if dry else chunks:
            answer = client.post("/api/v1/ingest", content=chunk, headers=headers)
            answers.append((answer.status_code, answer.content))
            body: dict[str, Any] = answer.json()
            elements += body["counts"]["verdicts"]
    return elements, answers


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dir", type=Path)
    parser.add_argument("--make", action="store_true", help="write the capture into DIR")
    parser.add_argument("--elements", type=int, default=1000, help="capture size (about)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=100, help="records per ingest() call")
    parser.add_argument("--whole", action="store_true", help="one call over everything")
    parser.add_argument("--pipelines", type=int, default=1, help="workers taking turns")
    parser.add_argument("--dry", action="store_true", help="all but the ingest")
    parser.add_argument("--rows", action="store_true", help="print a digest of the stored rows")
    parser.add_argument("--server", action="store_true", help="through the app (httpx, ASGI)")
    parser.add_argument(
        "--answers", action="store_true", help="--server: print a digest of every answer"
    )
    args = parser.parse_args()
    if args.make:
        make(args.dir, elements=args.elements, seed=args.seed)
        return
    now = json.loads((args.dir / "now").read_text())
    lines = [ln for ln in (args.dir / "capture.jsonl").read_bytes().splitlines() if ln.strip()]
    size = len(lines) if args.whole else args.chunk
    chunks = [b"\n".join(lines[i : i + size]) + b"\n" for i in range(0, len(lines), size)]
    settings = Settings()
    trust = TrustStore.load(args.dir / "trust.json")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "http.db"
        if args.server:
            cpu = time.process_time()
            elements, answers = serve_chunks(
                chunks, args.dir / "trust.json", path, now=now, dry=args.dry
            )
            cpu = time.process_time() - cpu
            print(
                f"{len(answers)} requests, {elements} verdicts, "
                f"statuses {sorted(set(s for s, _ in answers))}, "
                f"{cpu / max(1, elements) * 1e6:.0f} us CPU/element (start-up included)"
            )
            if args.answers:
                digest = hashlib.sha256()
                for status, content in answers:
                    digest.update(b"%d %d\n" % (status, len(content)) + content)
                print("answers", digest.hexdigest()[:16])
            if args.rows:
                print_rows(path, leave_out="api_token")  # its token is new on every run
            return
        engines = [db.make_engine(f"sqlite:///{path}") for _ in range(args.pipelines)]
        db.ensure_schema(engines[0])
        options = verify_options(settings, at=now)
        pipelines = [
            build_pipeline(settings, e, trust, options=options, known=KnownItems()) for e in engines
        ]
        freeze_start_up()  # as ``serve`` freezes its workers' start-up heap
        if args.dry:
            return
        elements = errors = 0
        cpu = time.process_time()
        for n, chunk in enumerate(chunks):
            listing = Listing()  # the answer, as ``post_ingest`` builds it
            report = ingest(
                pipelines[n % len(pipelines)],
                [("request", chunk)],
                now=now,
                content_type=NDJSON,
                on_verdict=listing.add,
            )
            listing.body({"counts": report.counts, "stored": report.complete})
            elements += sum(listing.outcomes.values())
            errors += len(report.errors)
        cpu = time.process_time() - cpu
        for engine in engines:
            engine.dispose()
        print(
            f"{len(chunks)} calls, {elements} verdicts, {errors} errors, "
            f"{cpu / max(1, elements) * 1e6:.0f} us CPU/element"
        )
        if args.rows:
            print_rows(path)


def print_rows(path: Path, *, leave_out: str | None = None) -> None:
    tables = {k: v for k, v in rows_digests(path).items() if k != leave_out}
    whole = hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()
    print("rows", whole[:16], json.dumps(tables))


if __name__ == "__main__":
    main()
