"""HTTP ingest's per-request work as a fixed workload for instruction counts (callgrind).

``--make DIR`` writes the capture ``http_ingest.py`` posts (its generator, JSON Lines only)
into DIR once; ``DIR`` alone builds the pipeline as ``serve`` does (``build_pipeline`` from
the default settings, one ``KnownItems`` kept across requests, as ``Service.known``) and
calls ``ingest()`` once per ``--chunk`` records (100) in capture order, as one worker
answering every request one after another would, on a fresh SQLite file, at the capture's
clock. ``--whole``: one call over the whole capture instead; ``--pipelines 2``: chunks
handed in turn to two pipelines (two engines, two ``KnownItems``) over one database, as
two workers would; ``--dry``: everything but the ingest, the start-up to subtract. Under
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
import shutil
import tempfile
import time
from pathlib import Path

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
            tables = rows_digests(path)
            whole = hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()
            print("rows", whole[:16], json.dumps(tables))


if __name__ == "__main__":
    main()
