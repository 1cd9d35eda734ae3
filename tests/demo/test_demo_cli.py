"""`handoff-trace demo`: options, outputs, and the one-line errors for bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import cbor2
import pytest
from handoff_context import Policy, Timing, TrustStore

from app.cli import main
from app.cli.common import UsageError
from app.demo import DemoPaths
from app.demo.load import DemoLoadError, load_run
from app.settings import Settings


def run_demo(tmp_path: Path, *extra: str) -> int:
    return main(["demo", "--dialogs", "6", "--out", str(tmp_path / "x.jsonl"), *extra])


def test_outputs_beside_the_capture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answers = tmp_path / "key.jsonl"
    code = run_demo(tmp_path, "--fault-rate", "1", "--answer-key", str(answers), "--start", "5000")
    err = capsys.readouterr().err
    assert code == 0
    assert "judge hops and flags with --now" in err and "handoff-trace verify" in err
    records = [json.loads(line) for line in (tmp_path / "x.jsonl").read_text().splitlines()]
    assert records and all(
        set(r) <= {"received_at", "received_by", "dialog", "payload"} for r in records
    )
    times = [r["received_at"] for r in records]
    assert times == sorted(times) and times[0] >= 5000  # receive-time order, from --start
    cbor = (tmp_path / "x.cbor").read_bytes()
    if cbor:
        assert set(cbor2.loads(cbor)) >= {"received_at", "received_by", "payload"}
    trust = TrustStore.load(tmp_path / "x.trust.json")
    assert len(trust.issuers) == 12 and "spiffe://rogue.example/agent/shadow-1" not in trust
    assert (tmp_path / "x.objects").is_dir()
    lines = [json.loads(line) for line in answers.read_text().splitlines()]
    assert lines and all(
        set(a) == {"fault", "variant", "iss", "hop", "offer", "dialog", "case", "detail"}
        for a in lines
    )


def test_trust_out_and_no_answer_key(tmp_path: Path) -> None:
    assert run_demo(tmp_path, "--trust-out", str(tmp_path / "t.json"), "--agents", "4") == 0
    assert len(TrustStore.load(tmp_path / "t.json").issuers) == 4
    assert not (tmp_path / "x.trust.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dialogs", "-1"], "argument --dialogs: '-1' must not be negative"),
        (["--dialogs", "many"], "argument --dialogs: 'many' is not a whole number"),
        (["--agents", "3"], "argument --agents: '3' must be between 4 and 10000"),
        (["--fault-rate", "1.01"], "argument --fault-rate: '1.01' is outside 0..1"),
        (["--fault-rate", "-0.1"], "argument --fault-rate: '-0.1' is outside 0..1"),
        (["--fault-rate", "nan"], "argument --fault-rate: 'nan' is outside 0..1"),
        (["--start", "-5"], "argument --start: '-5' must not be negative"),
        (["--seed", "x"], "argument --seed: 'x' is not a whole number"),
    ],
)
def test_bad_options_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        run_demo(tmp_path, *args)
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"handoff-trace demo: error: {message}"
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "{d}/missing/x.jsonl"], "cannot write --out {d}/missing/x.jsonl: directory"),
        (["--out", "{d}/x.json"], "--out {d}/x.json must name a JSON Lines file"),
        (["--out", "{d}/x.jsonl", "--trust-out", "{d}"], "cannot write --trust-out {d}: it is"),
        (
            ["--out", "{d}/x.jsonl", "--answer-key", "{d}/no/a.jsonl"],
            "cannot write --answer-key {d}/no/a.jsonl: directory",
        ),
    ],
)
def test_unwritable_paths_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    argv = [a.format(d=tmp_path) for a in args]
    assert main(["demo", "--dialogs", "1", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"handoff-trace: error: {message.format(d=tmp_path)}"
    )


def test_zero_dialogs_is_an_empty_run(tmp_path: Path) -> None:
    assert run_demo(tmp_path, "--dialogs", "0", "--answer-key", str(tmp_path / "a.jsonl")) == 0
    assert (tmp_path / "x.jsonl").read_bytes() == b"" == (tmp_path / "a.jsonl").read_bytes()


def test_cases_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answers = tmp_path / "a.jsonl"
    code = run_demo(
        tmp_path,
        "--dialogs",
        "0",
        "--cases",
        "4",
        "--fault-rate",
        "1",
        "--answer-key",
        str(answers),
    )
    assert code == 0 and "0 dialogs and 4 envelope cases" in capsys.readouterr().err
    payloads = [
        json.loads(line)["payload"] for line in (tmp_path / "x.jsonl").read_text().splitlines()
    ]
    assert any("case_event" in p for p in payloads)
    assert any(p.get("method") in ("SendMessage", "message/send") for p in payloads)
    lines = [json.loads(line) for line in answers.read_text().splitlines()]
    assert lines and all(a["offer"] is None and a["case"].startswith("case-") for a in lines)


def test_load_with_a_bad_setting_writes_the_run_then_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://db.example/handoffs")
    assert run_demo(tmp_path, "--load") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "handoff-trace: error: DATABASE_URL must start with sqlite:/// or "
        "postgresql+psycopg://, not mysql://"
    )
    assert (tmp_path / "x.jsonl").is_file()  # the run was written before the load failed


def test_load_run_raises_its_own_error_not_the_clis(tmp_path: Path) -> None:
    paths = DemoPaths.beside(tmp_path / "x.jsonl", trust=None, answers=None)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with pytest.raises(DemoLoadError) as info:  # no run written: no trust file
        load_run(paths, now=None, settings=Settings(), url=url)
    assert info.value.reason == "demo-load" and "x.trust.json" in info.value.detail
    assert not isinstance(info.value, UsageError)
    with pytest.raises(DemoLoadError, match="DATABASE_URL must start with"):
        load_run(paths, now=None, settings=Settings(), url="mysql://db.example/h")


def test_help_states_the_librarys_receiver_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """The faults assume the receiver's defaults, which live in the library (#20)."""
    with pytest.raises(SystemExit) as done:
        main(["demo", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    policy, timing = Policy(), Timing()
    assert (
        f"(skew {policy.skew} s, lifetime {policy.max_lifetime} s, chain {policy.max_chain}, "
        f"lost-outcome after {timing.lost_outcome_after} s)"
    ) in text
