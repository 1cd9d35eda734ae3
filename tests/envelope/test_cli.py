"""``handoff-trace ingest`` reads envelope handoffs from the same files, checks references
against ``HANDOFF_TRACE_OBJECTS_DIR``, reports envelope errors, and ``flags --now`` applies
the acceptance window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from handoff_context import trust_document

from app.cli import main
from app.ingest.cases import case_detail
from app.store import db
from tests.conftest import T0, World

from .builders import BILLING, CASE, TRANSCRIPT, envelope, jsonl, message_v1, record, send_v1


def test_cli_ingest_of_envelopes(
    db_url: str,
    tmp_path: Path,
    world: World,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    trust = tmp_path / "trust.json"
    trust.write_text(json.dumps(trust_document([world.planner])))
    objects = tmp_path / "objects"
    objects.mkdir()
    (objects / "transcript.txt").write_bytes(TRANSCRIPT)
    monkeypatch.setenv("HANDOFF_TRACE_OBJECTS_DIR", str(objects))
    capture = tmp_path / "capture.jsonl"
    bad = send_v1(message_v1(envelope(goal=None, handoff_id="h-bad")))
    capture.write_bytes(jsonl([record(send_v1(message_v1()), T0, BILLING), bad]))

    code = main(["ingest", "--db", db_url, "--trust", str(trust), str(capture)])
    out, err = capsys.readouterr()
    assert code == 1  # an envelope item has an error
    assert f"{capture}:2: (envelope): 'goal' is a required property" in err
    assert "2 envelope items, 1 with errors" in out

    engine = db.make_engine(db_url)
    try:
        with db.transaction(engine) as session:
            detail = case_detail(session, CASE)
        assert detail is not None
        assert [r.outcome for r in detail.envelopes[0].references] == ["verified"]
    finally:
        engine.dispose()

    # No acceptance came: an hour after the handoff the sweep finds nobody owns the case.
    assert main(["flags", "--db", db_url, "--now", str(T0 + 3599), "--json"]) == 0
    before = {f["kind"] for f in json.loads(capsys.readouterr().out)}
    assert main(["flags", "--db", db_url, "--now", str(T0 + 3600), "--json"]) == 0
    after = json.loads(capsys.readouterr().out)
    assert {f["kind"] for f in after} - before == {"no-owner"}
    assert {f["case_id"] for f in after} == {CASE}
    # --case keeps one case's flags.
    for case, expected in ((CASE, after), ("C-other", [])):
        argv = ["flags", "--db", db_url, "--now", str(T0 + 3600), "--case", case, "--json"]
        assert main(argv) == 0
        assert json.loads(capsys.readouterr().out) == expected
