"""``handoff-trace ingest``, ``hops``, ``flags`` and ``db upgrade`` with the exact interface
of issue 3, section 5, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from handoff_context import trust_document

from app.cli import main
from app.cli.store import _Progress
from app.store.db import head_revision
from tests.conftest import World
from tests.store.builders import T0, bundle, jsonl, offer, rec, st, status, twin

HOP_KEYS = ["offer", "iss", "aud", "hop", "dialog", "task", "state", "a2a_state", "flags"]
FLAG_KEYS = [
    "id",
    "kind",
    "variant",
    "severity",
    "status",
    "iss",
    "hop",
    "offer",
    "evidence",
    "opened_at",
    "case_id",
]


@pytest.fixture
def files(tmp_path: Path, world: World) -> dict[str, Path]:
    trust = tmp_path / "trust.json"
    signers = [world.assistant, world.planner, world.coder, world.tester]
    trust.write_text(json.dumps(trust_document(signers)))
    x = offer(world.planner, world.coder, task="task-9")
    y = twin(world.planner, x, aud=world.tester.iss)
    accepted = status(world.coder, x, "accepted", iat=T0 + 5)
    capture = tmp_path / "capture.jsonl"
    capture.write_bytes(
        jsonl(
            [
                rec(bundle(x), T0 + 1, world.coder.iss),
                rec(st(accepted), T0 + 6),
                rec(bundle(y), T0 + 2, world.tester.iss),
            ]
        )
    )
    return {"trust": trust, "capture": capture}


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code, out, _ = cli(capsys, *args, "--json")
    assert code == 0
    return json.loads(out)


def test_ingest_then_hops_and_flags(
    db_url: str, files: dict[str, Path], world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    trust, capture = str(files["trust"]), str(files["capture"])
    code, out, _ = cli(capsys, "ingest", "--db", db_url, "--trust", trust, "--json", capture)
    assert code == 1  # the second offer for the hop is rejected (equivocation)
    verdicts = json.loads(out)
    assert [v["outcome"] for v in verdicts] == ["accept", "accept", "reject"]
    assert verdicts[2]["equivocation"]["variant"] == "content"

    now = str(T0 + 30)
    [hop] = as_json(capsys, "hops", "--db", db_url, "--now", now)
    assert list(hop) == HOP_KEYS
    assert (hop["iss"], hop["aud"], hop["dialog"], hop["task"]) == (
        world.planner.iss,
        world.coder.iss,
        "ctx-7c1e",
        "task-9",
    )
    assert (hop["state"], hop["a2a_state"], hop["flags"]) == (
        "accepted",
        "TASK_STATE_WORKING",
        ["equivocation"],
    )
    assert as_json(capsys, "hops", "--db", db_url, "--now", now, "--state", "accepted") == [hop]
    assert as_json(capsys, "hops", "--db", db_url, "--now", now, "--state", "completed") == []
    assert as_json(capsys, "hops", "--db", db_url, "--now", now, "--flag", "equivocation")
    assert as_json(capsys, "hops", "--db", db_url, "--now", now, "--flag", "lost-outcome") == []
    assert as_json(capsys, "hops", "--db", db_url, "--now", now, "--dialog", "other") == []

    [flag] = as_json(capsys, "flags", "--db", db_url, "--now", now)
    assert list(flag) == FLAG_KEYS
    assert (flag["kind"], flag["variant"], flag["severity"], flag["status"]) == (
        "equivocation",
        "content",
        "critical",
        "open",
    )
    assert (flag["iss"], flag["hop"], flag["offer"]) == (
        world.planner.iss,
        hop["hop"],
        hop["offer"],
    )
    assert len(flag["evidence"]) == 2 and flag["opened_at"] == T0 + 2
    assert flag["case_id"] is None  # a hop's flag, not an envelope case's
    assert as_json(capsys, "flags", "--db", db_url, "--now", now, "--case", "C-1001") == []

    # The clock passes the lost-outcome deadline: the same store, another answer.
    later = str(T0 + 6 + 3600)
    kinds = [f["kind"] for f in as_json(capsys, "flags", "--db", db_url, "--now", later)]
    assert kinds == ["equivocation", "lost-outcome"]
    lost = as_json(capsys, "flags", "--db", db_url, "--now", later, "--kind", "lost-outcome")
    assert [f["kind"] for f in lost] == ["lost-outcome"]
    assert as_json(capsys, "flags", "--db", db_url, "--now", later, "--status", "resolved") == []
    [again] = as_json(capsys, "hops", "--db", db_url, "--now", later, "--flag", "lost-outcome")
    assert again["flags"] == ["equivocation", "lost-outcome"]


def test_tables_for_people(
    db_url: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    trust, capture = str(files["trust"]), str(files["capture"])
    code, out, _ = cli(capsys, "ingest", "--db", db_url, "--trust", trust, capture)
    assert code == 1
    assert "REJECTED" in out and "equivocation" in out
    assert "3 verdicts, 3 new elements stored, 0 retransmissions" in out
    code, out, _ = cli(capsys, "ingest", "--db", db_url, "--trust", trust, capture)
    # The equivocating offer stays an equivocation: the replay memory holds the first.
    assert "0 new elements stored, 2 retransmissions" in out
    code, out, _ = cli(capsys, "hops", "--db", db_url, "--now", str(T0 + 30))
    assert code == 0 and "TASK_STATE_WORKING" in out and out.rstrip().endswith("1 hops")
    code, out, _ = cli(capsys, "flags", "--db", db_url, "--now", str(T0 + 30))
    assert code == 0 and "equivocation" in out and out.rstrip().endswith("1 flags")


def test_trust_file_from_the_environment(
    tmp_path: Path,
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HANDOFF_TRACE_TRUST_FILE", str(files["trust"]))
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'env.db'}")
    code, _, _ = cli(capsys, "ingest", str(files["capture"]))
    assert code == 1
    assert (tmp_path / "env.db").exists()


def test_missing_trust_is_a_usage_error(
    tmp_path: Path,
    files: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HANDOFF_TRACE_TRUST_FILE", raising=False)
    db = f"sqlite:///{tmp_path / 'x.db'}"
    code, out, err = cli(capsys, "ingest", "--db", db, str(files["capture"]))
    assert (code, out) == (2, "")
    assert err == (
        "handoff-trace: error: no trust file: pass --trust FILE or set HANDOFF_TRACE_TRUST_FILE\n"
    )


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({"DATABASE_URL": "mysql://db/x"}, ["hops"], "DATABASE_URL must start with"),
        ({"HANDOFF_TRACE_SKEW": "-3"}, ["flags"], "HANDOFF_TRACE_SKEW must be at least 0"),
        ({}, ["hops", "--db", "oracle://db"], "DATABASE_URL must start with"),
    ],
)
def test_bad_configuration_exits_2_with_one_line(
    env: dict[str, str],
    args: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, _, err = cli(capsys, *args)
    assert code == 2
    assert message in err and err.count("\n") == 1


def test_db_upgrade_on_the_embedded_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    code, out, _ = cli(capsys, "db", "upgrade")
    assert (code, out) == (0, f"database schema at revision {head_revision()}\n")
    assert (tmp_path / "var" / "handoff-trace.db").exists()
    assert cli(capsys, "hops", "--json")[:2] == (0, "[]\n")


def test_db_upgrade_with_db(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "db", "upgrade", "--db", db_url)[:2] == (
        0,
        f"database schema at revision {head_revision()}\n",
    )


def test_progress_for_large_inputs() -> None:
    out = io.StringIO()
    progress = _Progress(out, large={"big.jsonl"})
    for done in range(1, 11):
        progress("small.jsonl", done, done / 10)
    progress("big.jsonl", 5, None)  # a pipe: how far it is read is unknown
    assert out.getvalue() == ""
    for done in range(1, 2001):
        progress("big.jsonl", done, done / 2000)
    progress("big.jsonl", 2000, 1.0)  # items left after the last byte was read
    lines = out.getvalue().splitlines()
    assert lines[0] == "big.jsonl: 10% read, 200 items"
    assert lines[-1] == "big.jsonl: 100% read, 2000 items"
    assert len(lines) == 10
