"""The example captures that `make run` verifies (examples/): they are what
``examples/make_examples.py`` writes, and the CLI gives them their documented verdicts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_VERDICTS = [
    ("capture.jsonl:1", "accept", None),
    ("capture.jsonl:2", "accept", None),
    ("capture.jsonl:3", "accept", None),
    ("capture.jsonl:4", "accept", None),
    ("capture.jsonl:5", "accept", None),
    ("capture.jsonl:6", "duplicate", None),
    ("capture.jsonl:7", "accept", None),
    ("capture.jsonl:8", "pending", None),
    ("capture.jsonl:9", "accept", None),
    ("capture.jsonl:10", "accept", None),
    ("broken.jsonl:1", "reject", "broken-chain"),
    ("broken.jsonl:2", "accept", None),
    ("broken.jsonl:3", "reject", "equivocation"),
    ("broken.jsonl:4", "reject", "stale"),
    ("broken.jsonl:5", "reject", "untrusted-key"),
    ("broken.jsonl:6", "reject", "wrong-audience"),
    ("broken.jsonl:7", "reject", "bad-signature"),
    ("broken.jsonl:8", "reject", "policy"),
    ("broken.jsonl:9", "reject", "malformed"),
]


def test_examples_are_what_make_examples_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_examples.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_make_run_shows_the_documented_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    """The command line of `make run`, through the CLI, exits 1 (some rejections)."""
    from app.cli import main

    status = main(
        [
            "verify",
            "--json",
            "--trust",
            str(EXAMPLES / "trust.json"),
            "--at",
            "1793000030",
            str(EXAMPLES / "capture.jsonl"),
            str(EXAMPLES / "broken.jsonl"),
        ]
    )
    verdicts = json.loads(capsys.readouterr().out)
    got = [(Path(v["source"]).name, v["outcome"], v["reason"]) for v in verdicts]
    assert got == EXAMPLE_VERDICTS
    assert status == 1
    equivocation = verdicts[12]["equivocation"]
    assert equivocation is not None and equivocation["variant"] == "content"
    assert verdicts[4]["chain"]["length"] == 3 and not verdicts[4]["chain"]["partial"]
