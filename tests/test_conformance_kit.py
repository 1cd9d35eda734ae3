"""The conformance kit (``python -m handoff_context.conformance``) driving a real verify
command: ``handoff-trace verify --json`` passes the vectors; an implementation that gets one
verdict wrong is reported vector by vector, and the kit exits 1.

Every vector goes through ``handoff-trace verify``'s own code in tests/test_vectors_service.py;
here the command itself runs once per vector, so a subset covering every kind of vector
(trust-file refusals, CBOR sequences, ref objects and policies, chains, statuses, replays)
keeps the test to a few dozen process starts. ``make conformance`` runs them all.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from handoff_context.conformance import command_runner, load_vector
from handoff_context.vectors import DIRECTORY, stored_vectors

BIN = Path(sys.executable).parent
VERIFY = (
    "verify --json --trust {trust} --receiver {receiver} --at {at} --dialog {dialog} "
    "--skew {skew} --max-lifetime {max_lifetime} --max-chain {max_chain} "
    "--ref-policy {ref_policy} --objects {objects} {input}"
)
NAMED = {
    "offer-ed25519",
    "offer-es256",
    "chain-full",
    "status-accepted",
    "status-pending",
    "alg-none",
    "wrong-audience",
    "stale-expired",
    "replay-retransmission",
    "equivocation-content",
    "partial-chain",
    "too-deep",
    "dialog-mismatch",
}


def subset() -> list[str]:
    names = []
    for path in stored_vectors():
        doc = load_vector(path)
        special = "expect_trust_error" in doc or doc["input_format"] == "cbor" or doc["objects"]
        if special or path.stem in NAMED:
            names.append(path.stem)
    return names


def conformance(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "handoff_context.conformance", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


# A wrong implementation: the library's verdicts, except that the alg-none vector's
# rejection is reported as an acceptance.
FLIPPER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from handoff_context.conformance import library_verdicts

    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    capture = Path(sys.argv[-1])
    doc = {
        "name": capture.stem,
        "trust": json.loads(Path(args["--trust"]).read_text()),
        "receiver": args["--receiver"], "at": int(args["--at"]), "dialog": args["--dialog"],
        "policy": {"skew": int(args["--skew"]), "max_lifetime": int(args["--max-lifetime"]),
                   "max_chain": int(args["--max-chain"]), "ref_policy": args["--ref-policy"]},
        "objects": [], "input_format": "jsonl",
        "input": [json.loads(line) for line in capture.read_text().splitlines()],
    }
    verdicts = library_verdicts(doc)
    if capture.stem == "alg-none":
        verdicts[0]["outcome"], verdicts[0]["reason"] = "accept", None
    print(json.dumps(verdicts))
    """
)


def test_handoff_trace_verify_passes_the_vectors() -> None:
    names = subset()
    assert len(names) >= 20
    done = conformance(
        "--jobs", "2", "--verify-cmd", f"{BIN / 'handoff-trace'} {VERIFY}", "--only", *names
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("\npass ") + done.stdout.startswith("pass ") == len(names)
    assert f"{len(names)} vectors: {len(names)} passed, 0 failed" in done.stdout


def test_a_wrong_verdict_is_reported_per_vector(tmp_path: Path) -> None:
    script = tmp_path / "flipper.py"
    script.write_text(FLIPPER)
    done = conformance(
        "--verify-cmd",
        f"{sys.executable} {script} {VERIFY}",
        "--only",
        "alg-none",
        "offer-ed25519",
        "wrong-audience",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "FAIL alg-none" in lines and "pass offer-ed25519" in lines
    assert "pass wrong-audience" in lines
    assert any("outcome 'accept', expected 'reject'" in line for line in lines)
    assert lines[-1] == "3 vectors: 2 passed, 1 failed"


def test_a_command_that_prints_no_verdicts_gets_no_pass() -> None:
    runner = command_runner(f"{sys.executable} -c pass {{trust}} {{input}}")
    doc = load_vector(next(p for p in stored_vectors() if p.stem == "offer-ed25519"))
    answer = runner(doc, DIRECTORY)
    assert not isinstance(answer, list)
    assert "not JSON" in answer.message


@pytest.mark.parametrize(
    "template",
    ["verify {trust}", "verify {trust} {input} {nonsense}", "verify 'unbalanced {input}"],
)
def test_bad_templates_are_usage_errors(template: str) -> None:
    done = conformance("--verify-cmd", template)
    assert done.returncode == 2 and done.stderr.startswith("conformance: ")
    assert "vectors:" not in done.stdout
