"""Page render of one dialog of ``--hops`` (2,000) hops: server time and HTML size.

The dialog is a three-level delegation tree signed with the toolkit (``handoff_context``,
ES256, JWS): agent A hands to B (the root hop), B fans out to ``--fanout`` (40) agents C_j,
and each C_j hands on to agents of a pool D until the dialog holds ``--hops`` hops. Every hop
gets a ``completed`` status from its delegate (``--no-statuses``: offers only). Each offer
travels as a raw handoff object carrying its chain; everything is one JSON Lines capture,
ingested through ``app.ingest.pipeline.ingest`` into a fresh SQLite file (the ingest time is
reported
too, it is not the benchmark).

Then the app (``app.web.app.create_app``) runs in this process under Starlette's TestClient
(ASGI in memory: no socket, no network time), a read user is logged in by opening a session
in the store (``app.store.users.open_session``; the login form itself is not timed), and
``GET /dialogs/{dialog}`` (the first page of the tree; ``?page=N`` for later ones) is timed
``--repeat`` (7) times after one cold request, for the first and the last page of the tree
(``charts.PAGE`` = 100 hop rows a page). Reported: cold and median/best milliseconds and the
response size; and, timed alone, the data functions: ``dialog_tree`` for the whole dialog
(the page calls it too), and ``dialog_tree`` plus ``statuses_of`` for every hop (the page asks
``statuses_of`` only for the rows it shows, so this line is more than the page does). All
times also in units of one raw ``cryptography`` ES256 verify of the dialog's own offers,
measured in the same run.

    .venv/bin/python bench/page_render.py [--hops 2000] [--repeat 7] [--quick]

Prints a table and writes bench/results/page_render.json (``--quick``: 200 hops,
page_render_quick.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _support import RawVerifier, interruptible, raw_case, top_element, write_results
from handoff_context import (
    Signer,
    StatusState,
    TrustStore,
    handoff_digest,
    handoff_object,
    make_offer,
    make_status,
    status_object,
)
from handoff_context import trust_document as make_trust

from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions
from app.store import db

DIALOG = "bench-dialog-2000"


def build_capture(hops: int, fanout: int, statuses: bool, t0: int) -> dict[str, Any]:
    """The dialog's capture lines (offers, then statuses), its trust document and the
    offers (for the raw-verify baseline)."""
    a, b = Signer.generate("agent-a"), Signer.generate("agent-b")
    cs = [Signer.generate(f"agent-c{j:02}") for j in range(fanout)]
    ds = [Signer.generate(f"agent-d{k:02}") for k in range(20)]
    by_iss = {s.iss: s for s in (a, b, *cs, *ds)}
    lines: list[bytes] = []
    offers: list[tuple[bytes, str]] = []  # (offer octets, audience)

    def offer(signer: Signer, aud: str, prev: bytes | None, chain: list[bytes], i: int) -> bytes:
        octets = make_offer(
            signer, aud=aud, dialog=DIALOG, iat=t0 + i % 30, lifetime=240, prev=prev
        )
        lines.append(json.dumps(handoff_object(octets, chain)).encode())
        offers.append((octets, aud))
        return octets

    start = time.perf_counter()
    root = offer(a, b.iss, None, [], 0)
    mids = [offer(b, c.iss, handoff_digest(root), [root], j) for j, c in enumerate(cs)]
    n = len(offers)
    while n < hops:
        j = (n - 1 - fanout) % fanout  # round-robin over the C agents
        d = ds[n % len(ds)]
        offer(cs[j], d.iss, handoff_digest(mids[j]), [root, mids[j]], n)
        n += 1
    if statuses:
        for octets, aud in offers:
            status = make_status(
                by_iss[aud], offer_octets=octets, state=StatusState.COMPLETED, iat=t0 + 40
            )
            lines.append(json.dumps(status_object(status)).encode())
    return {
        "capture": b"\n".join(lines) + b"\n",
        "trust": make_trust(list(by_iss.values())),
        "offers": [o for o, _ in offers],
        "sign_seconds": round(time.perf_counter() - start, 2),
    }


def timed(fn: Any, repeat: int) -> tuple[float, list[float], Any]:
    """Cold time, then ``repeat`` warm times (seconds), and the last result."""
    t = time.perf_counter()
    out = fn()
    cold = time.perf_counter() - t
    warm = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        warm.append(time.perf_counter() - t)
    return cold, warm, out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hops", type=int, default=2000)
    parser.add_argument("--fanout", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-statuses", action="store_true")
    parser.add_argument("--quick", action="store_true", help="200 hops, 3 repeats")
    args = parser.parse_args()
    if args.quick:
        args.hops, args.fanout, args.repeat = 200, 10, 3
    if args.hops < args.fanout + 2 or args.fanout < 1 or args.repeat < 1:
        parser.error("need --hops > --fanout + 1, --fanout >= 1, --repeat >= 1")

    from starlette.testclient import TestClient

    from app.settings import Settings
    from app.store import dashboard
    from app.store.queries import dialog_tree
    from app.store.tokens import Role
    from app.store.users import create_user, generate_password, open_session
    from app.web.app import create_app

    with interruptible(), tempfile.TemporaryDirectory(prefix="handoff-trace-page-") as tmp:
        work = Path(tmp)
        t0 = int(time.time()) - 120
        print(f"signing a {args.hops:,}-hop dialog ...", file=sys.stderr)
        cap = build_capture(args.hops, args.fanout, not args.no_statuses, t0)
        trust_path = work / "trust.json"
        trust_path.write_text(json.dumps(cap["trust"]))
        trust = TrustStore.load(trust_path)
        url = f"sqlite:///{work / 'page.db'}"
        engine = db.make_engine(url)
        db.ensure_schema(engine)
        pipeline = Pipeline(engine=engine, trust=trust, options=VerifyOptions(at=t0 + 45))
        print(f"ingesting {len(cap['capture']):,} bytes ...", file=sys.stderr)
        start = time.perf_counter()
        report = ingest(pipeline, [("dialog.jsonl", cap["capture"])], now=t0 + 60)
        ingest_seconds = time.perf_counter() - start
        outcomes: dict[str, int] = {}
        for v in report.verdicts:
            outcomes[v.outcome.value] = outcomes.get(v.outcome.value, 0) + 1
        print(f"ingested in {ingest_seconds:.1f} s: {outcomes}", file=sys.stderr)
        with db.transaction(engine) as session:
            user = create_user(
                session,
                username="bench",
                role=Role.READ,
                password=generate_password(),
                now=int(time.time()),
            )
            cookie = open_session(session, user=user, now=int(time.time()))

        cases = [raw_case(e) for o in cap["offers"] if (e := top_element({"offer": o.decode()}))]
        raw = RawVerifier(trust, cases)
        raw.round()
        raw.samples.clear()
        raw.round()

        def tree_only() -> int:
            with db.transaction(db.read_only(engine)) as session:
                return len(dialog_tree(session, dialog=DIALOG))

        def statuses_all() -> int:
            with db.transaction(db.read_only(engine)) as session:
                nodes = dialog_tree(session, dialog=DIALOG)
                found = dashboard.statuses_of(session, offers=[n.hop.hop.offer for n in nodes])
            return len(found)

        d_cold, d_warm, stored_hops = timed(tree_only, args.repeat)
        s_cold, s_warm, _ = timed(statuses_all, args.repeat)
        rows = []
        app = create_app(Settings(database_url=url, trust_file=trust_path))
        with TestClient(app, base_url="http://127.0.0.1") as client:
            client.cookies.set("ht_session", cookie)
            pages = max(1, -(-stored_hops // 100))  # charts.PAGE rows a page
            for page in sorted({1, pages}):
                path = f"/dialogs/{DIALOG}" + ("" if page == 1 else f"?page={page}")

                def get(path: str = path) -> Any:
                    r = client.get(path)
                    if r.status_code != 200:
                        raise SystemExit(f"GET {path}: {r.status_code} {r.text[:300]}")
                    return r

                cold, warm, resp = timed(get, args.repeat)
                rows.append(
                    {
                        "what": "GET /dialogs/{dialog}" + ("" if page == 1 else f"?page={page}"),
                        "cold_ms": round(cold * 1000, 1),
                        "median_ms": round(statistics.median(warm) * 1000, 1),
                        "best_ms": round(min(warm) * 1000, 1),
                        "bytes": len(resp.content),
                        "hop_rows_in_html": resp.text.count('<g class="node '),
                    }
                )
        raw.round()
        for what, cold, warm in (
            ("data only: dialog_tree (all hops)", d_cold, d_warm),
            ("data only: dialog_tree + statuses_of (all hops)", s_cold, s_warm),
        ):
            rows.append(
                {
                    "what": what,
                    "cold_ms": round(cold * 1000, 1),
                    "median_ms": round(statistics.median(warm) * 1000, 1),
                    "best_ms": round(min(warm) * 1000, 1),
                    "bytes": None,
                }
            )
        engine.dispose()
    raw_us = 1e6 / raw.per_second
    for r in rows:
        r["median_x_raw"] = round(r["median_ms"] * 1000 / raw_us)
    print(
        f"dialog: {stored_hops:,} hops stored, {len(cap['offers']):,} offers signed in "
        f"{cap['sign_seconds']} s (with statuses), ingested in {ingest_seconds:.1f} s; "
        f"raw ES256 verify {raw.per_second:,.0f}/s"
    )
    print(f"{'what':48} {'cold ms':>8} {'median ms':>10} {'best ms':>8} {'bytes':>10} {'x raw':>7}")
    for r in rows:
        size = f"{r['bytes']:,}" if r["bytes"] is not None else "-"
        print(
            f"{r['what']:48} {r['cold_ms']:>8,.1f} {r['median_ms']:>10,.1f} "
            f"{r['best_ms']:>8,.1f} {size:>10} {r['median_x_raw']:>7,}"
        )
    name = "page_render_quick" if args.quick else "page_render"
    path = write_results(
        name,
        {
            "params": vars(args),
            "dialog": {
                "hops_stored": stored_hops,
                "offers": len(cap["offers"]),
                "capture_bytes": len(cap["capture"]),
                "sign_seconds": cap["sign_seconds"],
                "ingest_seconds": round(ingest_seconds, 1),
                "outcomes": outcomes,
                "item_errors": len(report.errors),
            },
            "raw_per_second": round(raw.per_second, 1),
            "results": rows,
        },
    )
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
