"""Soak (issue 6, item 7): sustained ingest with concurrent dashboard readers against a real
``handoff-trace serve``, bounded in time and in requests, on loopback only.

- **server**: ``handoff-trace serve --host 127.0.0.1`` on a free port, in its own process
  group, on a fresh SQLite file (default) or a fresh database on a throwaway PostgreSQL
  cluster (``--db postgresql``, ``tests/pg.py``), with the trust file of the traffic below.
- **traffic**: the demo simulator (``app.demo``, signed with ``handoff_context``; fault
  rate 0.02, 12 agents, its clock starting now) writes a JSON Lines capture large enough for
  the run; its records are cut into chunks of ``--chunk`` (10).
- **ingest clients** (``--ingest-clients``, 3): each POSTs the next chunk to
  ``/api/v1/ingest`` with an ``ingest`` token, paced so that together they offer
  ``--rate`` (40) elements/s: a sustained load below the service's capacity (~100/s on
  SQLite, BENCHMARKS.md), so reader latency measures sharing, not a queue that only grows.
- **readers** (``--readers``, 4): half browse the dashboard with a logged-in ``read``
  session (overview, dialogs, a dialog, hops with filters, a hop, the triage queue, agents,
  search), half read the API with a ``read`` token (hops, flags, dialogs, a dialog, a hop,
  metrics), pausing ``--think`` (0.2 s) between requests; dialogs and offers come from what
  the API has returned so far.
- **measured**: every request's status and latency, by route class (ingest, page, api);
  an error is a transport error, any status other than the one expected (200; a session
  sent back to the login page counts as an error), or an item error inside a 200 ingest
  answer. The resident memory (VmRSS) of every process of the server's group is sampled
  each second: first (after a warm-up of 10 % of the run), last, max, and the slope of a
  least-squares line through the samples after the warm-up.

``--tracemalloc PATH`` runs the server under tracemalloc (``bench/traced_serve.py``) and
appends to PATH, after the warm-up and every minute, the source lines whose live Python
allocations grew most since the warm-up (it slows the server: take latencies from an
untraced run).

Stops at ``--seconds`` (300) or ``--max-requests`` (100,000), whichever comes first. The
server and the cluster are stopped on every exit, Ctrl-C and SIGTERM included.

    .venv/bin/python bench/soak.py [--seconds 300] [--db sqlite|postgresql] [--rate 40]
                                   [--ingest-clients 3] [--readers 4] [--workers 1]
                                   [--tracemalloc PATH]

Prints a table and writes bench/results/soak.json (``--results NAME`` for another name).
Exits 1 when any error was recorded.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import httpx
from _support import interruptible, postgres, write_results
from http_ingest import CLI, ITEMS_PER_DIALOG, free_port, stop_group, wait_ready

from app.demo import DemoConfig, DemoPaths, write_demo

WARMUP_SHARE = 0.1
TRACED_SERVE = Path(__file__).with_name("traced_serve.py")
TRACE_EVERY = 60.0  # seconds between tracemalloc reports after the warm-up


# --- the server ---------------------------------------------------------------------------


def cli(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [CLI, *args], input=stdin, capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(f"handoff-trace {args[0]} failed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip().splitlines()[-1]


@contextmanager
def server(
    url: str, trust: Path, workers: int, log: Path, traced: Path | None = None
) -> Iterator[tuple[str, int]]:
    """``handoff-trace serve`` on a free loopback port; yields (base URL, pid); always
    stopped, with every process of its group. ``traced``: under tracemalloc, reporting to
    that file (``bench/traced_serve.py``)."""
    port = free_port()
    command = [CLI] if traced is None else [sys.executable, str(TRACED_SERVE)]
    env = {**os.environ, **({} if traced is None else {"SOAK_TRACEMALLOC": str(traced)})}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(*command, "serve", "--host", "127.0.0.1", "--port", str(port)),
                *("--workers", str(workers), "--db", url, "--trust", str(trust)),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, base, workers, log)
        yield base, proc.pid
    finally:
        stop_group(proc)


def group_rss_mib(pgid: int) -> dict[int, float]:
    """VmRSS of every live process in the process group ``pgid``, MiB, by pid."""
    found: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # Fields after the command (which may hold spaces): state ppid pgrp ...
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    found[int(entry.name)] = int(line.split()[1]) / 1024
        except (OSError, ValueError, IndexError):
            continue
    return found


# --- recording ----------------------------------------------------------------------------


@dataclass
class Record:
    """Every request's outcome, shared by the client threads."""

    stop_at: float
    max_requests: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    latencies: dict[str, list[float]] = field(default_factory=dict)  # by route
    errors: Counter[str] = field(default_factory=Counter)  # "route: what"
    requests: int = 0
    elements: Counter[str] = field(default_factory=Counter)  # ingest verdict outcomes
    dialogs: list[str] = field(default_factory=list)
    offers: list[str] = field(default_factory=list)

    def running(self) -> bool:
        return time.monotonic() < self.stop_at and self.requests < self.max_requests

    def call(
        self,
        route: str,
        send: Callable[[], httpx.Response],
        check: Callable[[httpx.Response], str | None] | None = None,
    ) -> httpx.Response | None:
        """Send one request and record it; returns the response when it was as expected."""
        with self.lock:
            if self.requests >= self.max_requests:
                return None
            self.requests += 1
        t = time.perf_counter()
        try:
            response = send()
        except httpx.HTTPError as exc:
            with self.lock:
                self.errors[f"{route}: {type(exc).__name__}"] += 1
            return None
        took = time.perf_counter() - t
        problem = None if response.status_code == 200 else f"HTTP {response.status_code}"
        if problem is None and check is not None:
            problem = check(response)
        with self.lock:
            self.latencies.setdefault(route, []).append(took)
            if problem:
                self.errors[f"{route}: {problem}"] += 1
        return None if problem else response

    def learn(self, dialogs: list[str], offers: list[str]) -> None:
        with self.lock:
            for name, seen in ((dialogs, self.dialogs), (offers, self.offers)):
                for item in name:
                    if len(seen) < 5000:
                        seen.append(item)
                    else:
                        seen[random.randrange(len(seen))] = item

    def pick(self, what: str) -> str | None:
        with self.lock:
            seen = self.dialogs if what == "dialog" else self.offers
            return random.choice(seen) if seen else None


# --- clients ------------------------------------------------------------------------------


def ingest_client(
    base: str,
    token: str,
    chunks: list[tuple[bytes, int]],
    rec: Record,
    per_second: float,
    state: dict[str, int],
) -> None:
    headers = {"authorization": f"Bearer {token}", "content-type": "application/x-ndjson"}

    def check(response: httpx.Response) -> str | None:
        body = response.json()
        with rec.lock:
            rec.elements.update(v["outcome"] for v in body["verdicts"])
        return f"{len(body['errors'])} item errors" if body["errors"] else None

    with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
        next_at = time.monotonic()
        while rec.running():
            with rec.lock:
                i = state["next"]
                state["next"] = i + 1
            if i >= len(chunks):
                return
            body, records = chunks[i]
            rec.call(
                "POST /api/v1/ingest", partial(http.post, "/api/v1/ingest", content=body), check
            )
            next_at += records / per_second
            time.sleep(max(0.0, next_at - time.monotonic()))


def api_reader(base: str, token: str, rec: Record, think: float, rng: random.Random) -> None:
    def learn(response: httpx.Response) -> str | None:
        hops = response.json()["hops"]
        rec.learn([h["dialog"] for h in hops], [h["offer"] for h in hops])
        return None

    with httpx.Client(
        base_url=base, headers={"authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        while rec.running():
            roll = rng.random()
            dialog, offer = rec.pick("dialog"), rec.pick("offer")
            if roll < 0.3 or dialog is None:
                state = rng.choice(("accepted", "completed", "offered", "failed", "canceled"))
                rec.call(
                    "GET /api/v1/hops",
                    partial(http.get, "/api/v1/hops", params={"state": state, "limit": 50}),
                    learn,
                )
            elif roll < 0.45:
                rec.call(
                    "GET /api/v1/flags",
                    lambda: http.get("/api/v1/flags", params={"status": "open"}),
                )
            elif roll < 0.6:
                rec.call(
                    "GET /api/v1/dialogs/{dialog}", partial(http.get, f"/api/v1/dialogs/{dialog}")
                )
            elif roll < 0.75 and offer is not None:
                rec.call("GET /api/v1/hops/{offer}", partial(http.get, f"/api/v1/hops/{offer}"))
            elif roll < 0.85:
                rec.call(
                    "GET /api/v1/dialogs", lambda: http.get("/api/v1/dialogs", params={"limit": 50})
                )
            elif roll < 0.95:
                rec.call(
                    "GET /api/v1/hops?dialog",
                    partial(http.get, "/api/v1/hops", params={"dialog": dialog}),
                    learn,
                )
            else:
                rec.call("GET /api/v1/metrics", lambda: http.get("/api/v1/metrics"))
            time.sleep(think)


PAGES: list[tuple[str, Callable[[str | None, str | None, random.Random], str | None]]] = [
    ("GET /", lambda d, o, r: "/"),
    ("GET /dialogs", lambda d, o, r: "/dialogs"),
    ("GET /dialogs/{dialog}", lambda d, o, r: d and f"/dialogs/{d}"),
    ("GET /hops", lambda d, o, r: "/hops?state=" + r.choice(("", "unresolved", "completed"))),
    ("GET /hops/{offer}", lambda d, o, r: o and f"/hops/{o}"),
    ("GET /flags", lambda d, o, r: "/flags?status=open"),
    ("GET /agents", lambda d, o, r: "/agents"),
    ("GET /search", lambda d, o, r: o and f"/search?q={o[:8]}"),
]


def page_reader(base: str, cookie: str, rec: Record, think: float, rng: random.Random) -> None:
    def html(response: httpx.Response) -> str | None:
        return None if "</html>" in response.text else "not a whole page"

    with httpx.Client(base_url=base, cookies={"ht_session": cookie}, timeout=60) as http:
        while rec.running():
            route, path_for = rng.choice(PAGES)
            path = path_for(rec.pick("dialog"), rec.pick("offer"), rng)
            if path is not None:
                rec.call(route, partial(http.get, path), html)
            time.sleep(think)


def login(base: str, username: str, password: str) -> str:
    with httpx.Client(base_url=base, timeout=30) as http:
        response = http.post(
            "/login", data={"username": username, "password": password, "next": "/"}
        )
        cookie = response.cookies.get("ht_session")
        if response.status_code != 303 or not cookie:
            raise RuntimeError(f"login failed: HTTP {response.status_code}")
        return cookie


# --- the run ------------------------------------------------------------------------------


def make_chunks(work: Path, elements: int, chunk: int, seed: int) -> tuple[DemoPaths, list]:
    paths = DemoPaths.beside(work / "capture.jsonl", trust=None, answers=None)
    dialogs = max(1, round(elements / ITEMS_PER_DIALOG))
    config = DemoConfig(
        seed=seed, dialogs=dialogs, fault_rate=0.02, agents=12, start=int(time.time())
    )
    write_demo(config, paths)
    lines = [ln for ln in paths.out.read_bytes().splitlines() if ln.strip()]
    chunks = [
        (b"\n".join(lines[i : i + chunk]) + b"\n", len(lines[i : i + chunk]))
        for i in range(0, len(lines), chunk)
    ]
    return paths, chunks


def percentiles(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values)
    if not ms:
        return {}
    at = lambda p: ms[min(len(ms) - 1, int(p * len(ms)))]  # noqa: E731
    return {
        "count": len(ms),
        "p50_ms": round(at(0.5), 1),
        "p90_ms": round(at(0.9), 1),
        "p99_ms": round(at(0.99), 1),
        "max_ms": round(ms[-1], 1),
    }


def route_class(route: str) -> str:
    if "ingest" in route:
        return "ingest"
    return "api" if "/api/" in route else "page"


def memory_report(samples: list[tuple[float, float]], seconds: float) -> dict[str, float]:
    """First/last/max RSS after the warm-up and the least-squares slope, MiB and MiB/min."""
    steady = [(t, m) for t, m in samples if t >= seconds * WARMUP_SHARE] or samples
    ts, ms = [t for t, _ in steady], [m for _, m in steady]
    slope = statistics.linear_regression(ts, ms).slope * 60 if len(steady) > 2 else 0.0
    return {
        "at_start_mib": round(samples[0][1], 1),
        "first_mib": round(ms[0], 1),
        "last_mib": round(ms[-1], 1),
        "max_mib": round(max(m for _, m in samples), 1),
        "slope_mib_per_min": round(slope, 2),
        "samples": len(samples),
    }


def run(args: argparse.Namespace, url: str, work: Path) -> dict:
    paths, chunks = make_chunks(
        work, int(args.rate * args.seconds * 1.2) + 200, args.chunk, args.seed
    )
    print(
        f"capture: {sum(n for _, n in chunks):,} records in {len(chunks):,} chunks", file=sys.stderr
    )
    ingest_token = cli("tokens", "create", "--role", "ingest", "--name", "soak-ingest", "--db", url)
    read_token = cli("tokens", "create", "--role", "read", "--name", "soak-read", "--db", url)
    password = "soak-password-" + os.urandom(8).hex()
    cli(
        "users",
        "create",
        "--username",
        "soak",
        "--role",
        "read",
        "--password-stdin",
        "--db",
        url,
        stdin=password + "\n",
    )
    traced = Path(args.tracemalloc).resolve() if args.tracemalloc else None
    with server(url, paths.trust, args.workers, work / "serve.log", traced) as (base, pgid):
        cookie = login(base, "soak", password)
        rec = Record(stop_at=time.monotonic() + args.seconds, max_requests=args.max_requests)
        state = {"next": 0}
        threads = [
            threading.Thread(
                target=ingest_client,
                args=(base, ingest_token, chunks, rec, args.rate / args.ingest_clients, state),
                daemon=True,
            )
            for _ in range(args.ingest_clients)
        ]
        for n in range(args.readers):
            reader = page_reader if n % 2 == 0 else api_reader
            secret = cookie if n % 2 == 0 else read_token
            threads.append(
                threading.Thread(
                    target=reader,
                    args=(base, secret, rec, args.think, random.Random(f"{args.seed}:{n}")),
                    daemon=True,
                )
            )
        t0 = time.monotonic()
        samples: list[tuple[float, float]] = []
        per_process: dict[int, list[float]] = {}
        next_trace = args.seconds * WARMUP_SHARE
        for th in threads:
            th.start()
        while any(th.is_alive() for th in threads):
            rss = group_rss_mib(pgid)
            samples.append((time.monotonic() - t0, sum(rss.values())))
            for pid, mib in rss.items():
                per_process.setdefault(pid, []).append(mib)
            if traced is not None and samples[-1][0] >= next_trace:
                os.kill(pgid, signal.SIGUSR1)
                next_trace += TRACE_EVERY
            time.sleep(1.0)
        wall = time.monotonic() - t0
        if traced is not None:
            os.kill(pgid, signal.SIGUSR1)
            time.sleep(5)  # the report is written before the server is stopped
        for th in threads:
            th.join()
    by_route = {route: percentiles(v) for route, v in sorted(rec.latencies.items())}
    classes: dict[str, list[float]] = {}
    for route, values in rec.latencies.items():
        classes.setdefault(route_class(route), []).extend(values)
    elements = sum(rec.elements.values())
    return {
        "seconds": round(wall, 1),
        "requests": rec.requests,
        "errors": dict(rec.errors),
        "error_count": sum(rec.errors.values()),
        "elements": elements,
        "elements_per_second": round(elements / wall, 1),
        "outcomes": dict(rec.elements),
        "chunks_sent": min(state["next"], len(chunks)),
        "chunks_total": len(chunks),
        "by_class": {c: percentiles(v) for c, v in sorted(classes.items())},
        "by_route": by_route,
        "rss": memory_report(samples, wall),
        "rss_series": [
            (round(t, 1), round(m, 1)) for t, m in samples[:: max(1, len(samples) // 60)]
        ],
        "processes": {str(pid): round(max(v), 1) for pid, v in per_process.items()},
    }


def print_report(res: dict) -> None:
    print(f"{'route':32} {'count':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for title, rows in (("class", res["by_class"]), ("route", res["by_route"])):
        for name, p in rows.items():
            label = name if title == "route" else f"[{name}]"
            print(
                f"{label:32} {p['count']:>6} {p['p50_ms']:>8.1f} {p['p90_ms']:>8.1f} "
                f"{p['p99_ms']:>8.1f} {p['max_ms']:>8.1f}"
            )
    r = res["rss"]
    print(
        f"{res['requests']:,} requests in {res['seconds']} s, {res['elements']:,} elements "
        f"({res['elements_per_second']}/s), errors: {res['error_count']} {res['errors'] or ''}"
    )
    print(
        f"server RSS MiB: start {r['at_start_mib']}, after warm-up {r['first_mib']}, "
        f"last {r['last_mib']}, max {r['max_mib']}, slope {r['slope_mib_per_min']} MiB/min"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--max-requests", type=int, default=100_000)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--rate", type=float, default=40.0, help="elements/s offered in all")
    parser.add_argument("--ingest-clients", type=int, default=3)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--think", type=float, default=0.2, help="readers' pause, s")
    parser.add_argument("--chunk", type=int, default=10, help="records per ingest request")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--results", default="soak", help="name of the results file")
    parser.add_argument(
        "--tracemalloc",
        metavar="PATH",
        help="run the server under tracemalloc and append its allocation growth to PATH",
    )
    args = parser.parse_args()
    positive = (
        args.seconds,
        args.max_requests,
        args.rate,
        args.ingest_clients,
        args.chunk,
        args.workers,
    )
    if min(positive) <= 0 or args.readers < 0 or args.think < 0:
        parser.error(
            "--seconds, --max-requests, --rate, --ingest-clients, --chunk and "
            "--workers must be positive; --readers and --think not negative"
        )
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.results):
        parser.error("--results: letters, digits, '.', '_' and '-' only")

    with interruptible(), ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="handoff-trace-soak-")))
        if args.db == "sqlite":
            url = f"sqlite:///{work / 'soak.db'}"
        else:
            url = stack.enter_context(postgres()).create_database("soak")
        res = run(args, url, work)
    print_report(res)
    path = write_results(args.results, {"params": vars(args), **res})
    print(f"written {path}", file=sys.stderr)
    sys.exit(1 if res["error_count"] else 0)


if __name__ == "__main__":
    main()
