"""Where the bulk-ingest time goes: a sampling profile of ``app.ingest.pipeline.ingest`` on SQLite.

Generates the same kind of capture as ``ingest_bulk.py`` (simulator, fault rate 0.02),
ingests it into a fresh SQLite file under pyinstrument (a sampling profiler, so the many
small SQLAlchemy calls are not inflated the way cProfile inflates them), and counts the SQL
statements executed per item (SQLAlchemy ``before_cursor_execute``), grouped by verb and
table. Then times one typical query four ways on the ingested database (built anew through
the ORM session as the store does, built once with bind parameters, through a Core
connection, raw sqlite3), in units of one raw verify.

pyinstrument is not a project dependency: ``.venv/bin/pip install pyinstrument``.

    .venv/bin/python bench/profile_ingest.py [--elements 3000] [--quick]

Prints the statement counts and the top of the profile; writes bench/results/profile_ingest.json
(``--quick``: profile_ingest_quick.json) with the counts and the whole call tree as text lines.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _support import RawVerifier, interruptible, write_results
from handoff_context import RefPolicy, TrustStore
from ingest_bulk import make_capture
from sqlalchemy import event, select

from app.cli.common import fewer_collections
from app.ingest.build import freeze_start_up
from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions, load_objects
from app.store import db

_VERB_TABLE = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|BEGIN|COMMIT|ROLLBACK|PRAGMA)\b"
    r"(?:.*?\b(?:FROM|INTO|UPDATE)\s+\"?(\w+))?",
    re.IGNORECASE | re.DOTALL,
)


def _kind(statement: str) -> str:
    m = _VERB_TABLE.match(statement)
    if not m:
        return statement.split(None, 1)[0].upper() if statement.strip() else "?"
    verb = m.group(1).upper()
    if verb == "UPDATE":
        table = statement.split()[1].strip('"')
        return f"UPDATE {table}"
    return f"{verb} {m.group(2)}" if m.group(2) else verb


def _bucket(function: str, path: str) -> str:
    if path == "<built-in>":
        if function.startswith(("Cursor.", "Connection.")) or "sqlite" in function:
            return "SQLite engine (C, via sqlite3)"
        if "verify" in function.lower():
            return "signature math (cryptography, C)"
        return "other built-ins"  # charged to the caller by self_time
    for marker, name in (
        ("sqlalchemy/", "SQLAlchemy + sqlmodel (Python)"),
        ("sqlmodel/", "SQLAlchemy + sqlmodel (Python)"),
        ("joserfc/", "joserfc + cryptography wrappers"),
        ("cryptography/", "joserfc + cryptography wrappers"),
        ("app/store/", "app/store (derive, records, memory)"),
        ("app/ingest", "app/ingest/pipeline.py"),
        (
            "lib/handoff-context/src/handoff_context/",
            "lib/handoff-context/src/handoff_context (parse, checks)",
        ),
        ("app/", "app (carriers, other)"),
        ("cbor2/", "JSON/CBOR decoding"),
        ("json/", "JSON/CBOR decoding"),
    ):
        if marker in path:
            return name
    return "other (stdlib)"


def self_time(root: Any) -> tuple[Counter[str], Counter[str]]:
    """Self time by bucket and by function, from pyinstrument's frame tree."""
    buckets: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    stack = [root]
    while stack:
        frame = stack.pop()
        if frame.children:
            stack.extend(frame.children)
            continue
        owner = frame.parent if frame.function == "[self]" and frame.parent else frame
        path = owner.file_path_short or "?"
        functions[f"{owner.function} ({path})"] += frame.time
        bucket = _bucket(owner.function, path)
        if bucket == "other built-ins":  # isinstance, len, ...: charged to their caller
            caller = owner.parent
            while caller is not None and caller.file_path_short == "<built-in>":
                caller = caller.parent
            if caller is not None:
                bucket = _bucket(caller.function, caller.file_path_short or "?")
        buckets[bucket] += frame.time
    return buckets, functions


def statement_cost(engine: Any, n: int = 3000) -> dict[str, float]:
    """Microseconds per execution of one typical derive-style query (offers of a hop) on the
    same database: built anew each time through the ORM session (what the store does now),
    built once with bind parameters, the same through a Core connection, and raw sqlite3."""
    from sqlalchemy import bindparam, select
    from sqlmodel import Session

    from app.store.models import ElementRow

    cols = (ElementRow.digest, ElementRow.octets, ElementRow.form)
    prebuilt = select(*cols).where(
        ElementRow.hop_iss == bindparam("iss"), ElementRow.hop == bindparam("hop")
    )
    out: dict[str, float] = {}
    with Session(engine) as session, session.begin():
        start = time.perf_counter()
        for i in range(n):
            query = select(*cols).where(ElementRow.hop_iss == "x", ElementRow.hop == str(i))
            session.execute(query).all()
        out["built each call, ORM session"] = (time.perf_counter() - start) / n * 1e6
        start = time.perf_counter()
        for i in range(n):
            session.execute(prebuilt, {"iss": "x", "hop": str(i)}).all()
        out["built once, ORM session"] = (time.perf_counter() - start) / n * 1e6
        conn = session.connection()
        start = time.perf_counter()
        for i in range(n):
            conn.execute(prebuilt, {"iss": "x", "hop": str(i)}).all()
        out["built once, Core connection"] = (time.perf_counter() - start) / n * 1e6
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        sql = "SELECT digest, octets, form FROM element WHERE hop_iss = ? AND hop = ?"
        start = time.perf_counter()
        for i in range(n):
            dbapi.execute(sql, ("x", str(i))).fetchall()
        out["raw sqlite3"] = (time.perf_counter() - start) / n * 1e6
    return out


def batch_reads(engine: Any, raw: RawVerifier, rounds: int = 5) -> dict[str, float]:
    """The batch's reads on the ingested database, as ingest runs them (the hop facts of
    every hop, ``HOPS_PER_QUERY`` at a time; the memories' reads of every element, 256 at a
    time), two ways in the same run: SQLAlchemy's execution of the same prebuilt statements
    (``Row`` objects, the statement's cache key and compiled-cache lookup on every call),
    and ``db.select_rows`` (the driver's SQL compiled once, plain tuples). CPU us per
    element and as a ratio to raw verify's CPU per signature, rounds interleaved."""
    from sqlmodel import Session

    from app.store import derive, host, memory
    from app.store.models import ElementRow

    modules = (derive, host, memory)

    def through_sqlalchemy(session: Any, statement: Any, params: Any = None) -> list[Any]:
        return [tuple(r) for r in session.connection().execute(statement, dict(params or {}))]

    def one_round(session: Any) -> int:
        rows = session.execute(select(ElementRow.digest, ElementRow.hop_iss, ElementRow.hop)).all()
        keys = sorted({(r.hop_iss, r.hop) for r in rows if r.hop_iss is not None})
        digests = [r.digest for r in rows]
        for start in range(0, len(keys), derive.HOPS_PER_QUERY):
            derive.HopFacts.load(session, keys[start : start + derive.HOPS_PER_QUERY])
        for start in range(0, len(digests), 256):
            chunk = digests[start : start + 256]
            memory.stored_rows(session, chunk)
            memory.seen_among(session, digests=chunk)
            memory.cached_signatures(session, chunk, trust="x")
        memory.replay_among(session, hops=keys[:256])
        return len(digests)

    cpu: dict[str, list[float]] = {"SQLAlchemy execution": [], "select_rows": []}
    originals = [m.select_rows for m in modules]  # type: ignore[attr-defined]
    with Session(engine) as session, session.begin():
        for _ in range(rounds):
            for how in cpu:
                for m, original in zip(modules, originals, strict=True):
                    chosen = through_sqlalchemy if how == "SQLAlchemy execution" else original
                    m.select_rows = chosen  # type: ignore[attr-defined]
                try:
                    start = time.process_time()
                    n = one_round(session)
                    cpu[how].append((time.process_time() - start) / n * 1e6)
                finally:
                    for m, original in zip(modules, originals, strict=True):
                        m.select_rows = original  # type: ignore[attr-defined]
            raw.round()
    raw_us = 1e6 / raw.per_cpu_second
    out: dict[str, float] = {"raw verify CPU us": raw_us}
    for how, samples in cpu.items():
        us = sorted(samples)[len(samples) // 2]
        out[f"{how}: CPU us per element"] = us
        out[f"{how}: x raw verify"] = us / raw_us
    return out


def envelope_reading(
    inputs: list[tuple[str, bytes]], elements: int, raw: RawVerifier, rounds: int = 5
) -> dict[str, float]:
    """The envelope stage's reading of the capture (issue 20, item 4) two ways in the same
    run, over the capture's decoded items: every item walked by ``find_items`` and each
    found item's payload written again by ``json.dumps`` (before), and items whose own text
    holds no envelope marker skipped (``may_hold_items``) and the payload written by
    ``orjson`` when its text shows no float (``payload_octets(value, raw)``, now). Both
    hash the octets as ``item_rows`` does. CPU us per ingested element, rounds interleaved
    with raw verify, and as a ratio to raw verify's CPU per signature."""
    import hashlib

    from app.capture.carriers import detect_format
    from app.capture.formats import CaptureItem, read_items
    from app.envelope.extract import DEFAULT_TYPES, find_items, may_hold_items
    from app.ingest.envelope import payload_octets

    items = [
        item
        for name, data in inputs
        for item in read_items(data, name=name, fmt=detect_format(data, name=name))
        if isinstance(item, CaptureItem)
    ]

    def before() -> int:
        found = 0
        for item in items:
            if find_items(item.value, source=item.source, accepted=DEFAULT_TYPES):
                hashlib.sha256(payload_octets(item.value)[0]).digest()
                found += 1
        return found

    def now() -> int:
        found = 0
        for item in items:
            if item.raw is not None and not may_hold_items(item.raw, DEFAULT_TYPES):
                continue
            if find_items(item.value, source=item.source, accepted=DEFAULT_TYPES):
                hashlib.sha256(payload_octets(item.value, item.raw)[0]).digest()
                found += 1
        return found

    ways = {"every item walked, json.dumps": before, "marker gate, orjson": now}
    cpu: dict[str, list[float]] = {how: [] for how in ways}
    counts = set()
    for _ in range(rounds):
        for how, run in ways.items():
            start = time.process_time()
            counts.add(run())
            cpu[how].append((time.process_time() - start) / elements * 1e6)
        raw.round()
    assert len(counts) == 1, f"the two ways found different items: {counts}"
    raw_us = 1e6 / raw.per_cpu_second
    out: dict[str, float] = {
        "capture items": len(items),
        "items with envelope items": counts.pop(),
        "raw verify CPU us": raw_us,
    }
    for how, samples in cpu.items():
        us = sorted(samples)[len(samples) // 2]
        out[f"{how}: CPU us per element"] = us
        out[f"{how}: x raw verify"] = us / raw_us
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--elements", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="smoke run: ~300 items")
    args = parser.parse_args()
    if args.quick:
        args.elements = 300
    try:
        from pyinstrument import Profiler
    except ImportError:
        raise SystemExit("pyinstrument is needed: .venv/bin/pip install pyinstrument") from None

    with interruptible(), tempfile.TemporaryDirectory(prefix="handoff-trace-bench-") as tmp:
        work = Path(tmp)
        cap = make_capture(
            work, elements=args.elements, seed=args.seed, fault_rate=0.02, sample=500
        )
        paths = cap["paths"]
        engine = db.make_engine(f"sqlite:///{work / 'profile.db'}")
        try:
            db.ensure_schema(engine)
            trust = TrustStore.load(paths.trust)
            pipeline = Pipeline(
                engine=engine,
                trust=trust,
                options=VerifyOptions(at=cap["now"], ref_policy=RefPolicy.CHECK_AVAILABLE),
                objects=load_objects(paths.objects),
            )
            raw = RawVerifier(trust, cap["cases"])
            for _ in range(5):
                raw.round()
            statements: Counter[str] = Counter()

            @event.listens_for(engine, "before_cursor_execute")
            def count(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
                statements[_kind(statement)] += 1

            inputs = [(str(p), p.read_bytes()) for p in (paths.out, paths.cbor)]
            freeze_start_up(sum(len(data) for _, data in inputs))  # as the command does
            profiler = Profiler(interval=0.001)
            start = time.perf_counter()
            profiler.start()
            with fewer_collections():  # as the command does while it ingests
                report = ingest(pipeline, inputs, now=cap["now"])
            profiler.stop()
            seconds = time.perf_counter() - start
            for _ in range(5):
                raw.round()
            event.remove(engine, "before_cursor_execute", count)
            per_statement = statement_cost(engine)
            raw.round()
            reads = batch_reads(engine, raw)
            envelopes = envelope_reading(inputs, len(report.verdicts), raw)
        finally:
            engine.dispose()

    items = len(report.verdicts)
    total = sum(statements.values())
    rate = items / seconds
    print(
        f"{items:,} items in {seconds:.1f} s under the profiler: {rate:,.1f} items/s, "
        f"{rate / raw.per_second:.4f} x raw verify ({raw.per_second:,.0f}/s)"
    )
    print(f"SQL statements: {total:,} = {total / items:.1f} per item")
    for kind, n in statements.most_common(20):
        print(f"  {n / items:6.2f} per item  {kind}")
    verify_us = 1e6 / raw.per_second
    print(f"one query (offers of a hop), on the ingested database; raw verify {verify_us:.0f} us:")
    for how, us in per_statement.items():
        print(f"  {us:7.1f} us = {us / verify_us:5.2f} x raw verify  {how}")
    print("the batch's reads (hop facts, memories), same run:")
    for how, value in reads.items():
        print(f"  {value:9.3f}  {how}")
    print("the envelope stage's reading (gate, payload text), same run:")
    for how, value in envelopes.items():
        print(f"  {value:9.3f}  {how}")
    text = profiler.output_text(unicode=False, color=False, show_all=False)
    session = profiler.last_session
    assert session is not None
    buckets, functions = self_time(session.root_frame())
    spent = sum(buckets.values()) or 1.0
    print("self time by where the code lives:")
    for name, t in buckets.most_common():
        print(f"  {100 * t / spent:5.1f} %  {name}")
    print("self time, top functions:")
    for name, t in functions.most_common(12):
        print(f"  {100 * t / spent:5.1f} %  {name}")
    name = "profile_ingest_quick" if args.quick else "profile_ingest"
    print("\n".join(text.splitlines()[:60]))
    path = write_results(
        name,
        {
            "params": vars(args),
            "items": items,
            "seconds_under_profiler": round(seconds, 1),
            "per_second": round(rate, 1),
            "raw_per_second": round(raw.per_second, 1),
            "ratio_to_raw": round(rate / raw.per_second, 4),
            "statements_per_item": {k: round(n / items, 2) for k, n in statements.most_common()},
            "statements_total_per_item": round(total / items, 1),
            "query_microseconds": {k: round(v, 1) for k, v in per_statement.items()},
            "batch_reads": {k: round(v, 3) for k, v in reads.items()},
            "envelope_reading": {k: round(v, 3) for k, v in envelopes.items()},
            "raw_verify_microseconds": round(verify_us, 1),
            "self_time_share": {k: round(t / spent, 4) for k, t in buckets.most_common()},
            "top_functions_share": {k: round(t / spent, 4) for k, t in functions.most_common(30)},
            "profile": text.splitlines(),
        },
    )
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
