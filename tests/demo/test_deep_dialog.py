"""`handoff-trace demo --deep-dialog HOPS`: one big dialog whose deepest path goes 80 levels
down to a hop delegated to needle-1, every element signed by the run's trusted agents and
accepted by `verify`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from handoff_context import Form, TrustStore, digest_text, handoff_digest, parse_element

from app.cli import main
from app.demo.deep import DEEP_PATH
from app.ingest.verifying import VerifyOptions, verify_inputs


def test_a_deep_dialog_is_written_and_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.jsonl"
    assert main(["demo", "--dialogs", "2", "--deep-dialog", "150", "--out", str(out)]) == 0
    dialog = capsys.readouterr().err.split("deep dialog: ", 1)[1].split()[0]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    mine = [r for r in records if r.get("dialog") == dialog]
    offers = [r["payload"]["offer"].encode() for r in mine if "offer" in r["payload"]]
    assert len(offers) == 150
    times = [r["received_at"] for r in records]
    assert times == sorted(times)  # appended after the run, in receive order
    # Depth of each hop from its prev; the needle is at the end of the deep path.
    depth: dict[str, int] = {}
    for octets in offers:
        payload = parse_element(octets, Form.JWS).payload
        prev = getattr(payload, "prev", None)
        depth[digest_text(handoff_digest(octets))] = (
            0 if prev is None else depth[digest_text(prev)] + 1
        )
    needle = parse_element(offers[-1], Form.JWS).payload
    assert needle.aud.endswith("/needle-1")
    assert depth[digest_text(handoff_digest(offers[-1]))] >= DEEP_PATH
    trust = TrustStore.load(tmp_path / "x.trust.json")
    report = verify_inputs(
        [(str(out), "\n".join(json.dumps(r) for r in mine).encode())],
        trust=trust,
        options=VerifyOptions(at=mine[-1]["received_at"]),
        objects={},
        content_type=None,
    )
    assert report.verdicts and {v.outcome.value for v in report.verdicts} == {"accept"}
