"""Bulk ingest of a simulated capture into SQLite and PostgreSQL, against raw verify.

A capture of about ``--elements`` carried objects (handoff and status objects; one verdict
each) is generated with the traffic simulator (``app.demo``, low fault rate), then ingested
through ``app.ingest.pipeline.ingest`` exactly as ``handoff-trace demo --load`` does (both capture
files, the run's trust file and ref objects, ``check-available``), into a fresh SQLite file
and into a fresh database on a throwaway PostgreSQL cluster on 127.0.0.1.

Each ingest runs in its own freshly spawned worker process, so its peak RSS
(``getrusage(RUSAGE_SELF).ru_maxrss``: the whole process, Python heap, libraries and
SQLite's page cache; not the PostgreSQL server) belongs to that ingest alone. In the same
worker, raw ``cryptography`` verification of a sample of the capture's own signatures (same
algorithms, same mix) runs every ``--chunk`` items; those rounds are left out of the ingest
time, and elements/s is reported as a ratio to their median. Target (issue 5): >= 0.5 of raw
on SQLite.

``--budget`` caps each backend's ingest time (default 240 s, so a default run stays under
~10 minutes on a 2-core machine). When it cuts a run short, the table says how many items
were ingested, and the time a full run would take is extrapolated from the rate of the last
chunks and labelled as such. ``--budget 0`` ingests everything.

    .venv/bin/python bench/ingest_bulk.py [--elements 100000] [--db sqlite|postgresql|both]
                                          [--budget 240] [--quick]

Prints a table and writes bench/results/ingest_bulk.json (``--quick``: ingest_bulk_quick.json,
``--results NAME``: NAME.json).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from _support import (
    RawCase,
    RawVerifier,
    ignore_sigint_in_child,
    interruptible,
    peak_rss_mib,
    postgres,
    raw_case,
    rss_mib,
    top_element,
    write_results,
)

from app.capture.carriers import Carried, read_capture
from app.demo import DemoConfig, DemoPaths, write_demo

ITEMS_PER_DIALOG = 15.4  # carried objects per simulated dialog at fault rate 0.02 (measured)
TARGET_SQLITE = 0.5


# --- the capture --------------------------------------------------------------------------


def make_capture(
    workdir: Path, *, elements: int, seed: int, fault_rate: float, sample: int
) -> dict[str, Any]:
    """Generate the capture; count its carried objects and pick a raw-verify sample."""
    dialogs = max(1, round(elements / ITEMS_PER_DIALOG))
    paths = DemoPaths.beside(workdir / "capture.jsonl", trust=None, answers=None)
    start = time.perf_counter()
    summary = write_demo(
        DemoConfig(seed=seed, dialogs=dialogs, fault_rate=fault_rate, agents=12), paths
    )
    generated = time.perf_counter() - start
    records = summary.json_records + summary.cbor_records
    stride = max(1, records // sample)
    items = 0
    cases: list[RawCase] = []
    mix: Counter[str] = Counter()
    for path in (paths.out, paths.cbor):
        for found in read_capture(path.read_bytes(), name=str(path)):
            if not isinstance(found, Carried):
                continue
            if items % stride == 0 and len(cases) < sample:
                element = top_element(found.value)
                if element is not None:
                    cases.append(raw_case(element))
                    mix[f"{element.header.alg}/{element.form.value}"] += 1
            items += 1
    return {
        "paths": paths,
        "dialogs": dialogs,
        "records": records,
        "items": items,
        "faults": sum(summary.faults.values()),
        "now": summary.suggested_now,
        "bytes": paths.out.stat().st_size + paths.cbor.stat().st_size,
        "generate_seconds": round(generated, 1),
        "cases": cases,
        "sample_mix": dict(mix),
    }


# --- one ingest, in its own process -------------------------------------------------------


class _Budget(Exception):
    """The time budget is spent: stop after the item just committed."""


def _ingest_job(job: dict[str, Any]) -> dict[str, Any]:
    from handoff_context import RefPolicy, TrustStore
    from sqlalchemy import text

    from app.ingest.pipeline import Pipeline, ingest
    from app.ingest.verifying import VerifyOptions, load_objects
    from app.store import db

    label, paths, now = job["label"], job["paths"], job["now"]
    engine = db.make_engine(job["url"])
    db.ensure_schema(engine)
    trust = TrustStore.load(paths.trust)
    pipeline = Pipeline(
        engine=engine,
        trust=trust,
        options=VerifyOptions(at=now, ref_policy=RefPolicy.CHECK_AVAILABLE),
        objects=load_objects(paths.objects),
    )
    raw = RawVerifier(trust, job["cases"])
    raw.round()  # warm-up, not counted
    raw.samples.clear()
    raw.round()
    files = [p.open("rb") for p in (paths.out, paths.cbor)]  # streamed, as the CLI does
    inputs = [(str(p), f) for p, f in zip((paths.out, paths.cbor), files, strict=True)]
    rss_before = rss_mib()
    chunk, budget, total = job["chunk"], job["budget"], job["items"]
    marks: list[tuple[int, float]] = [(0, 0.0)]  # (items done, ingest seconds so far)
    state = {"done": 0, "excluded": 0.0, "inputs_done": 0, "name": ""}
    t0 = time.perf_counter()

    def progress(name: str, done: int, _fraction: float | None) -> None:
        # Called after each batch of items (app.ingest.pipeline.BATCH_ITEMS) with the items done in
        # this input; a raw round runs each time another ``chunk`` items are done.
        if name != state["name"]:
            state["inputs_done"], state["name"] = state["done"], name
        before = state["done"]
        state["done"] = state["inputs_done"] + done
        if state["done"] // chunk == before // chunk:
            return
        pause = time.perf_counter()
        spent = pause - t0 - state["excluded"]
        marks.append((state["done"], spent))
        raw.round()
        rate = (marks[-1][0] - marks[-2][0]) / (spent - marks[-2][1])
        print(
            f"  {label}: {state['done']:,}/{total:,} items, {rate:,.0f}/s "
            f"(raw {raw.samples[-1]:,.0f}/s)",
            file=sys.stderr,
            flush=True,
        )
        state["excluded"] += time.perf_counter() - pause
        if budget and spent >= budget:
            raise _Budget()

    complete, errors = True, None
    try:
        # As demo --load: counts kept, verdicts not (on_verdict), so memory stays flat.
        report = ingest(pipeline, inputs, now=now, progress=progress, on_verdict=lambda _v: None)
        errors = len(report.errors)
    except _Budget:
        complete = False
    finally:
        for f in files:
            f.close()
    elapsed = time.perf_counter() - t0 - state["excluded"]
    done = state["done"]
    if marks[-1][0] != done:
        marks.append((done, elapsed))
    raw.round()
    raw.round()
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT count(*) FROM element")).scalar_one()
        outcomes = dict(
            conn.execute(text("SELECT outcome, count(*) FROM verdict GROUP BY outcome")).all()
        )
    engine.dispose()
    rates = [
        (b[0], (b[0] - a[0]) / (b[1] - a[1])) for a, b in itertools.pairwise(marks) if b[1] > a[1]
    ]
    return {
        "complete": complete,
        "items": done,
        "item_errors": errors,
        "stored_elements": stored,
        "outcomes": outcomes,
        "seconds": elapsed,
        "chunk_rates": [(n, round(r, 1)) for n, r in rates],
        "raw_samples": [round(s, 1) for s in raw.samples],
        "raw_per_second": raw.per_second,
        "raw_sample_size": len(raw.jobs),
        "rss_before_ingest_mib": round(rss_before, 1),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def _worker(conn: Connection, job: dict[str, Any]) -> None:
    ignore_sigint_in_child()
    try:
        conn.send(("ok", _ingest_job(job)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def run_in_worker(job: dict[str, Any]) -> dict[str, Any]:
    """Run one ingest in a fresh spawned process; always stops it before returning."""
    ctx = multiprocessing.get_context("spawn")
    mine, theirs = ctx.Pipe()
    process = ctx.Process(target=_worker, args=(theirs, job), name=f"ingest-{job['label']}")
    process.start()
    theirs.close()
    answered = False
    try:
        while not mine.poll(0.5):
            if not process.is_alive():
                raise RuntimeError(f"the {job['label']} worker died (exit {process.exitcode})")
        status, payload = mine.recv()
        answered = True
        if status != "ok":
            raise RuntimeError(f"the {job['label']} worker failed:\n{payload}")
        return dict(payload)
    finally:
        # Interrupted: stop the worker now; otherwise give it a moment to exit by itself.
        if answered:
            process.join(10)
        if process.is_alive():
            process.terminate()
            process.join(10)
        if process.is_alive():
            process.kill()
            process.join()
        mine.close()


# --- reporting ----------------------------------------------------------------------------


def summarise(backend: str, res: dict[str, Any], total: int) -> dict[str, Any]:
    rate = res["items"] / res["seconds"]
    raw = res["raw_per_second"]
    tail = [r for _, r in res["chunk_rates"][-3:]] or [rate]
    out: dict[str, Any] = {
        "backend": backend,
        **res,
        "items_of_capture": total,
        "per_second": round(rate, 1),
        "raw_per_second": round(raw, 1),
        "ratio_to_raw": round(rate / raw, 4),
        "seconds": round(res["seconds"], 1),
    }
    if not res["complete"]:
        # Labelled extrapolation: the remaining items at the median rate of the last chunks.
        tail_rate = statistics.median(tail)
        out["extrapolated_full_seconds"] = round(
            res["seconds"] + (total - res["items"]) / tail_rate, 0
        )
        out["extrapolated_from_rate"] = round(tail_rate, 1)
    if backend == "sqlite":
        met = rate / raw >= TARGET_SQLITE
        out["target"] = f">= {TARGET_SQLITE}: {'met' if met else 'missed'}"
    return out


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'backend':10} {'items':>15} {'seconds':>8} {'items/s':>8} {'raw/s':>8} "
        f"{'x raw':>7} {'peak RSS':>9} {'target':>16}"
    )
    print(head)
    for r in rows:
        items = f"{r['items']:,}/{r['items_of_capture']:,}"
        print(
            f"{r['backend']:10} {items:>15} {r['seconds']:>8,.1f} {r['per_second']:>8,.1f} "
            f"{r['raw_per_second']:>8,.0f} {r['ratio_to_raw']:>7.4f} "
            f"{r['peak_rss_mib']:>6,.0f} MiB {r.get('target', ''):>16}"
        )
    for r in rows:
        rates = r["chunk_rates"]
        if rates:
            picks = (
                rates if len(rates) <= 6 else [rates[i * (len(rates) - 1) // 5] for i in range(6)]
            )
            trend = ", ".join(f"{n:,}: {v:,.0f}/s" for n, v in picks)
            print(f"{r['backend']}: rate as the store grows (items done: rate) {trend}")
        if not r["complete"]:
            print(
                f"{r['backend']}: stopped by --budget after {r['items']:,} of "
                f"{r['items_of_capture']:,} items; EXTRAPOLATED full run "
                f"~{r['extrapolated_full_seconds']:,.0f} s at {r['extrapolated_from_rate']:,.0f}/s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--elements", type=int, default=100_000, help="carried objects (about)")
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument(
        "--budget", type=float, default=240.0, help="ingest seconds per backend; 0: no limit"
    )
    parser.add_argument("--chunk", type=int, default=1000, help="items between raw rounds")
    parser.add_argument("--sample", type=int, default=1000, help="signatures in a raw round")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fault-rate", type=float, default=0.02)
    parser.add_argument("--quick", action="store_true", help="smoke run: ~400 items, seconds")
    parser.add_argument(
        "--results", default=None, help="results file name (default ingest_bulk[_quick])"
    )
    args = parser.parse_args()
    if args.quick:
        args.elements, args.chunk, args.sample, args.budget = 400, 100, 200, 0.0
    if args.elements < 1 or args.chunk < 1 or args.sample < 1 or args.budget < 0:
        parser.error("--elements, --chunk and --sample must be positive, --budget >= 0")
    backends = ["sqlite", "postgresql"] if args.db == "both" else [args.db]

    rows: list[dict[str, Any]] = []
    with interruptible(), tempfile.TemporaryDirectory(prefix="handoff-trace-bench-") as tmp:
        work = Path(tmp)
        print(f"generating ~{args.elements:,} elements (seed {args.seed}) ...", file=sys.stderr)
        cap = make_capture(
            work,
            elements=args.elements,
            seed=args.seed,
            fault_rate=args.fault_rate,
            sample=args.sample,
        )
        print(
            f"capture: {cap['items']:,} carried objects in {cap['records']:,} records, "
            f"{cap['dialogs']:,} dialogs, {cap['faults']} injected faults, "
            f"{cap['bytes'] / 2**20:,.1f} MiB, generated in {cap['generate_seconds']} s",
            file=sys.stderr,
        )
        job = {
            "paths": cap["paths"],
            "now": cap["now"],
            "cases": cap["cases"],
            "items": cap["items"],
            "chunk": args.chunk,
            "budget": args.budget,
        }
        for backend in backends:
            if backend == "sqlite":
                url = f"sqlite:///{work / 'bench.db'}"
                res = run_in_worker({**job, "label": backend, "url": url})
            else:
                with postgres() as cluster:
                    url = cluster.create_database("bench")
                    res = run_in_worker({**job, "label": backend, "url": url})
            rows.append(summarise(backend, res, cap["items"]))
    print_table(rows)
    capture = {k: v for k, v in cap.items() if k not in ("paths", "cases")}
    name = args.results or ("ingest_bulk_quick" if args.quick else "ingest_bulk")
    params = {k: v for k, v in vars(args).items()}
    path = write_results(name, {"params": params, "capture": capture, "results": rows})
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
