"""CPU cost of starting the CLI (issue 15, item 7): ``--version``, ``--help``, ``verify --help``
and ``verify`` of one small capture, each in a fresh interpreter, as a script that calls the
CLI once per message would.

The figure is the CPU time (user + system) of the child process, the median of ``--runs``
starts, measured with ``resource.getrusage(RUSAGE_CHILDREN)``: wall time on a shared
machine says more about the neighbours than about the CLI. As everywhere in bench/, it is
also given as a ratio to raw signature verification in the same run: how many raw ES256
verifications (``cryptography``, precomputed DER) the same CPU time would have paid for.
Targets: ``--version`` and ``--help`` < 0.2 s, ``verify`` of one small file < 0.5 s.

    .venv/bin/python bench/cli_start.py [--runs 9]

Prints a table and writes bench/results/cli_start.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.hashes import SHA256

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
EXAMPLES = ROOT / "examples"
TARGETS = {"--version": 0.2, "--help": 0.2, "verify --help": 0.2, "verify one file": 0.5}


def commands(tmp: Path) -> dict[str, list[str]]:
    capture = tmp / "one.jsonl"
    capture.write_bytes((EXAMPLES / "capture.jsonl").read_bytes().splitlines(keepends=True)[0])
    verify = ["verify", "--trust", str(EXAMPLES / "trust.json"), str(capture)]
    return {
        "--version": ["--version"],
        "--help": ["--help"],
        "verify --help": ["verify", "--help"],
        "verify one file": verify,
    }


def child_cpu(argv: list[str]) -> float:
    """CPU seconds of one ``handoff-trace`` run in a fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        cwd=ROOT,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def raw_verify_cpu(n: int = 2000) -> float:
    """CPU seconds of one raw ES256 verification (the benches' common yardstick)."""
    key = ec.generate_private_key(ec.SECP256R1())
    message = b"x" * 200
    signature = key.sign(message, ec.ECDSA(SHA256()))
    public = key.public_key()
    start = time.process_time()
    for _ in range(n):
        public.verify(signature, message, ec.ECDSA(SHA256()))
    return (time.process_time() - start) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="starts per command (default: 9)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = commands(Path(tmp))
        samples: dict[str, list[float]] = {name: [] for name in cases}
        raw: list[float] = []
        for _ in range(args.runs):  # interleaved, so drift in the machine's load is shared
            raw.append(raw_verify_cpu())
            for name, argv in cases.items():
                samples[name].append(child_cpu(argv))
    per_verify = statistics.median(raw)
    rows = []
    for name, values in samples.items():
        cpu = statistics.median(values)
        met = cpu < TARGETS[name]
        rows.append(
            {
                "command": name,
                "cpu_seconds": round(cpu, 3),
                "raw_es256_verifies": round(cpu / per_verify),
                "target_seconds": TARGETS[name],
                "met": met,
            }
        )
    print(f"{'command':<18}{'CPU s':>8}{'= raw verifies':>16}  target")
    for row in rows:
        verdict = "met" if row["met"] else "MISSED"
        print(
            f"{row['command']:<18}{row['cpu_seconds']:>8.3f}{row['raw_es256_verifies']:>16,}"
            f"  < {row['target_seconds']} s: {verdict}"
        )
    RESULTS.mkdir(exist_ok=True)
    doc = {
        "runs": args.runs,
        "raw_es256_verify_cpu_seconds": per_verify,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "rows": rows,
    }
    (RESULTS / "cli_start.json").write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if all(row["met"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
