"""An agent's replay memory over a long run: does ``FileState`` stay flat? (issue 19 item 3)

One process plays a receiving agent (the coder) for ``--n`` offers (default 200,000) from a
few delegators, arriving ``--rate`` offers per second of a simulated clock (default 20/s:
200,000 offers span 2.8 hours, three times the memory's horizon of lifetime + skew + keep =
120 + 60 + 3,600 s). Each offer is checked by ``Verifier(trust, replay=FileState(...))``
with all seven checks, answered with a signed ``accepted`` recorded as the last answer
(``make_status(answers=state)``), and every tenth offer is sent again, which must come out
``duplicate`` with the recorded answer to resend. Offers are signed as they are needed, so
nothing but the agent's own memory accumulates in the process.

Every ``--every`` offers the script records the process's RSS, the state file's size (the
database plus its WAL) and the rows each memory holds. Reported: the largest RSS and file
size, and their growth over the second half of the run, when the memory's horizon has long
been reached: flat means that growth stays within a few percent whatever ``--n`` is.
The time the checks take (``verify_value``, FileState's writes included; not the signing of
offers and answers) is reported as a ratio to raw signature verification with
``cryptography`` over a sample of the same offers, measured in the same run.

With ``--in-memory N`` (default 20,000; 0 skips) the same offers are also checked with
``InMemoryState``, the memory ``verify`` uses and agents used before, which keeps every
offer for good: its RSS growth per 1,000 offers, and its check rate (what the file costs),
are the contrast.

    .venv/bin/python bench/replay_memory.py [--n 200000] [--rate 20] [--every 10000]

Prints a table and writes bench/results/replay_memory.json.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _support import RawVerifier, raw_case, rss_mib, write_results
from handoff_context import (
    Context,
    FileState,
    Form,
    InMemoryState,
    Outcome,
    Signer,
    TrustStore,
    Verifier,
    handoff_object,
    make_offer,
    make_status,
    parse_element,
    trust_document,
)

T0 = 1_793_000_000
CODER = "spiffe://b.example/agent/coder"
DIALOG = "ctx-replay-bench"
LIFETIME, SKEW, KEEP = 120, 60, 3600


class Clock:
    def __init__(self) -> None:
        self.now = float(T0)

    def __call__(self) -> float:
        return self.now


def parties() -> tuple[list[Signer], Signer, TrustStore]:
    delegators = [
        Signer.generate(f"spiffe://a.example/agent/planner-{i}", "Ed25519", kid=f"p{i}")
        for i in range(4)
    ]
    coder = Signer.generate(CODER, "Ed25519", kid="c1")
    return delegators, coder, TrustStore.from_mapping(trust_document([*delegators, coder]))


def offers(delegators: list[Signer], n: int, rate: float) -> Iterator[tuple[int, bytes]]:
    """(arrival time, offer octets), signed one at a time."""
    for i in range(n):
        at = T0 + int(i / rate)
        signer = delegators[i % len(delegators)]
        octets = make_offer(signer, aud=CODER, dialog=DIALOG, iat=at, lifetime=LIFETIME)
        yield at, octets


def file_mib(path: Path) -> float:
    wal = path.with_name(path.name + "-wal")
    size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    return size / 2**20


def run_file_state(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    delegators, coder, trust = parties()
    clock = Clock()
    path = work / "coder.sqlite3"
    samples: list[dict[str, Any]] = []
    duplicates = 0
    with FileState(path, skew=SKEW, keep=KEEP, clock=clock) as state:
        verifier = Verifier(trust, replay=state)
        checking = 0.0  # seconds spent in verify_value (the check, FileState included)
        interval_start = 0.0
        for i, (at, octets) in enumerate(offers(delegators, args.n, args.rate), start=1):
            clock.now = at
            ctx = Context(now=at, receiver=CODER, dialog=DIALOG)
            start = time.perf_counter()
            verdict = verifier.verify_value(handoff_object(octets), ctx, source="offer")
            checking += time.perf_counter() - start
            if verdict.outcome is not Outcome.ACCEPT:
                raise SystemExit(f"offer {i}: {verdict.outcome} {verdict.detail}")
            accepted = make_status(
                coder, offer_octets=octets, state="accepted", iat=at, answers=state
            )
            if i % 10 == 0:  # a retransmission: duplicate, answered with the same octets
                again = verifier.verify_value(handoff_object(octets), ctx, source="again")
                assert again.outcome is Outcome.DUPLICATE and again.digest is not None
                assert state.last_answer(again.digest) == accepted
                duplicates += 1
            if i % args.every == 0:
                gc.collect()
                interval, interval_start = checking - interval_start, checking
                samples.append(
                    {
                        "offers": i,
                        "checks_per_second": round(args.every / interval, 1),
                        "simulated_hours": round((at - T0) / 3600, 2),
                        "rss_mib": round(rss_mib(), 1),
                        "file_mib": round(file_mib(path), 1),
                        "rows": state.counts(),
                    }
                )
                last = samples[-1]
                print(
                    f"{i:>8,} offers  {last['simulated_hours']:>5} h  RSS {last['rss_mib']:>6} "
                    f"MiB  file {last['file_mib']:>6} MiB  {last['checks_per_second']:>7}/s  "
                    f"rows {last['rows']}",
                    flush=True,
                )
    # The same offers' signatures verified raw, over a sample, in this run.
    sample = [
        raw_case(parse_element(o, Form.JWS))
        for _, o in offers(delegators, min(args.n, 2000), args.rate)
    ]
    raw = RawVerifier(trust, sample)
    for _ in range(3):
        raw.round()
    per_offer = args.n / checking
    half = [s for s in samples if s["offers"] >= args.n / 2]
    return {
        "n": args.n,
        "rate_per_simulated_second": args.rate,
        "duplicates_answered": duplicates,
        "checks_per_second": round(per_offer, 1),
        "raw_verify_per_second": round(raw.per_second, 1),
        "x_raw": round(per_offer / raw.per_second, 3),
        "max_rss_mib": max(s["rss_mib"] for s in samples),
        "max_file_mib": max(s["file_mib"] for s in samples),
        "second_half_rss_growth_mib": round(half[-1]["rss_mib"] - half[0]["rss_mib"], 1),
        "second_half_file_growth_mib": round(half[-1]["file_mib"] - half[0]["file_mib"], 1),
        "samples": samples,
    }


def run_in_memory(n: int, rate: float) -> dict[str, Any]:
    delegators, _, trust = parties()
    state = InMemoryState()
    verifier = Verifier(trust, replay=state)
    gc.collect()
    before = rss_mib()
    checking = 0.0
    for at, octets in offers(delegators, n, rate):
        ctx = Context(now=at, receiver=CODER, dialog=DIALOG)
        start = time.perf_counter()
        verifier.verify_value(handoff_object(octets), ctx, source="offer")
        checking += time.perf_counter() - start
    gc.collect()
    grown = rss_mib() - before
    return {
        "n": n,
        "rss_growth_mib": round(grown, 1),
        "per_1000_mib": round(grown / n * 1000, 2),
        "checks_per_second": round(n / checking, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000, help="offers checked (200000)")
    parser.add_argument("--rate", type=float, default=20.0, help="offers per simulated second")
    parser.add_argument("--every", type=int, default=10_000, help="sample every N offers")
    parser.add_argument("--in-memory", type=int, default=20_000, help="InMemoryState contrast")
    args = parser.parse_args(argv)
    if args.n < 2 * args.every:
        parser.error("--n must be at least twice --every")
    with tempfile.TemporaryDirectory(prefix="replay-bench-") as tmp:
        result = run_file_state(args, Path(tmp))
    contrast = run_in_memory(args.in_memory, args.rate) if args.in_memory else None
    print()
    print(f"FileState, {result['n']:,} offers at {args.rate:g}/simulated s:")
    print(f"  max RSS {result['max_rss_mib']} MiB, max file {result['max_file_mib']} MiB")
    print(
        f"  second half: RSS {result['second_half_rss_growth_mib']:+} MiB, "
        f"file {result['second_half_file_growth_mib']:+} MiB"
    )
    print(
        f"  checks {result['checks_per_second']}/s (verify_value with FileState), raw verify "
        f"{result['raw_verify_per_second']}/s: {result['x_raw']} x raw"
    )
    if contrast:
        print(
            f"InMemoryState, {contrast['n']:,} offers: RSS +{contrast['rss_growth_mib']} MiB "
            f"({contrast['per_1000_mib']} MiB per 1,000 offers, never released); checks "
            f"{contrast['checks_per_second']}/s"
        )
    median_rss = statistics.median(s["rss_mib"] for s in result["samples"])
    path = write_results(
        "replay_memory",
        {"file_state": result, "in_memory": contrast, "median_rss_mib": median_rss},
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
