"""A fixed ingest workload for instruction counts (callgrind), which do not depend on load.

``--make DIR`` writes the simulator's mixed capture (as ``ingest_bulk.py`` makes it) into
DIR once; ``DIR`` alone ingests it into a fresh SQLite file as ``handoff-trace ingest``
does (``--dry``: everything but the ingest, the start-up to subtract). Under callgrind::

    .venv/bin/python bench/ingest_instructions.py --make /tmp/cap --elements 400
    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p .venv/bin/python \\
        bench/ingest_instructions.py /tmp/cap [--dry]
    callgrind_annotate /tmp/cg.PID | head -30

The difference of the two totals over the items is the instructions per element. Without
valgrind it prints the CPU time of the ingest per element and a digest of every stored row
(``--rows``), so that two versions of the code can be compared for identical output.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from handoff_context import RefPolicy, TrustStore
from ingest_bulk import make_capture

from app.cli.common import fewer_collections
from app.ingest.build import freeze_start_up
from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions, load_objects
from app.store import db


def rows_digests(path: Path) -> dict[str, str]:
    """A digest of each table's stored rows (sorted: in no particular order)."""
    found = {}
    with sqlite3.connect(path) as con:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in sorted(tables):
            rows = sorted(repr(row) for row in con.execute(f'SELECT * FROM "{table}"'))
            found[table] = hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--make", action="store_true", help="write the capture into DIR")
    parser.add_argument("--elements", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dry", action="store_true", help="all but the ingest")
    parser.add_argument("--batch", type=int, help="items per batch (default: BATCH_ITEMS)")
    parser.add_argument("--rows", action="store_true", help="print a digest of the stored rows")
    args = parser.parse_args()
    if args.make:
        args.dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            cap = make_capture(
                Path(tmp), elements=args.elements, seed=args.seed, fault_rate=0.02, sample=1
            )
            paths = cap["paths"]
            shutil.copy(paths.out, args.dir / "capture.jsonl")
            shutil.copy(paths.cbor, args.dir / "capture.cbor")
            shutil.copy(paths.trust, args.dir / "trust.json")
            shutil.copytree(paths.objects, args.dir / "objects", dirs_exist_ok=True)
            (args.dir / "now").write_text(json.dumps(cap["now"]))
        return
    if args.batch is not None:
        import app.ingest.batches
        import app.ingest.envelope

        app.ingest.batches.batched.__defaults__ = (args.batch,)
        app.ingest.envelope.BATCH_ITEMS = args.batch
    now = json.loads((args.dir / "now").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ingest.db"
        engine = db.make_engine(f"sqlite:///{path}")
        db.ensure_schema(engine)
        pipeline = Pipeline(
            engine=engine,
            trust=TrustStore.load(args.dir / "trust.json"),
            options=VerifyOptions(at=now, ref_policy=RefPolicy.CHECK_AVAILABLE),
            objects=load_objects(args.dir / "objects"),
        )
        names = ("capture.jsonl", "capture.cbor")
        inputs = [(name, (args.dir / name).read_bytes()) for name in names]
        freeze_start_up(sum(len(data) for _, data in inputs))
        if args.dry:
            return
        cpu = time.process_time()
        with fewer_collections():
            report = ingest(pipeline, inputs, now=now)
        cpu = time.process_time() - cpu
        engine.dispose()
        items = len(report.verdicts)
        errors = len(report.errors)
        print(f"{items} verdicts, {errors} errors, {cpu / items * 1e6:.0f} us CPU/element")
        if args.rows:
            tables = rows_digests(path)
            whole = hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()
            print("rows", whole[:16], json.dumps(tables))


if __name__ == "__main__":
    main()
