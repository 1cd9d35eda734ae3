"""The evidence log's sequencer (issue 24): how fast it appends, and what it costs beside
ingest.

A demo capture (``--dialogs``, low fault rate) is ingested into a fresh SQLite store through
``app.ingest.pipeline.ingest`` (the one pipeline, as ``handoff-trace ingest``), timing its
CPU (``time.process_time``: this process only). Then the sequencer catches the log up with
the store (``app.log.sequencer.sequence_all``, rounds of ``--batch``), timing its CPU and
wall time, and one more round that finds nothing pending (what every idle round costs: it
looks for rows without a leaf). In the same run, raw ``cryptography`` verification of the
capture's own signatures gives the yardstick: the sequencer's rate is reported as a ratio to
it, and its CPU as a share of ingest's.

    .venv/bin/python bench/tlog_sequencer.py [--dialogs 400] [--batch 5000]

Prints a table and writes bench/results/tlog_sequencer.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _support import RawVerifier, raw_case, top_element, write_results
from handoff_context import RefPolicy, TrustStore

from app.capture.carriers import Carried, read_capture
from app.demo import DemoConfig, DemoPaths, write_demo
from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions, load_objects
from app.log.note import Signer
from app.log.sequencer import sequence_all, sequence_once
from app.store import db, tlog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dialogs", type=int, default=400)
    parser.add_argument("--batch", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tlog-bench-") as tmp:
        row = run(Path(tmp), dialogs=args.dialogs, batch=args.batch)
    print(f"{'elements logged':<34}{row['leaves']:>12}")
    print(f"{'raw verify (signatures/s)':<34}{row['raw_per_second']:>12.0f}")
    print(f"{'ingest (elements/s, CPU)':<34}{row['ingest_per_cpu_second']:>12.0f}")
    print(f"{'sequencer (elements/s, wall)':<34}{row['sequencer_per_second']:>12.0f}")
    print(f"{'sequencer / raw verify':<34}{row['sequencer_vs_raw']:>12.2f} x")
    print(f"{'sequencer CPU / ingest CPU':<34}{row['cpu_share']:>12.1%}")
    print(f"{'idle round (nothing pending), ms':<34}{row['idle_round_ms']:>12.1f}")
    path = write_results("tlog_sequencer", {"params": vars(args), "results": row})
    print(f"written {path}", file=sys.stderr)


def run(tmp: Path, *, dialogs: int, batch: int) -> dict[str, float]:
    paths = DemoPaths.beside(tmp / "capture.jsonl", trust=None, answers=None)
    write_demo(DemoConfig(seed=24, dialogs=dialogs, fault_rate=0.02, agents=12), paths)
    trust = TrustStore.load(paths.trust)
    cases = []
    for path in (paths.out, paths.cbor):
        for found in read_capture(path.read_bytes(), name=str(path)):
            if isinstance(found, Carried) and (element := top_element(found.value)):
                cases.append(raw_case(element))
    raw = RawVerifier(trust, cases)
    raw.round()  # warm-up
    raw.samples.clear()

    engine = db.make_engine(f"sqlite:///{tmp / 'store.db'}")
    try:
        db.ensure_schema(engine)
        pipeline = Pipeline(
            engine=engine,
            trust=trust,
            options=VerifyOptions(at=int(time.time()), ref_policy=RefPolicy.CHECK_AVAILABLE),
            objects=load_objects(paths.objects),
        )
        raw.round()
        inputs = [(str(p), p.read_bytes()) for p in (paths.out, paths.cbor)]
        cpu = time.process_time()
        ingest(pipeline, inputs, now=int(time.time()), on_verdict=lambda _v: None)
        ingest_cpu = time.process_time() - cpu
        raw.round()

        signer = Signer.generate("bench.localhost/log")
        cpu, wall = time.process_time(), time.perf_counter()
        leaves = sequence_all(engine, signer, now=int(time.time()), batch=batch)
        seq_cpu, seq_wall = time.process_time() - cpu, time.perf_counter() - wall
        raw.round()
        idle = time.perf_counter()
        assert sequence_once(engine, signer, now=int(time.time())).count == 0
        idle_ms = (time.perf_counter() - idle) * 1000
        with db.transaction(db.read_only(engine)) as session:
            assert tlog.state(session)[0] == leaves
    finally:
        engine.dispose()
    per_second = leaves / seq_wall
    return {
        "leaves": leaves,
        "raw_per_second": raw.per_second,
        "ingest_cpu_seconds": ingest_cpu,
        "ingest_per_cpu_second": leaves / ingest_cpu,
        "sequencer_cpu_seconds": seq_cpu,
        "sequencer_wall_seconds": seq_wall,
        "sequencer_per_second": per_second,
        "sequencer_vs_raw": per_second / raw.per_second,
        "cpu_share": seq_cpu / ingest_cpu,
        "idle_round_ms": idle_ms,
    }


if __name__ == "__main__":
    main()
