"""What trust sources cost a receiver (issue 21): the full pipeline judging against a
``TrustSources`` store (keys with a history: three withdrawn keys, one revoked, the current
one) against the same pipeline on a plain trust file, both as ratios to raw signature
verification of the same signatures in the same run. No network: the history is merged
directly, as a refresh would.

    .venv/bin/python bench/trust_sources.py [--n 1000] [--rounds 5]

Prints a table and writes bench/results/trust_sources.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from _support import rate, raw_loop
from handoff_context import Context, Signer, TrustStore, Verifier, handoff_object, make_offer
from handoff_context import _jws as jws
from handoff_context.sources import InMemoryHistory, PublishedKey, TrustConfig, TrustSources

RESULTS = Path(__file__).parent / "results"
T0 = 1_793_000_000
ISS = "spiffe://bench.example/agent/planner"
AUD = "spiffe://bench.example/agent/coder"


def _published(signer: Signer) -> PublishedKey:
    jwk = signer.trust_entry()["keys"][0]
    key = TrustStore.from_mapping({"issuers": [{"id": ISS, "keys": [jwk]}]}).issuers[ISS][0]
    return PublishedKey(key.kid, key.thumbprint, json.dumps(jwk, sort_keys=True))


def stores(current: Signer) -> tuple[TrustStore, TrustSources]:
    static = TrustStore.from_mapping({"issuers": [current.trust_entry()]})
    old = [Signer.generate(ISS, "ES256", kid=f"old-{i}") for i in range(3)]
    revoked = Signer.generate(ISS, "ES256", kid="revoked")
    history = InMemoryHistory()
    sets = [[old[0]], [old[0], old[1]], [old[1], old[2], revoked], [old[2], revoked, current]]
    for step, signers in enumerate(sets):
        keys = [_published(s) for s in signers]
        history.merge(source="jwks", fetched_at=T0 - 1000 + 100 * step, keys=keys)
    doc = {
        "sources": [
            {"name": "jwks", "kind": "jwks", "url": "https://k.example/j", "identifiers": [ISS]}
        ],
        "revoked": [{"kid": "revoked", "at": T0 - 50}],
    }
    live = TrustSources(TrustConfig.from_mapping(doc), history=history)
    return static, live


def bench(n: int, rounds: int) -> dict[str, object]:
    current = Signer.generate(ISS, "ES256", kid="current")
    static, live = stores(current)
    assert len(live.keys_for(ISS) or ()) == 5
    offers = [make_offer(current, aud=AUD, dialog="ctx-bench", iat=T0) for _ in range(n)]
    parsed = [jws.parse(o) for o in offers]
    raw = raw_loop(parsed, current.key.get_op_key("verify"))

    objects = [handoff_object(o) for o in offers]

    def pipeline(trust: TrustStore) -> Callable[[], None]:
        def run() -> None:
            verifier = Verifier(trust)  # fresh memories and cache: every offer is new
            ctx = Context(now=T0 + 10, receiver=AUD, dialog="ctx-bench")
            for i, obj in enumerate(objects):
                v = verifier.verify_value(obj, ctx, source=str(i))
                if v.outcome.value != "accept":
                    raise SystemExit(f"benchmark element rejected: {v.to_json()}")

        return run

    cases = {"raw": raw, "trust file": pipeline(static), "trust sources": pipeline(live)}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):  # interleaved, so drift hits every case alike
        for name, fn in cases.items():
            samples[name].append(rate(fn, n))
    raw_median = statistics.median(samples["raw"])
    out: dict[str, object] = {"alg": "ES256", "n": n, "rounds": rounds}
    for name, values in samples.items():
        med = statistics.median(values)
        out[name] = {"per_second": round(med, 1), "ratio_to_raw": round(med / raw_median, 3)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1000, help="elements per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args()
    result = bench(args.n, args.rounds)
    print(f"{'case':16} {'per second':>12} {'x raw':>7}")
    for case in ("raw", "trust file", "trust sources"):
        figures = result[case]
        assert isinstance(figures, dict)
        print(f"{case:16} {figures['per_second']:>12,.0f} {figures['ratio_to_raw']:>7.3f}")
    RESULTS.mkdir(exist_ok=True)
    doc = {
        "benchmark": "trust_sources",
        "when": int(time.time()),
        "machine": {
            "python": platform.python_version(),
            "processor": platform.processor(),
            "system": platform.platform(),
        },
        "results": result,
    }
    (RESULTS / "trust_sources.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
