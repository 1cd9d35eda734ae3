"""Chain cost: ingesting hops 1..k of one growing chain, each bundle carrying its whole chain.

Bundle i is offer i (agent i hands to agent i+1) with chain = offers 1..i-1, received by its
audience, ingested through ``app.ingest.pipeline.ingest`` into a fresh store. Every chain element of
bundle i was the offer of an earlier bundle, so with the signature cache (profile §6.1, the
store's ``signature_cache`` table) the whole run needs k signature verifications, not
k(k+1)/2 (issue 5, target for k = 16).

Counted, by wrapping the functions in this process (no app code is changed):
- ``check_signature`` calls: signature checks the verifier asked for (cache hit or not);
- ``verify_element`` calls: checks that missed the cache and verified (the figure that
  must be k);
- ``verify_raw`` calls: elliptic-curve verify operations actually run.
A counterfactual run with the cache lookup forced to miss (``StoreMemory.verified`` patched
to return False) shows what the cache saves. Time per bundle is the median over
``--rounds`` chains, each in a fresh database, and is reported in units of one raw
``cryptography`` verify of the chain's own signatures, measured interleaved in this run.

    .venv/bin/python bench/chain_cost.py [--k 16] [--rounds 5] [--db sqlite|postgresql|both]
                                         [--quick]

Prints a table and writes bench/results/chain_cost.json (``--quick``: chain_cost_quick.json).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import handoff_context._signature as signature_module
import handoff_context._verify as verify_module
from _support import RawVerifier, interruptible, postgres, raw_case, write_results
from handoff_context import (
    Form,
    Signer,
    TrustStore,
    Verifier,
    handoff_object,
    make_chain,
    parse_element,
    trust_document,
)
from sqlalchemy import event

from app.ingest.memory import StoreMemory
from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import VerifyOptions
from app.store import db

T0 = 1_793_000_000
STEP = 5  # seconds between hops
MAX_CHAIN = 16  # the default receiver limit: bundle 17 would be rejected too-deep


# --- counting ---------------------------------------------------------------------------


class Counts:
    """Call counters around the signature path, patched in for the life of the run."""

    def __init__(self) -> None:
        self.c: Counter[str] = Counter()

    def snapshot(self) -> Counter[str]:
        return Counter(self.c)

    @contextmanager
    def patched(self, *, cache: bool) -> Iterator[None]:
        c = self.c
        orig_raw = signature_module.verify_raw
        orig_element = verify_module.verify_element
        orig_check = Verifier.check_signature
        orig_verified = StoreMemory.verified

        def verify_raw(*a: Any, **kw: Any) -> bool:
            c["verify_raw"] += 1
            return orig_raw(*a, **kw)

        def verify_element(*a: Any, **kw: Any) -> Any:
            c["verify_element"] += 1
            return orig_element(*a, **kw)

        def check_signature(self: Verifier, element: Any) -> None:
            c["check_signature"] += 1
            orig_check(self, element)

        def verified(self: StoreMemory, digest: bytes, fingerprint: str) -> bool:
            c["cache_lookup"] += 1
            hit = orig_verified(self, digest, fingerprint) if cache else False
            c["cache_hit"] += hit
            return hit

        signature_module.verify_raw = verify_raw  # type: ignore[assignment]
        verify_module.verify_element = verify_element  # type: ignore[assignment]
        Verifier.check_signature = check_signature  # type: ignore[method-assign]
        StoreMemory.verified = verified  # type: ignore[method-assign]
        try:
            yield
        finally:
            signature_module.verify_raw = orig_raw
            verify_module.verify_element = orig_element
            Verifier.check_signature = orig_check  # type: ignore[method-assign]
            StoreMemory.verified = orig_verified  # type: ignore[method-assign]


# --- the chain ----------------------------------------------------------------------------


def make_bundles(k: int, alg: str, round_no: int) -> tuple[TrustStore, list[bytes], list[str]]:
    """k distinct agents, agent i hands to agent i+1; one capture record per bundle."""
    signers = [
        Signer.generate(f"spiffe://bench.example/agent/a{i:02d}", alg, kid=f"a{i:02d}")
        for i in range(k + 1)
    ]
    trust = TrustStore.from_mapping(trust_document(signers))
    dialog = f"ctx-chain-{round_no}"
    offers = make_chain(
        signers[:k], dialog=dialog, iat=T0, step=STEP, lifetime=120, final_aud=signers[k].iss
    )
    records = []
    for i, offer in enumerate(offers):
        record = {
            "received_at": T0 + i * STEP + 1,
            "received_by": signers[i + 1].iss,
            "dialog": dialog,
            "payload": handoff_object(offer, offers[:i]),
        }
        records.append(json.dumps(record, separators=(",", ":")))
    return trust, offers, records


class Databases:
    """Fresh migrated databases, copied from one migrated template per backend."""

    def __init__(self, stack: ExitStack, work: Path, backend: str) -> None:
        self.work, self.backend, self.n = work, backend, 0
        work.mkdir(parents=True, exist_ok=True)
        if backend == "sqlite":
            self.template = work / "template.db"
            _migrate(f"sqlite:///{self.template}")
        else:
            self.cluster = stack.enter_context(postgres())
            _migrate(self.cluster.create_database("template_bench"))

    def new(self) -> str:
        self.n += 1
        if self.backend == "sqlite":
            path = self.work / f"chain-{self.n}.db"
            shutil.copyfile(self.template, path)
            return f"sqlite:///{path}"
        return self.cluster.create_database(f"chain_{self.n}", template="template_bench")


def _migrate(url: str) -> None:
    engine = db.make_engine(url)
    try:
        db.upgrade(engine)
    finally:
        engine.dispose()


def run_chain(
    url: str, k: int, alg: str, round_no: int, counts: Counts, *, cache: bool
) -> dict[str, Any]:
    trust, offers, records = make_bundles(k, alg, round_no)
    engine = db.make_engine(url)

    @event.listens_for(engine, "before_cursor_execute")
    def count_sql(*_args: Any) -> None:
        counts.c["sql"] += 1

    pipeline = Pipeline(
        engine=engine, trust=trust, options=VerifyOptions(at=T0, max_chain=MAX_CHAIN)
    )
    per_bundle: list[dict[str, Any]] = []
    try:
        with counts.patched(cache=cache):
            for i, line in enumerate(records, 1):
                before = counts.snapshot()
                start = time.perf_counter()
                report = ingest(pipeline, [(f"bundle-{i}", line.encode())], now=T0 + 10_000)
                seconds = time.perf_counter() - start
                delta = counts.snapshot() - before
                (verdict,) = report.verdicts
                if verdict.outcome.value != "accept" or report.errors:
                    raise SystemExit(f"bundle {i} not accepted: {verdict.to_json()}")
                per_bundle.append({"hop": i, "seconds": seconds, **dict(delta)})
    finally:
        engine.dispose()
    return {"bundles": per_bundle, "trust": trust, "offers": offers}


# --- main ---------------------------------------------------------------------------------


def bench_backend(backend: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    k = args.k
    counts = Counts()
    on: list[list[dict[str, Any]]] = []
    off: list[list[dict[str, Any]]] = []
    raws: list[RawVerifier] = []
    with ExitStack() as stack:
        dbs = Databases(stack, work / backend, backend)
        # One unmeasured chain warms imports, statement caches and the key cache.
        run_chain(dbs.new(), k, args.alg, 0, counts, cache=True)
        for r in range(1, args.rounds + 1):  # interleaved: drift hits every case alike
            got = run_chain(dbs.new(), k, args.alg, r, counts, cache=True)
            on.append(got["bundles"])
            off.append(run_chain(dbs.new(), k, args.alg, -r, counts, cache=False)["bundles"])
            cases = [raw_case(parse_element(o, Form.JWS)) for o in got["offers"]]
            raw = RawVerifier(got["trust"], cases)
            reps = max(1, 2000 // k)
            for _ in range(reps):  # k signatures a round: enough rounds for a stable median
                raw.round()
            raws.append(raw)
    raw_rate = statistics.median(s for raw in raws for s in raw.samples)
    raw_one = 1.0 / raw_rate

    def column(runs: list[list[dict[str, Any]]], key: str, i: int) -> list[float]:
        return [run[i].get(key, 0) for run in runs]

    rows = []
    for i in range(k):
        t_on = statistics.median(column(on, "seconds", i))
        t_off = statistics.median(column(off, "seconds", i))
        rows.append(
            {
                "hop": i + 1,
                "chain_elements": i + 1,
                "verifications": max(column(on, "verify_element", i)),
                "verify_raw": max(column(on, "verify_raw", i)),
                "check_signature": max(column(on, "check_signature", i)),
                "cache_hits": max(column(on, "cache_hit", i)),
                "sql_statements": statistics.median(column(on, "sql", i)),
                "ms": round(t_on * 1000, 2),
                "ms_best": round(min(column(on, "seconds", i)) * 1000, 2),
                "x_raw_verify": round(t_on / raw_one, 1),
                "no_cache_verifications": max(column(off, "verify_element", i)),
                "no_cache_ms": round(t_off * 1000, 2),
                "no_cache_ms_best": round(min(column(off, "seconds", i)) * 1000, 2),
                "no_cache_x_raw_verify": round(t_off / raw_one, 1),
            }
        )

    def total(runs: list[list[dict[str, Any]]], key: str) -> list[int]:
        return sorted({sum(b.get(key, 0) for b in run) for run in runs})

    return {
        "backend": backend,
        "k": k,
        "alg": args.alg,
        "rounds": args.rounds,
        "raw_per_second": round(raw_rate, 1),
        "total_verifications": total(on, "verify_element"),
        "total_verify_raw": total(on, "verify_raw"),
        "total_check_signature": total(on, "check_signature"),
        "total_no_cache_verifications": total(off, "verify_element"),
        "target": f"k = {k} verifications: "
        + ("met" if total(on, "verify_element") == [k] else "missed"),
        "per_hop": rows,
    }


def print_table(res: dict[str, Any]) -> None:
    k = res["k"]
    print(
        f"\n{res['backend']}: k = {k}, {res['alg']}, median of {res['rounds']} chains; "
        f"raw verify {res['raw_per_second']:,.0f}/s"
    )
    print(
        f"{'hop':>3} {'elems':>5} {'verif':>5} {'SQL':>5} {'ms':>8} {'x raw':>7} | "
        f"{'no-cache verif':>14} {'ms':>8} {'x raw':>7}"
    )
    for r in res["per_hop"]:
        print(
            f"{r['hop']:>3} {r['chain_elements']:>5} {r['verifications']:>5} "
            f"{r['sql_statements']:>5.0f} {r['ms']:>8.1f} "
            f"{r['x_raw_verify']:>7.0f} | {r['no_cache_verifications']:>14} "
            f"{r['no_cache_ms']:>8.1f} {r['no_cache_x_raw_verify']:>7.0f}"
        )
    print(
        f"total verifications: {res['total_verifications']} (target {k}; "
        f"k(k+1)/2 = {k * (k + 1) // 2}); EC verify operations {res['total_verify_raw']}; "
        f"signature checks asked {res['total_check_signature']}; without the cache "
        f"{res['total_no_cache_verifications']}  -> {res['target']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--k", type=int, default=16, help=f"chain length, 1..{MAX_CHAIN}")
    parser.add_argument("--rounds", type=int, default=5, help="chains per case (medians)")
    parser.add_argument("--db", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--alg", choices=("ES256", "Ed25519"), default="ES256")
    parser.add_argument("--quick", action="store_true", help="smoke run: k = 4, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.k, args.rounds = 4, 1
    if not 1 <= args.k <= MAX_CHAIN:
        parser.error(f"--k must be 1..{MAX_CHAIN} (a longer chain is rejected too-deep)")
    if args.rounds < 1:
        parser.error("--rounds must be positive")
    backends = ["sqlite", "postgresql"] if args.db == "both" else [args.db]
    results = []
    with interruptible(), tempfile.TemporaryDirectory(prefix="handoff-trace-bench-") as tmp:
        for backend in backends:
            print(f"{backend}: {args.rounds} chains of {args.k} ...", file=sys.stderr)
            results.append(bench_backend(backend, args, Path(tmp)))
    for res in results:
        print_table(res)
    name = "chain_cost_quick" if args.quick else "chain_cost"
    path = write_results(name, {"params": vars(args), "results": results})
    print(f"written {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
