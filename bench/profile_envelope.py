"""The envelope stage of bulk ingest alone: its seconds and its SQL statements per item.

Generates the same capture as ``profile_ingest.py`` (simulator, fault rate 0.02), ingests it
into a fresh SQLite file with ``app.ingest.pipeline.ingest`` (no profiler), and charges to
the envelope stage (``app.ingest.envelope.EnvelopeIngest``) the time spent finding envelope
items in each capture item (``find_items``), preparing their rows, and storing a batch
(items, cases, flags), and every SQL statement issued while it stores (SQLAlchemy
``before_cursor_execute``, by verb and table, as ``profile_ingest.py`` counts them). Per
item means per ingest verdict, as there, so the two scripts' figures add up.

    .venv/bin/python bench/profile_envelope.py [--elements 1500] [--rounds 3] [--db postgresql]

``--db postgresql`` runs on a throwaway cluster at default durability (``lean_path.py``'s).

Writes bench/results/profile_envelope.json.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _support import RawVerifier, interruptible, write_results
from handoff_context import RefPolicy, TrustStore
from ingest_bulk import make_capture
from lean_path import durable_postgres
from profile_ingest import _kind
from sqlalchemy import event

import app.ingest.envelope as stage
from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions, load_objects
from app.store import db


class _Meter:
    """Seconds per part of the stage, and the statements issued while it stores."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.statements: Counter[str] = Counter()
        self.storing = 0  # nesting depth: ``read`` may flush

    def timed(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start

        return wrapper

    def storing_in(self, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.storing += 1
            try:
                return function(*args, **kwargs)
            finally:
                self.storing -= 1

        return wrapper


def one_round(paths: Any, now: int, url: str) -> tuple[int, float, _Meter]:
    meter = _Meter()
    patches = {
        "find_items": meter.timed("find envelope items (read)", stage.find_items),
    }
    methods = {
        "_prepare": meter.timed("prepare rows", stage.EnvelopeIngest._prepare),
        "_store": meter.storing_in(meter.timed("store a batch", stage.EnvelopeIngest._store)),
    }
    saved = {k: getattr(stage, k) for k in patches} | {
        k: getattr(stage.EnvelopeIngest, k) for k in methods
    }
    engine = db.make_engine(url)
    try:
        db.ensure_schema(engine)
        pipeline = Pipeline(
            engine=engine,
            trust=TrustStore.load(paths.trust),
            options=VerifyOptions(at=now, ref_policy=RefPolicy.CHECK_AVAILABLE),
            objects=load_objects(paths.objects),
        )

        @event.listens_for(engine, "before_cursor_execute")
        def count(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
            if meter.storing:
                meter.statements[_kind(statement)] += 1

        for k, v in patches.items():
            setattr(stage, k, v)
        for k, v in methods.items():
            setattr(stage.EnvelopeIngest, k, v)
        inputs = [(str(p), p.read_bytes()) for p in (paths.out, paths.cbor)]
        start = time.perf_counter()
        report = ingest(pipeline, inputs, now=now)
        seconds = time.perf_counter() - start
    finally:
        for k, v in saved.items():
            setattr(stage if k in patches else stage.EnvelopeIngest, k, v)
        engine.dispose()
    return len(report.verdicts), seconds, meter


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--elements", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        stack.enter_context(interruptible())
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="handoff-trace-")))
        if args.db == "postgresql":
            cluster = stack.enter_context(durable_postgres())

            def url(n: int) -> str:
                return cluster.create_database(f"envelope{n}")
        else:

            def url(n: int) -> str:
                return f"sqlite:///{work / f'envelope{n}.db'}"

        cap = make_capture(
            work, elements=args.elements, seed=args.seed, fault_rate=0.02, sample=500
        )
        raw = RawVerifier(TrustStore.load(cap["paths"].trust), cap["cases"])
        rounds = []
        for n in range(args.rounds):
            raw.round()
            items, seconds, meter = one_round(cap["paths"], cap["now"], url(n))
            raw.round()
            rounds.append((seconds, items, meter))
    seconds, items, meter = min(rounds, key=lambda r: r[0])  # the least disturbed round
    stage_s = sum(meter.seconds.values())
    total = sum(meter.statements.values())
    print(
        f"{items:,} items, ingest {seconds:.2f} s ({items / seconds:,.0f}/s, "
        f"{items / seconds / raw.per_second:.4f} x raw verify at {raw.per_second:,.0f}/s); "
        f"{args.db}, best of {args.rounds}"
    )
    print(f"envelope stage: {stage_s:.3f} s = {100 * stage_s / seconds:.1f} % of ingest")
    for name, s in meter.seconds.most_common():
        print(f"  {s:7.3f} s  {name}")
    print(f"envelope stage statements: {total:,} = {total / items:.3f} per item")
    for kind, n in meter.statements.most_common():
        print(f"  {n / items:7.3f} per item  {kind}  ({n})")
    path = write_results(
        "profile_envelope" if args.db == "sqlite" else "profile_envelope_postgresql",
        {
            "params": vars(args),
            "items": items,
            "ingest_seconds": round(seconds, 3),
            "raw_per_second": round(raw.per_second, 1),
            "ratio_to_raw": round(items / seconds / raw.per_second, 4),
            "envelope_seconds": {k: round(v, 3) for k, v in meter.seconds.most_common()},
            "envelope_share": round(stage_s / seconds, 3),
            "envelope_statements_per_item": {
                k: round(n / items, 3) for k, n in meter.statements.most_common()
            },
            "envelope_statements_total_per_item": round(total / items, 3),
        },
    )
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
