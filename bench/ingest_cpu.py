"""Bulk ingest into SQLite as a ratio of CPU time, for a machine shared with other work.

``lean_path.py`` reports wall-clock rates against raw verify measured around them; on a
machine whose cores other sessions keep busy, both swing by 2x from one minute to the next.
This script reports the same ratio in CPU time of this process (``time.process_time``:
every thread, SQLite's C code included): raw ``cryptography`` verify's CPU per signature
(best of 3 rounds before and after) divided by ingest's CPU per verdict, on the
simulator's mixed capture (as ``ingest_bulk.py`` makes it) and on plain ES256 offers.

    .venv/bin/python bench/ingest_cpu.py [--elements 2000] [--rounds 2]

Prints one JSON line per round; writes bench/results/ingest_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from _support import RawVerifier, interruptible, write_results
from handoff_context import RefPolicy, TrustStore
from ingest_bulk import make_capture
from lean_path import T0, es256_offers

from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions, load_objects
from app.store import db


def _raw_cpu(raw: RawVerifier) -> float:
    """CPU seconds per signature, best of 3 rounds."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        raw.round()
        best = min(best, (time.process_time() - start) / len(raw.jobs))
    return best


def _one(
    raw: RawVerifier, pipeline: Pipeline, inputs: list[tuple[str, bytes]], now: int
) -> dict[str, Any]:
    before = _raw_cpu(raw)
    start = time.process_time()
    report = ingest(pipeline, inputs, now=now)
    cpu = time.process_time() - start
    per_signature = min(before, _raw_cpu(raw))
    n = len(report.verdicts)
    return {
        "verdicts": n,
        "errors": len(report.errors),
        "ingest CPU us per element": cpu / n * 1e6,
        "raw verify CPU us": per_signature * 1e6,
        "ratio": per_signature / (cpu / n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--elements", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rows = []
    with interruptible(), tempfile.TemporaryDirectory(prefix="handoff-trace-bench-") as tmp:
        work = Path(tmp)
        cap = make_capture(work, elements=args.elements, seed=1, fault_rate=0.02, sample=500)
        paths = cap["paths"]
        trust = TrustStore.load(paths.trust)
        raw = RawVerifier(trust, cap["cases"])
        mixed = [(str(p), p.read_bytes()) for p in (paths.out, paths.cbor)]
        plain_trust, _doc, _offers, records = es256_offers(args.elements)
        plain = [("plain.jsonl", ("\n".join(records) + "\n").encode())]
        cases = (
            ("mixed", mixed, trust, cap["now"], cap["now"], True),
            ("plain offers", plain, plain_trust, T0, T0 + 10, False),
        )
        for round_ in range(args.rounds):
            for name, inputs, store, at, now, refs in cases:
                engine = db.make_engine(f"sqlite:///{work / f'{round_}-{name[:5]}.db'}")
                try:
                    db.ensure_schema(engine)
                    policy = RefPolicy.CHECK_AVAILABLE if refs else RefPolicy.NONE
                    extra = {"objects": load_objects(paths.objects)} if refs else {}
                    pipeline = Pipeline(
                        engine=engine,
                        trust=store,
                        options=VerifyOptions(at=at, ref_policy=policy),
                        **extra,
                    )
                    row = {"capture": name, "round": round_ + 1}
                    row |= _one(raw, pipeline, inputs, now)
                finally:
                    engine.dispose()
                print(json.dumps(row), flush=True)
                rows.append(row)
    write_results("ingest_cpu", {"sizes": vars(args), "rows": rows})


if __name__ == "__main__":
    main()
