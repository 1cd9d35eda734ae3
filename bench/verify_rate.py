"""Verification rate of the core against raw signature verification, in the same run.

Absolute rates drift between runs and machines, so every figure is reported as a ratio to
raw `cryptography` verification of the same signatures over the same messages, measured
interleaved with the core in this process. Target (issue 2): the core reaches >= 0.6 of raw.

    .venv/bin/python bench/verify_rate.py [--n 2000] [--rounds 5]

Prints a table and writes bench/results/verify_rate.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from _support import rate, raw_loop
from handoff_context import (
    Context,
    Form,
    Signer,
    TrustStore,
    Verifier,
    handoff_object,
    make_offer,
    trust_document,
)
from handoff_context import _jws as jws
from handoff_context._signature import verify_element

RESULTS = Path(__file__).parent / "results"
T0 = 1_793_000_000


def bench_alg(alg: str, n: int, rounds: int) -> dict[str, object]:
    delegator = Signer.generate("spiffe://bench.example/agent/planner", alg)
    delegate = "spiffe://bench.example/agent/coder"
    trust = TrustStore.from_mapping(trust_document([delegator]))
    offers = [
        make_offer(delegator, aud=delegate, dialog="ctx-bench", iat=T0, form=Form.JWS)
        for _ in range(n)
    ]
    parsed = [jws.parse(o) for o in offers]
    raw = raw_loop(parsed, delegator.key.get_op_key("verify"))

    def signature() -> None:
        for element in parsed:
            verify_element(element, trust)

    def parse_and_signature() -> None:
        for o in offers:
            verify_element(jws.parse(o), trust)

    objects = [handoff_object(o) for o in offers]

    def full_pipeline() -> None:
        verifier = Verifier(trust)  # fresh replay memory: every offer is new
        ctx = Context(now=T0 + 10, receiver=delegate, dialog="ctx-bench")
        for i, obj in enumerate(objects):
            v = verifier.verify_value(obj, ctx, source=str(i))
            if v.outcome.value != "accept":
                raise SystemExit(f"benchmark element rejected: {v.to_json()}")

    cases = {
        "raw": raw,
        "signature": signature,
        "parse+signature": parse_and_signature,
        "full pipeline": full_pipeline,
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):  # interleaved, so drift hits every case alike
        for name, fn in cases.items():
            samples[name].append(rate(fn, n))
    raw_median = statistics.median(samples["raw"])
    out: dict[str, object] = {"alg": alg, "n": n, "rounds": rounds}
    for name, values in samples.items():
        med = statistics.median(values)
        out[name] = {"per_second": round(med, 1), "ratio_to_raw": round(med / raw_median, 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=2000, help="elements per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args()
    results = [bench_alg(alg, args.n, args.rounds) for alg in ("ES256", "Ed25519")]
    print(f"{'alg':8} {'case':16} {'per second':>12} {'x raw':>7}")
    for r in results:
        for case in ("raw", "signature", "parse+signature", "full pipeline"):
            figures = r[case]
            assert isinstance(figures, dict)
            print(
                f"{r['alg']!s:8} {case:16} {figures['per_second']:>12,.0f} "
                f"{figures['ratio_to_raw']:>7.3f}"
            )
    RESULTS.mkdir(exist_ok=True)
    doc = {
        "benchmark": "verify_rate",
        "when": int(time.time()),
        "machine": {
            "python": platform.python_version(),
            "processor": platform.processor(),
            "system": platform.platform(),
        },
        "results": results,
    }
    (RESULTS / "verify_rate.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
