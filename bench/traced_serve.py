"""``handoff-trace`` under tracemalloc, for ``bench/soak.py --tracemalloc``: the soak runs
the server through this script with ``SOAK_TRACEMALLOC`` naming a report file, and sends
it SIGUSR1 after the warm-up and every minute; the first signal takes the baseline
snapshot, each later one appends the 25 source lines whose live allocations grew most
since it (Python allocations only: SQLite's page cache and other C memory do not show)."""

from __future__ import annotations

import os
import signal
import sys
import time
import tracemalloc
from types import FrameType

from app.cli import main

FRAMES = 1  # the allocating line; more frames cost memory that would show in the RSS


def _on_signal(path: str) -> None:
    baseline: list[tracemalloc.Snapshot] = []

    def report(_signum: int, _frame: FrameType | None) -> None:
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        traced, peak = tracemalloc.get_traced_memory()
        with open(path, "a", encoding="utf-8") as out:
            out.write(f"\n== {time.strftime('%H:%M:%S')} traced {traced / 2**20:.1f} MiB")
            out.write(f" (peak {peak / 2**20:.1f} MiB; tracemalloc itself ")
            out.write(f"{tracemalloc.get_tracemalloc_memory() / 2**20:.1f} MiB)\n")
            if not baseline:
                baseline.append(snapshot)
                out.write("baseline\n")
                return
            for stat in snapshot.compare_to(baseline[0], "lineno")[:25]:
                out.write(f"{stat}\n")

    signal.signal(signal.SIGUSR1, report)


if __name__ == "__main__":
    tracemalloc.start(FRAMES)
    _on_signal(os.environ["SOAK_TRACEMALLOC"])
    sys.exit(main(sys.argv[1:]))
