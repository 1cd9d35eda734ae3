"""Detection at scale: a larger simulated run than the test suite's, scored against its
answer key (issue 5: "a larger run is a benchmark script").

For each seed: `handoff-trace demo --load` into a fresh SQLite file (the real CLI, in a
subprocess), then `handoff-trace flags --json` at the clock the demo suggests, and every
flag compared with the answer key the same way tests/demo/test_detection.py does: a
rejection is a `rejected-element` flag naming its reason, iss and hop; any other fault is its
own flag kind for that hop (or agent, handoff and case). Prints precision and recall per
fault kind and writes bench/results/detection.json. Exits 1 when either is below 1.0.

    .venv/bin/python bench/detection.py [--seeds 41 42 43] [--dialogs 400] [--cases 200]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _support import interruptible, write_results

from app.envelope.flags import FlagKind

BIN = Path(sys.executable).parent / "handoff-trace"
FLAG_KINDS = {k.value for k in FlagKind}
# The kinds whose variant the answer key predicts; envelope flags carry the service's own
# account of the fault (a media type, "schema"), which the simulator does not try to name.
VARIANT_KINDS = {"equivocation", "status-conflict", "rejected-element"}
Key = tuple[Any, ...]


def expected_key(answer: dict[str, Any]) -> tuple[str, Key]:
    fault = answer["fault"]
    if fault not in FLAG_KINDS:  # a reject reason: the element is flagged as rejected
        return fault, ("rejected-element", fault, answer["iss"], answer["hop"], None)
    variant = answer["variant"] if fault in VARIANT_KINDS else None
    return fault, (fault, variant, answer["iss"], answer["hop"], answer.get("case"))


def found_key(flag: dict[str, Any]) -> Key:
    variant = flag["variant"] if flag["kind"] in VARIANT_KINDS else None
    return (flag["kind"], variant, flag["iss"], flag["hop"], flag["case_id"])


def run_seed(seed: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{workdir / 'store.db'}"}
    answers_path = workdir / "answers.jsonl"
    demo = [str(BIN), "demo", "--seed", str(seed), "--dialogs", str(args.dialogs)]
    demo += ["--cases", str(args.cases), "--agents", str(args.agents)]
    demo += ["--fault-rate", str(args.fault_rate), "--out", str(workdir / "capture.jsonl")]
    demo += ["--answer-key", str(answers_path), "--load"]
    started = time.perf_counter()
    loaded = subprocess.run(demo, env=env, capture_output=True, text=True, check=False)
    if loaded.returncode != 0:
        raise SystemExit(f"demo --load failed (seed {seed}): {loaded.stderr[-2000:]}")
    seconds = time.perf_counter() - started
    now = re.search(r"--now (\d+)", loaded.stderr)
    if now is None:
        raise SystemExit(f"demo did not print the clock to judge at: {loaded.stderr[-2000:]}")
    listing = [str(BIN), "flags", "--json", "--now", now.group(1)]
    flags_out = subprocess.run(listing, env=env, capture_output=True, text=True, check=True)
    answers = [json.loads(line) for line in answers_path.read_text().splitlines()]
    flags = json.loads(flags_out.stdout)

    expected: Counter[Key] = Counter()
    kind_of: dict[Key, str] = {}
    for answer in answers:
        kind, key = expected_key(answer)
        expected[key] += 1
        kind_of[key] = kind
    found = Counter(found_key(f) for f in flags)
    hits = expected & found
    per_kind: dict[str, Counter[str]] = {}
    for key, n in expected.items():
        per_kind.setdefault(kind_of[key], Counter())["injected"] += n
        per_kind[kind_of[key]]["found"] += hits[key]
    extra = found - expected
    for key, n in extra.items():
        per_kind.setdefault(f"(unexpected) {key[0]}", Counter())["extra"] += n
    return {
        "seed": seed,
        "elements_and_items": sum(1 for _ in (workdir / "capture.jsonl").open("rb")),
        "load_seconds": round(seconds, 1),
        "injected": sum(expected.values()),
        "flags": sum(found.values()),
        "true_positives": sum(hits.values()),
        "per_kind": {k: dict(v) for k, v in sorted(per_kind.items())},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[41, 42, 43])
    parser.add_argument("--dialogs", type=int, default=400)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--fault-rate", type=float, default=0.2)
    args = parser.parse_args()
    runs = []
    with interruptible():  # the temporary stores go even on SIGTERM
        for seed in args.seeds:
            with tempfile.TemporaryDirectory(prefix="detection-") as tmp:
                runs.append(run_seed(seed, args, Path(tmp)))
    injected = sum(r["injected"] for r in runs)
    flagged = sum(r["flags"] for r in runs)
    hits = sum(r["true_positives"] for r in runs)
    precision = hits / flagged if flagged else 1.0
    recall = hits / injected if injected else 1.0
    kinds: dict[str, Counter[str]] = {}
    for r in runs:
        for kind, counts in r["per_kind"].items():
            kinds.setdefault(kind, Counter()).update(counts)
    print(f"{'fault':<28} {'injected':>8} {'found':>6} {'extra':>6}")
    for kind, c in sorted(kinds.items()):
        print(f"{kind:<28} {c['injected']:>8} {c['found']:>6} {c['extra']:>6}")
    for r in runs:
        print(
            f"seed {r['seed']}: {r['elements_and_items']} capture lines, loaded in "
            f"{r['load_seconds']} s, {r['injected']} faults, {r['flags']} flags"
        )
    print(f"\nprecision {precision:.4f}, recall {recall:.4f} over {len(runs)} seeds")
    write_results(
        "detection",
        {
            "options": vars(args),
            "precision": precision,
            "recall": recall,
            "runs": runs,
        },
    )
    return 0 if precision == 1.0 and recall == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
