"""Peak RSS of ``handoff-trace ingest`` as the capture file grows (does memory stream?).

For each size in ``--sizes`` (MiB, default 5 20 50) a capture is generated with the traffic
simulator (``app.demo``, fault rate 0.02: the JSON Lines file plus its CBOR file, together
about that size), and ``handoff-trace ingest --db sqlite:///fresh.db --trust T X.jsonl
X.cbor`` runs as a subprocess. Every ``--poll`` seconds this script reads the child's
``VmRSS`` and ``VmHWM`` (peak) from ``/proc/PID/status`` and counts the verdicts committed so
far in the SQLite file (items are committed in batches of up to 256). A whole 50 MiB file
takes minutes to ingest (see BENCHMARKS.md for the rate): each run is stopped after
``--budget`` seconds (default 60; 0: run to the end) with SIGTERM.

Reported per size: RSS once the first verdict is committed (start-up, plus whatever is read
before ingest proper starts: the whole input, before ingest streamed), RSS and peak at the
end, elements done, and the growth per 1,000 elements after the first verdict. Pass a size
of 1000 or more to measure a 1 GB capture itself (for ``--budget`` seconds of its ingest).
The 1 GB figure printed at the end is an EXTRAPOLATION, labelled as such: the up-front RSS
fitted linearly against file size, plus the per-element growth of the run that ingested the
most elements times the elements a 1 GB capture holds: an upper bound, as the process's
caches (bounded: parsed elements, verified signatures, the verdict window, SQLite's page
cache) stop growing once full.
Target (issue 5): a 1 GB capture ingests under 500 MB peak RSS.

    .venv/bin/python bench/ingest_memory.py [--sizes 5 20 50] [--budget 60] [--quick]

Prints a table and writes bench/results/ingest_memory.json (``--quick``: sizes 1 2, 10 s).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _support import ROOT, interruptible, write_results

from app.demo import DemoConfig, DemoPaths, write_demo

CLI = str(ROOT / ".venv" / "bin" / "handoff-trace")
DIALOGS_PER_MIB = 6494 / 99.7  # measured by ingest_bulk.py (seed 1, fault rate 0.02)
ELEMENTS_PER_MIB = 100_020 / 99.7
TARGET_MIB = 500 * 1e6 / 2**20  # "500 MB"
GB_IN_MIB = 1e9 / 2**20


def proc_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    rss = hwm = float("nan")
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    return rss, hwm


def verdicts(db: Path) -> int | None:
    if not db.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as c:
            return int(c.execute("SELECT count(*) FROM verdict").fetchone()[0])
    except sqlite3.Error:
        return None


def run_size(work: Path, mib: float, budget: float, poll: float) -> dict[str, Any]:
    out = work / f"cap{mib:g}" / "capture.jsonl"
    out.parent.mkdir()
    paths = DemoPaths.beside(out, trust=None, answers=None)
    dialogs = max(1, round(mib * DIALOGS_PER_MIB))
    write_demo(DemoConfig(seed=1, dialogs=dialogs, fault_rate=0.02, agents=12), paths)
    size = (paths.out.stat().st_size + paths.cbor.stat().st_size) / 2**20
    db = out.parent / "ingest.db"
    url = f"sqlite:///{db}"
    subprocess.run(  # create the schema first, so the poller can read the verdict table
        [CLI, "tokens", "list", "--db", url], capture_output=True, check=True
    )
    cmd = [CLI, "ingest", "--db", url, "--trust", str(paths.trust), str(paths.out)]
    cmd.append(str(paths.cbor))
    print(f"{size:.1f} MiB capture, ingesting for up to {budget:g} s ...", file=sys.stderr)
    samples: list[tuple[float, float, float, int | None]] = []  # (t, rss, hwm, verdicts)
    first: tuple[float, float, float, int | None] | None = None
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    finished = False
    try:
        while True:
            time.sleep(poll)
            t = time.perf_counter() - t0
            rss, hwm = proc_mib(proc.pid)
            done = proc.poll() is not None
            if done:
                finished = True
                break
            n = verdicts(db)
            samples.append((t, rss, hwm, n))
            if first is None and n:
                first = samples[-1]
            if budget and t >= budget:
                break
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
    if finished and proc.returncode not in (0, 1):
        raise SystemExit(f"ingest failed ({proc.returncode}): {stderr[-1000:]}")
    last = samples[-1] if samples else (0.0, float("nan"), float("nan"), None)
    n_end = verdicts(db) or 0
    growth = None
    if first is not None and last[3] and last[3] > (first[3] or 0):
        growth = (last[1] - first[1]) / (last[3] - (first[3] or 0)) * 1000
    return {
        "target_mib": mib,
        "capture_mib": round(size, 1),
        "capture_elements_estimate": round(size * ELEMENTS_PER_MIB),
        "finished": finished,
        "seconds": round(last[0], 1),
        "elements_done": n_end,
        "rss_at_first_verdict_mib": round(first[1], 1) if first else None,
        "seconds_to_first_verdict": round(first[0], 1) if first else None,
        "rss_end_mib": round(last[1], 1),
        "peak_rss_mib": round(max(s[2] for s in samples), 1) if samples else None,
        "rss_growth_mib_per_1000_elements": None if growth is None else round(growth, 2),
        "samples": [
            (round(t, 1), round(r, 1), n) for t, r, _, n in samples[:: max(1, len(samples) // 30)]
        ],
    }


def extrapolate(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    pts = [(r["capture_mib"], r["rss_at_first_verdict_mib"]) for r in rows]
    pts = [(x, y) for x, y in pts if y is not None]
    # The growth of the run that ingested the most elements: in a short run the process's
    # bounded caches are still filling, which is not growth that continues.
    measured = [r for r in rows if r["rss_growth_mib_per_1000_elements"] is not None]
    if len(pts) < 2 or not measured:
        return None
    longest = max(measured, key=lambda r: r["elements_done"])
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    base = my - slope * mx
    upfront = base + slope * GB_IN_MIB
    per_k = longest["rss_growth_mib_per_1000_elements"]
    elements = GB_IN_MIB * ELEMENTS_PER_MIB
    total = upfront + per_k * elements / 1000
    return {
        "label": "EXTRAPOLATED, not measured",
        "upfront_mib_per_capture_mib": round(slope, 2),
        "upfront_base_mib": round(base, 1),
        "upfront_at_1gb_mib": round(upfront),
        "growth_mib_per_1000_elements_used": per_k,
        "elements_in_1gb": round(elements),
        "peak_at_1gb_mib": round(total),
        "target": f"< {TARGET_MIB:.0f} MiB: {'met' if total < TARGET_MIB else 'missed'}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=float, nargs="+", default=[5, 20, 50], help="MiB")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per size; 0: all")
    parser.add_argument("--poll", type=float, default=0.5)
    parser.add_argument("--quick", action="store_true", help="sizes 1 and 2 MiB, 10 s each")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.budget = [1, 2], 10.0
    if any(s <= 0 for s in args.sizes) or args.budget < 0 or args.poll <= 0:
        parser.error("--sizes and --poll must be positive, --budget >= 0")
    rows = []
    with interruptible(), tempfile.TemporaryDirectory(prefix="handoff-trace-mem-") as tmp:
        for mib in args.sizes:
            rows.append(run_size(Path(tmp), mib, args.budget, args.poll))
    ext = extrapolate(rows)
    print(
        f"{'capture':>9} {'done':>13} {'s':>6} {'RSS at 1st':>11} {'RSS end':>8} "
        f"{'peak':>7} {'MiB/1k el':>9}"
    )
    nan = float("nan")
    for r in rows:
        done = f"{r['elements_done']:,}/~{r['capture_elements_estimate']:,}"
        first = r["rss_at_first_verdict_mib"]
        first = nan if first is None else first
        growth = r["rss_growth_mib_per_1000_elements"]
        growth = nan if growth is None else growth
        peak = r["peak_rss_mib"] or nan
        print(
            f"{r['capture_mib']:>5.1f} MiB {done:>13} {r['seconds']:>6.1f} "
            f"{first:>7.0f} MiB {r['rss_end_mib']:>4.0f} MiB {peak:>3.0f} MiB {growth:>9.2f}"
        )
    if ext:
        print(
            f"1 GB capture, EXTRAPOLATED: ~{ext['upfront_at_1gb_mib']:,} MiB before the first "
            f"verdict + {ext['growth_mib_per_1000_elements_used']} MiB per 1,000 elements x "
            f"{ext['elements_in_1gb']:,} = ~{ext['peak_at_1gb_mib']:,} MiB peak; {ext['target']}"
        )
    name = "ingest_memory_quick" if args.quick else "ingest_memory"
    path = write_results(name, {"params": vars(args), "results": rows, "extrapolation": ext})
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
