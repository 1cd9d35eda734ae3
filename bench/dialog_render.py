"""The dialog page at 2,000 and 20,000 hops: server time, HTML size, and time until Chromium
can use the page. Goals (issue 14): under 1 s at 2,000 hops and under 2 s at 20,000.

Each dialog is built by ``tests/web/big_dialog.py``: really signed Ed25519 offers naming
their parent as ``prev`` (a bushy tree nine levels deep, one path 60 hops long, 1 % failed,
0.2 % flagged), written straight into a fresh SQLite store. The service is served by uvicorn
on a loopback port (the browser tests' ``serve_store``), a read user logs in through the
form, then for each dialog:

- server time: ``GET /dialogs/{dialog}`` by httpx over loopback with the session cookie,
  one cold request then ``--repeat`` (5) timed ones (median and best);
- HTML size of the answer;
- time until usable: Chromium (Debian's, headless) navigates to the page and waits until
  the tree's first fold/unfold control is visible and the document is interactive; the
  median of ``--repeat`` navigations, and the browser's own DOMContentLoaded time;
- a search for the deep hop (``?q=needle``), server time only.

Server times are also given in units of one raw ``cryptography`` Ed25519 verify of the
dialog's own offers, measured in the same run.

    .venv/bin/python bench/dialog_render.py [--repeat 5] [--sizes 2000,20000]

Prints a table and writes bench/results/dialog_render.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _support import interruptible, write_results
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from handoff_context import b64url_decode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, PASSWORD, serve_store
from tests.web.big_dialog import build_big

GOALS = {2000: 1.0, 20000: 2.0}


def _verify_seconds(store: Path, sample: int = 500) -> float:
    """Seconds for one raw Ed25519 verify of the store's own offers (median of 3 rounds)."""
    import json
    import sqlite3

    with sqlite3.connect(store) as conn:
        rows = conn.execute("SELECT octets FROM element LIMIT ?", (sample,)).fetchall()
    trust = json.loads((store.parent / "trust.json").read_text())
    keys = {
        i["id"]: Ed25519PublicKey.from_public_bytes(b64url_decode(i["keys"][0]["x"], what="x"))
        for i in trust["issuers"]
    }
    jobs = []
    for (octets,) in rows:
        head, body, sig = octets.decode().split(".")
        iss = json.loads(b64url_decode(body, what="payload"))["iss"]
        jobs.append((keys[iss], b64url_decode(sig, what="sig"), f"{head}.{body}".encode()))
    rounds = []
    for _ in range(3):
        start = time.perf_counter()
        for key, sig, data in jobs:
            key.verify(sig, data)
        rounds.append((time.perf_counter() - start) / len(jobs))
    return statistics.median(rounds)


def _server(client: httpx.Client, path: str, repeat: int) -> dict[str, Any]:
    cold = time.perf_counter()
    first = client.get(path)
    cold = time.perf_counter() - cold
    assert first.status_code == 200, first.status_code
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        answer = client.get(path)
        times.append(time.perf_counter() - start)
    return {
        "cold_s": round(cold, 3),
        "median_s": round(statistics.median(times), 3),
        "best_s": round(min(times), 3),
        "html_bytes": len(answer.content),
        "items_drawn": answer.text.count('<li class="n '),
    }


def _browser(page: Any, url: str, repeat: int) -> dict[str, Any]:
    usable, loaded = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        page.goto(url, wait_until="domcontentloaded")
        page.wait_for_selector("ul.tree a.tog", state="visible")
        usable.append(time.perf_counter() - start)
        loaded.append(
            page.evaluate(
                "performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd / 1000"
            )
        )
    return {
        "usable_median_s": round(statistics.median(usable), 3),
        "usable_best_s": round(min(usable), 3),
        "dom_content_loaded_s": round(statistics.median(loaded), 3),
    }


def run(size: int, repeat: int, root: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    started = time.perf_counter()
    big = build_big(root, hops=size)
    built = time.perf_counter() - started
    verify = _verify_seconds(big.db)
    with serve_store(big.db, big.trust, big.now) as base, sync_playwright() as playwright:
        with httpx.Client(base_url=base, timeout=60) as client:
            login = {"username": "otto", "password": PASSWORD, "next": "/"}
            assert client.post("/login", data=login).status_code in (200, 303)
            page_path = f"/dialogs/{big.dialog}"
            server = _server(client, page_path, repeat)
            search = _server(client, page_path + "?q=needle", repeat)
            cookie = client.cookies.get("ht_session")
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = chromium.new_context(viewport={"width": 1440, "height": 900})
            context.add_cookies([{"name": "ht_session", "value": cookie, "url": base}])
            browser = _browser(context.new_page(), base + page_path, repeat)
            context.close()
        finally:
            chromium.close()
    return {
        "hops": size,
        "build_s": round(built, 1),
        "raw_verify_us": round(verify * 1e6, 1),
        "page": {**server, "median_in_verifies": round(server["median_s"] / verify)},
        "search": {**search, "median_in_verifies": round(search["median_s"] / verify)},
        "browser": browser,
        "goal_s": GOALS.get(size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default="2000,20000")
    args = parser.parse_args()
    results = []
    with interruptible(), tempfile.TemporaryDirectory() as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            root = Path(tmp) / str(size)
            root.mkdir()
            results.append(run(size, args.repeat, root))
    heads = ("hops", 6), ("server", 8), ("search", 8), ("HTML", 9), ("drawn", 6), ("usable", 7)
    print(" ".join(f"{name:>{width}}" for name, width in heads), f"{'goal':>5}")
    for r in results:
        usable = r["browser"]["usable_median_s"]
        goal = r["goal_s"]
        mark = (
            ""
            if goal is None
            else ("met" if max(usable, r["page"]["median_s"]) < goal else "MISSED")
        )
        print(
            f"{r['hops']:>6} {r['page']['median_s']:>7.3f}s {r['search']['median_s']:>7.3f}s "
            f"{r['page']['html_bytes'] / 1024:>7.0f}KB {r['page']['items_drawn']:>6} "
            f"{usable:>6.3f}s {goal or '':>4}s {mark}"
        )
    print(write_results("dialog_render", {"runs": results}))


if __name__ == "__main__":
    main()
