"""HTTP ingest: ``handoff-trace serve`` with 1 and 2 workers, 8 concurrent clients.

A JSON Lines capture is generated with the traffic simulator (``app.demo``, fault rate 0.02,
JWS dialogs only: the COSE half of a demo run is a CBOR file and is left out here), cut into
chunks of ``--chunk`` records (20 by default; each record carries one handoff or status
object, so one chunk is ~20 elements), and POSTed as ``application/x-ndjson`` to
``/api/v1/ingest`` of a ``handoff-trace serve`` subprocess on 127.0.0.1 (a free port, a
fresh SQLite file, and a fresh database on a throwaway PostgreSQL cluster, ``tests/pg.py``),
by ``--clients`` threads (8) that each take the next chunk in capture order, for at most
``--seconds`` (60) per run or until the chunks run out. The first ``--warmup`` (8) chunks are sent
before the timed run and not counted, each on a connection of its own and all at once, so
that every worker gets some (a fresh worker's first requests pay imports and SQLAlchemy
statement compiling; sent over one kept-alive connection they all reached one worker, and
the other paid its start inside the timed run, in its p99). An admin bearer token comes
from ``handoff-trace tokens create`` (its last line of output).

Reported per backend and worker count: elements/s (verdicts returned in 200 answers, over the
wall time of the run), requests/s, p50/p99 request latency (client side, whole request), non-200
answers and item errors, the CPU time the server's processes spent per element (every
worker and thread, from ``/proc``) and, on PostgreSQL, its cluster's (``db us``: the
postmaster and its backends), what this script's own clients spent (building, sending and
reading requests, on the same two cores), on SQLite the share of the run's wall time some
worker held the file's one write lock (``lock``, from the service's
``handoff_trace_sqlite_write_lock_*`` metrics: near 100 % the writers, not the cores, set
the rate), and the ratio of elements/s to raw
``cryptography`` verify of a sample of the same capture's signatures, measured in this
process just before and just after each run (one core). Target (issue 20): >= 2,000
elements/s with 2 workers and p99 under 250 ms per request of 100 records (``--chunk 100``).

Servers are started in their own process group and stopped (SIGTERM, then SIGKILL) in
``finally``; SIGTERM/SIGHUP to this script unwind the same way.

    .venv/bin/python bench/http_ingest.py [--db sqlite|postgresql|both] [--seconds 60]
                                          [--clients 8] [--chunk 20] [--quick]
                                          [--workers 1,2] [--rounds 1]

``--workers 2 --rounds 3`` runs only the two-worker server, three times one after another
(a fresh database each time): a run of ~10,000 elements is a few seconds, and runs vary.

Prints a table and writes bench/results/http_ingest.json (``--quick``: http_ingest_quick.json).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from _support import (
    RawCase,
    RawVerifier,
    interruptible,
    postgres,
    raw_case,
    top_element,
    write_results,
)
from handoff_context import TrustStore
from prometheus_client.parser import text_string_to_metric_families

from app.capture.carriers import Carried, read_capture
from app.demo import DemoConfig, DemoPaths, write_demo

ROOT = Path(__file__).resolve().parent.parent
CLI = str(ROOT / ".venv" / "bin" / "handoff-trace")
TARGET_2_WORKERS = 2000.0  # elements/s (issue 20)
TARGET_P99_MS = 250.0  # per request of --chunk 100
ITEMS_PER_DIALOG = 15.4


# --- the capture --------------------------------------------------------------------------


def make_chunks(work: Path, *, elements: int, seed: int, chunk: int, sample: int) -> dict[str, Any]:
    dialogs = max(1, round(elements / ITEMS_PER_DIALOG))
    paths = DemoPaths.beside(work / "capture.jsonl", trust=None, answers=None)
    demo = write_demo(DemoConfig(seed=seed, dialogs=dialogs, fault_rate=0.02, agents=12), paths)
    lines = [ln for ln in paths.out.read_bytes().splitlines() if ln.strip()]
    chunks = [b"\n".join(lines[i : i + chunk]) + b"\n" for i in range(0, len(lines), chunk)]
    stride = max(1, len(lines) // sample)
    cases: list[RawCase] = []
    for n, found in enumerate(read_capture(paths.out.read_bytes(), name="capture")):
        if isinstance(found, Carried) and n % stride == 0 and len(cases) < sample:
            element = top_element(found.value)
            if element is not None:
                cases.append(raw_case(element))
    return {
        "paths": paths,
        "records": len(lines),
        "chunks": chunks,
        "cases": cases,
        "now": demo.suggested_now,
    }


# --- the server ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_token(url: str) -> str:
    done = subprocess.run(
        [CLI, "tokens", "create", "--role", "admin", "--name", "bench", "--db", url],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


@contextmanager
def server(url: str, trust: Path, workers: int, log: Path) -> Iterator[tuple[str, int]]:
    """``handoff-trace serve`` on a free loopback port; yields its base URL and process
    group; always stopped."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(CLI, "serve", "--host", "127.0.0.1", "--port", str(port)),
                *("--workers", str(workers), "--db", url, "--trust", str(trust)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: uvicorn's workers stop with it
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, base, workers, log)
        yield base, proc.pid
    finally:
        stop_group(proc)


def wait_ready(proc: subprocess.Popen[bytes], base: str, workers: int, log: Path) -> None:
    """Until ``serve`` answers readyz (at most 60 s); raises with its log's tail if it
    exits or never gets there."""
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{base}/api/v1/readyz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"serve did not become ready: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    if workers > 1:
        time.sleep(2)  # let every worker finish its start-up, not just the first


def _cpu(picked: Callable[[int, list[str]], bool]) -> float:
    """CPU seconds (user + system) spent so far by the live processes ``picked(pid,
    fields)`` chooses; ``fields`` are those of ``/proc/PID/stat`` after the command name
    (proc(5): 0 the state, 1 the parent's pid, 2 the process group)."""
    ticks = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if picked(int(entry.name), fields):
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def group_cpu(pgid: int) -> float:
    """CPU seconds spent so far by the live processes of process group ``pgid``."""
    return _cpu(lambda _pid, fields: int(fields[2]) == pgid)


def children_cpu(parent: int) -> float:
    """CPU seconds spent so far by ``parent`` and its live children (a PostgreSQL
    cluster's postmaster: its backends, one per connection of the service's pools)."""
    return _cpu(lambda pid, fields: parent in (pid, int(fields[1])))


WRITE_LOCK = {
    "wait": "handoff_trace_sqlite_write_lock_wait_seconds_total",
    "held": "handoff_trace_sqlite_write_lock_held_seconds_total",
    "transactions": "handoff_trace_sqlite_write_transactions_total",
}


def write_lock(base: str, token: str) -> dict[str, float]:
    """The service's SQLite write-lock counters, summed over its workers (``GET
    /api/v1/metrics``; zeros on PostgreSQL)."""
    text = httpx.get(
        f"{base}/api/v1/metrics", headers={"authorization": f"Bearer {token}"}, timeout=30
    ).text
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    return {key: samples[name] for key, name in WRITE_LOCK.items()}


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # any worker left behind
    proc.wait()


# --- the clients --------------------------------------------------------------------------


def load(
    base: str, token: str, chunks: list[bytes], clients: int, seconds: float, *, fresh: bool = False
) -> dict:
    """``clients`` threads send the chunks; ``fresh``: each request on a new connection."""
    lock = threading.Lock()
    state = {"next": 0}
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    errors = [0]
    headers = {"authorization": f"Bearer {token}", "content-type": "application/x-ndjson"}
    stop_at = time.perf_counter() + seconds

    def post(http: httpx.Client, chunk: bytes) -> None:
        t = time.perf_counter()
        try:
            r = http.post("/api/v1/ingest", content=chunk)
        except httpx.HTTPError as exc:
            with lock:
                statuses[type(exc).__name__] += 1
            return
        took = time.perf_counter() - t
        body = r.json() if r.status_code == 200 else None
        with lock:
            latencies.append(took)
            statuses[str(r.status_code)] += 1
            if body is not None:
                outcomes.update(v["outcome"] for v in body["verdicts"])
                errors[0] += len(body["errors"])

    def next_chunk() -> bytes | None:
        with lock:
            i = state["next"]
            if i >= len(chunks) or time.perf_counter() >= stop_at:
                return None
            state["next"] = i + 1
            return chunks[i]

    def client() -> None:
        if fresh:
            while (chunk := next_chunk()) is not None:
                with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
                    post(http, chunk)
            return
        with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
            while (chunk := next_chunk()) is not None:
                post(http, chunk)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    client_cpu = time.process_time() - cpu0
    lat = sorted(latencies)
    elements = sum(outcomes.values())

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return {
        "seconds": round(wall, 2),
        "requests": len(lat),
        "chunks_sent": state["next"],
        "chunks_total": len(chunks),
        "elements": elements,
        "elements_per_second": round(elements / wall, 1),
        "requests_per_second": round(len(lat) / wall, 2),
        "p50_ms": round(pct(0.50), 1),
        "p99_ms": round(pct(0.99), 1),
        "max_ms": round(lat[-1] * 1000, 1) if lat else None,
        "statuses": dict(statuses),
        "outcomes": dict(outcomes),
        "item_errors": errors[0],
        "client_cpu_s": round(client_cpu, 2),
    }


# --- main ---------------------------------------------------------------------------------


def run_one(
    backend: str,
    url: str,
    workers: int,
    cap: dict,
    raw: RawVerifier,
    args: Any,
    work: Path,
    database: int | None = None,
) -> dict:
    """One timed run; ``database``: the PostgreSQL postmaster's pid, whose processes' CPU
    is counted too."""
    token = make_token(url)  # also brings the fresh database to the schema head
    log = work / f"serve-{backend}-{workers}.log"
    raw.round()
    print(f"{backend}, {workers} worker(s): {args.seconds:.0f} s ...", file=sys.stderr)
    warm, chunks = cap["chunks"][: args.warmup], cap["chunks"][args.warmup :]
    with server(url, cap["paths"].trust, workers, log) as (base, group):
        # Untimed: the first requests of a fresh process pay imports and statement compiling.
        load(base, token, warm, len(warm), 120, fresh=True)
        lock = write_lock(base, token)
        db_cpu = 0.0 if database is None else children_cpu(database)
        cpu = group_cpu(group)
        res = load(base, token, chunks, args.clients, args.seconds)
        server_cpu = group_cpu(group) - cpu
        db_cpu = 0.0 if database is None else children_cpu(database) - db_cpu
        lock = {k: v - lock[k] for k, v in write_lock(base, token).items()}
    raw.round()
    raw_ps = statistics.median(raw.samples[-2:])
    ratio = res["elements_per_second"] / raw_ps
    row = {
        "backend": backend,
        "workers": workers,
        "clients": args.clients,
        **res,
        "server_cpu_s": round(server_cpu, 2),
        "server_cpu_us_per_element": round(1e6 * server_cpu / max(1, res["elements"])),
        "database_cpu_us_per_element": round(1e6 * db_cpu / max(1, res["elements"])),
        # The share of the run's wall time that some worker held SQLite's write lock (the
        # two metrics scrapes around the run add a little), and the time spent queueing.
        "write_lock_held_share": round(lock["held"] / res["seconds"], 3),
        "write_lock_wait_s": round(lock["wait"], 2),
        "write_transactions": int(lock["transactions"]),
        "raw_per_second": round(raw_ps, 1),
        "ratio_to_raw": round(ratio, 4),
    }
    if workers == 2:
        met = res["elements_per_second"] >= TARGET_2_WORKERS and res["p99_ms"] < TARGET_P99_MS
        row["target"] = (
            f">= {TARGET_2_WORKERS:.0f}/s, p99 < {TARGET_P99_MS:.0f} ms: "
            f"{'met' if met else 'missed'}"
        )
    return row


def print_table(rows: list[dict]) -> None:
    print(
        f"{'backend':10} {'wk':>2} {'elements':>9} {'s':>6} {'elem/s':>7} {'req/s':>6} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'non-200':>7} {'us/el':>6} {'db us':>6} {'lock':>5} "
        f"{'cli s':>5} {'raw/s':>7} {'x raw':>7} target"
    )
    for r in rows:
        bad = sum(v for k, v in r["statuses"].items() if k != "200")
        print(
            f"{r['backend']:10} {r['workers']:>2} {r['elements']:>9,} {r['seconds']:>6.1f} "
            f"{r['elements_per_second']:>7,.1f} {r['requests_per_second']:>6.1f} "
            f"{r['p50_ms']:>7,.0f} {r['p99_ms']:>7,.0f} {bad:>7} "
            f"{r['server_cpu_us_per_element']:>6,} {r['database_cpu_us_per_element']:>6,} "
            f"{r['write_lock_held_share']:>5.0%} {r['client_cpu_s']:>5.1f} "
            f"{r['raw_per_second']:>7,.0f} "
            f"{r['ratio_to_raw']:>7.4f} {r.get('target', '')}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--seconds", type=float, default=60.0, help="bound per run")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=20, help="records per request")
    parser.add_argument("--elements", type=int, default=20_000, help="capture size (about)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=8, help="untimed chunks sent first")
    parser.add_argument("--quick", action="store_true", help="smoke run: 5 s per run, SQLite")
    parser.add_argument(
        "--workers", default="1,2", help="worker counts to run, comma-separated (1,2)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of each worker count, one after another"
    )
    args = parser.parse_args()
    try:
        args.workers = [int(w) for w in str(args.workers).split(",")]
    except ValueError:
        parser.error("--workers takes worker counts such as 1,2")
    if args.quick:
        args.seconds, args.elements, args.db = 5.0, 1_000, "sqlite"
    if args.seconds <= 0 or min(args.clients, args.chunk, args.elements, args.rounds) < 1:
        parser.error("--seconds, --clients, --chunk, --elements and --rounds must be positive")
    if min(args.workers) < 1:
        parser.error("--workers must be positive")
    backends = ["sqlite", "postgresql"] if args.db == "both" else [args.db]

    rows: list[dict] = []
    with interruptible(), tempfile.TemporaryDirectory(prefix="handoff-trace-http-") as tmp:
        work = Path(tmp)
        cap = make_chunks(
            work, elements=args.elements, seed=args.seed, chunk=args.chunk, sample=1000
        )
        print(
            f"capture: {cap['records']:,} JSON Lines records in {len(cap['chunks']):,} chunks",
            file=sys.stderr,
        )
        raw = RawVerifier(TrustStore.load(cap["paths"].trust), cap["cases"])
        raw.round()  # warm-up
        raw.samples.clear()
        runs = [(b, w, r) for r in range(args.rounds) for b in backends for w in args.workers]
        for backend, workers, round_ in runs:
            if backend == "sqlite":
                url = f"sqlite:///{work / f'http-{workers}-{round_}.db'}"
                rows.append(run_one(backend, url, workers, cap, raw, args, work))
            else:
                with postgres() as cluster:
                    url = cluster.create_database("bench")
                    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
                    rows.append(run_one(backend, url, workers, cap, raw, args, work, postmaster))
            print_table(rows[-1:])
    print_table(rows)
    name = "http_ingest_quick" if args.quick else "http_ingest"
    path = write_results(name, {"params": vars(args), "results": rows})
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
