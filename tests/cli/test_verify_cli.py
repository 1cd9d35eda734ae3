"""The command line as a user drives it: keys, sign, verify, and how it fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main
from app.cli.root import build_parser

AGENTS = ("assistant", "planner", "coder", "tester")
ID = "spiffe://example.org/agent/{}"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _key(agent: str) -> str:
    return f"keys/spiffe-example.org-agent-{agent}.jwk"


@pytest.fixture
def chain_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Path:
    """The README's worked example: four keys and a 3-hop chain."""
    monkeypatch.chdir(tmp_path)
    for agent in AGENTS:
        assert _run(capsys, "keys", "new", "--id", ID.format(agent))[0] == 0
    steps = [
        ("assistant", "planner", ["--dialog", "ctx-7c1e", "--task", "task-42"]),
        ("planner", "coder", ["--after", "hop1.json"]),
        ("coder", "tester", ["--after", "hop2.json"]),
    ]
    for n, (iss, aud, extra) in enumerate(steps, start=1):
        code, _, err = _run(
            capsys,
            "sign",
            "offer",
            "--key",
            _key(iss),
            "--iss",
            ID.format(iss),
            "--aud",
            ID.format(aud),
            "--iat",
            "1793000000",
            *extra,
            "--out",
            f"hop{n}.json",
        )
        assert code == 0, err
    return tmp_path


def _verify(
    capsys: pytest.CaptureFixture[str], *inputs: str, extra: tuple[str, ...] = ()
) -> tuple[int, list[dict[str, object]]]:
    code, out, _ = _run(
        capsys,
        "verify",
        "--trust",
        "trust.json",
        "--receiver",
        ID.format("tester"),
        "--at",
        "1793000010",
        "--json",
        *extra,
        *inputs,
    )
    return code, json.loads(out)


def test_worked_example_accepts_then_broken_chain(
    chain_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, verdicts = _verify(capsys, "hop3.json")
    assert code == 0
    assert [v["outcome"] for v in verdicts] == ["accept"]
    assert verdicts[0]["chain"] == {
        **verdicts[0]["chain"],
        "carried": True,
        "length": 3,
        "partial": False,
    }
    hop = json.loads(Path("hop3.json").read_text())
    del hop["chain"][1]
    Path("broken.json").write_text(json.dumps(hop))
    code, verdicts = _verify(capsys, "broken.json")
    assert code == 1
    assert (verdicts[0]["outcome"], verdicts[0]["reason"]) == ("reject", "broken-chain")
    chain_check = next(c for c in verdicts[0]["checks"] if c["check"] == "chain")
    assert chain_check["result"] == "fail"


def test_verdict_json_has_the_spec_11_shape(
    chain_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, verdicts = _verify(capsys, "hop3.json")
    v = verdicts[0]
    assert set(v) >= {
        "source",
        "element",
        "form",
        "digest",
        "iss",
        "aud",
        "hop",
        "outcome",
        "reason",
        "detail",
        "checks",
        "chain",
        "refs",
        "equivocation",
    }
    assert [c["check"] for c in v["checks"]] == [
        "signature",
        "audience",
        "freshness",
        "replay",
        "dialog",
        "chain",
        "refs",
    ]
    assert isinstance(v["digest"], str) and len(v["digest"]) == 43
    assert v["source"] == "hop3.json"


def test_status_then_table_output_and_exit_zero(
    chain_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(
        capsys,
        "sign",
        "status",
        "--key",
        _key("tester"),
        "--iss",
        ID.format("tester"),
        "--offer",
        "hop3.json",
        "--state",
        "accepted",
        "--iat",
        "1793000012",
        "--out",
        "status.json",
    )
    assert code == 0, err
    # The status comes first: it is judged once its offer appears later in the run.
    code, out, _ = _run(
        capsys, "verify", "--trust", "trust.json", "--at", "1793000010", "status.json", "hop3.json"
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["SOURCE", "ELEMENT", "OUTCOME", "REASON"]
    assert "status.json" in lines[1] and "accept" in lines[1]
    assert "2 verdicts: 2 accept" in out


def test_stdin_and_bad_line_keep_going(
    chain_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = json.loads(Path("hop3.json").read_text())
    lines = ["{not json", json.dumps(good), json.dumps({"offer": "a.b"})]
    Path("mixed.jsonl").write_text("\n".join(lines) + "\n")
    code, verdicts = _verify(capsys, "mixed.jsonl")
    assert code == 1
    assert [(v["outcome"], v["reason"]) for v in verdicts] == [
        ("reject", "malformed"),
        ("accept", None),
        ("reject", "malformed"),
    ]
    assert verdicts[0]["source"] == "mixed.jsonl:1"


def test_cose_form_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for agent in ("planner", "coder", "tester"):
        _run(capsys, "keys", "new", "--id", ID.format(agent), "--alg", "Ed25519")
    assert (
        _run(
            capsys,
            "sign",
            "offer",
            "--form",
            "cose",
            "--key",
            _key("planner"),
            "--iss",
            ID.format("planner"),
            "--aud",
            ID.format("coder"),
            "--dialog",
            "d1",
            "--iat",
            "1793000000",
            "--out",
            "a.cbor",
        )[0]
        == 0
    )
    assert (
        _run(
            capsys,
            "sign",
            "offer",
            "--form",
            "cose",
            "--key",
            _key("coder"),
            "--iss",
            ID.format("coder"),
            "--aud",
            ID.format("tester"),
            "--after",
            "a.cbor",
            "--iat",
            "1793000001",
            "--out",
            "b.cbor",
        )[0]
        == 0
    )
    code, verdicts = _verify(capsys, "b.cbor")
    assert code == 0
    assert (verdicts[0]["form"], verdicts[0]["outcome"]) == ("cose", "accept")
    assert verdicts[0]["chain"]["length"] == 2


def test_ref_policy_with_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for agent in ("planner", "tester"):
        _run(capsys, "keys", "new", "--id", ID.format(agent))
    Path("objects").mkdir()
    Path("objects/plan.md").write_text("the plan\n")
    assert (
        _run(
            capsys,
            "sign",
            "offer",
            "--key",
            _key("planner"),
            "--iss",
            ID.format("planner"),
            "--aud",
            ID.format("tester"),
            "--dialog",
            "d",
            "--iat",
            "1793000000",
            "--ref",
            "objects/plan.md",
            "--out",
            "h.json",
        )[0]
        == 0
    )
    code, verdicts = _verify(
        capsys, "h.json", extra=("--ref-policy", "require", "--objects", "objects")
    )
    assert code == 0 and verdicts[0]["refs"][0]["outcome"] == "verified"
    Path("objects/plan.md").write_text("another plan\n")
    code, verdicts = _verify(
        capsys, "h.json", extra=("--ref-policy", "check-available", "--objects", "objects")
    )
    assert code == 1
    assert verdicts[0]["reason"] == "ref-mismatch"
    assert verdicts[0]["refs"][0]["outcome"] == "mismatch"
    Path("objects/plan.md").unlink()
    code, verdicts = _verify(
        capsys, "h.json", extra=("--ref-policy", "require", "--objects", "objects")
    )
    assert (code, verdicts[0]["reason"]) == (1, "unverifiable-ref")


@pytest.mark.parametrize("problem", ["missing", "private", "world-writable", "empty"])
def test_bad_trust_file_exits_2_with_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    problem: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    _run(capsys, "keys", "new", "--id", ID.format("planner"), "--out", "k.jwk")
    Path("x.json").write_text("{}")
    if problem == "missing":
        Path("trust.json").unlink()
    elif problem == "private":
        Path("trust.json").write_text(
            json.dumps(
                {"issuers": [{"id": "a:b", "keys": [json.loads(Path("k.jwk").read_text())]}]}
            )
        )
    elif problem == "world-writable":
        os.chmod("trust.json", 0o666)
    else:
        Path("trust.json").write_text('{"issuers": []}')
    code, out, err = _run(capsys, "verify", "--trust", "trust.json", "x.json")
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("handoff-trace: error:")
    assert "Traceback" not in err


def test_element_size_limit_from_the_option_or_the_service_setting(
    chain_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``verify`` refuses an element over the limit as ``ingest`` does (issue 15): the
    option wins, else HANDOFF_TRACE_MAX_ELEMENT_BYTES, else the profile's 64 KiB."""
    refs = []
    for n in range(12):  # refs make the offer larger than the tightest limit
        Path(f"part{n}.txt").write_text(f"part {n}\n")
        refs += ["--ref", f"part{n}.txt"]
    signed = ("sign", "offer", "--key", _key("coder"), "--iss", ID.format("coder"))
    to = ("--aud", ID.format("tester"), "--dialog", "ctx-7c1e", "--iat", "1793000000")
    assert _run(capsys, *signed, *to, *refs, "--out", "big.json")[0] == 0
    size = len(json.loads(Path("big.json").read_text())["offer"])
    assert 1024 < size < 65536
    assert [v["outcome"] for v in _verify(capsys, "big.json")[1]] == ["accept"]
    monkeypatch.setenv("HANDOFF_TRACE_MAX_ELEMENT_BYTES", "1024")
    code, [refused] = _verify(capsys, "big.json")
    assert code == 1 and (refused["outcome"], refused["reason"]) == ("reject", "malformed")
    assert refused["detail"] == "offer is larger than 1024 octets"
    code, [roomy] = _verify(capsys, "big.json", extra=("--max-element-bytes", str(size)))
    assert code == 0 and roomy["outcome"] == "accept"  # the option wins over the setting
    monkeypatch.setenv("HANDOFF_TRACE_MAX_ELEMENT_BYTES", "70000")
    code, out, err = _run(capsys, "verify", "--trust", "trust.json", "big.json")
    assert code == 2 and out == ""
    assert "HANDOFF_TRACE_MAX_ELEMENT_BYTES must be 1024 to 65536, not 70000" in err
    with pytest.raises(SystemExit) as exc:
        main(["verify", "--trust", "trust.json", "--max-element-bytes", "10", "big.json"])
    assert exc.value.code == 2


def test_unreadable_input_and_bad_option_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    _run(capsys, "keys", "new", "--id", ID.format("planner"))
    code, _, err = _run(capsys, "verify", "--trust", "trust.json", "nope.jsonl")
    assert code == 2 and "cannot read nope.jsonl" in err
    with pytest.raises(SystemExit) as exc:
        main(["verify", "--trust", "trust.json", "--skew", "-5", "x"])
    assert exc.value.code == 2


def test_help_documents_every_verify_option() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    verify = sub.choices["verify"]  # type: ignore[attr-defined]
    text = verify.format_help()
    for option in (
        "--trust",
        "--receiver",
        "--at",
        "--dialog",
        "--skew",
        "--max-lifetime",
        "--max-chain",
        "--max-element-bytes",
        "--ref-policy",
        "--objects",
        "--json",
        "INPUT",
    ):
        assert option in text
    for action in verify._actions:
        assert action.help, f"{action.dest} has no help text"


def test_readme_documents_every_command_and_option() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    parser = build_parser()

    def walk(p: object, prefix: str) -> None:
        for action in p._actions:  # type: ignore[attr-defined]
            if action.dest in ("help", "version"):
                continue
            if (
                getattr(action, "choices", None)
                and hasattr(action.choices, "items")
                and action.option_strings == []
            ):
                for name, child in action.choices.items():
                    walk(child, f"{prefix} {name}")
                continue
            for opt in action.option_strings:
                if opt.startswith("--"):
                    assert opt in readme, f"README does not document {prefix} {opt}"
        assert prefix.strip() in readme, f"README does not mention `{prefix.strip()}`"

    walk(parser, "handoff-trace")


def test_installed_entry_point_never_prints_a_traceback(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("handoff-trace")
    result = subprocess.run(
        [str(exe), "verify", "--trust", str(tmp_path / "none.json"), "x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "cannot read trust file" in result.stderr


def test_verify_collects_less_often_while_it_verifies_then_as_before(
    chain_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``verify`` keeps every verdict until it prints them, so the older generations are
    collected less often meanwhile (``fewer_collections``); the process is left as found."""
    import gc

    import app.ingest.verifying as verifying
    from app.cli import verify as verify_command

    before = gc.get_threshold()
    seen: list[tuple[int, ...]] = []
    real = verifying.verify_inputs

    def watched(*args: object, **kwargs: object) -> object:
        seen.append(gc.get_threshold())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(verify_command, "verify_inputs", watched)
    code, verdicts = _verify(capsys, "hop3.json")
    assert (code, [v["outcome"] for v in verdicts]) == (0, ["accept"])
    assert gc.get_threshold() == before
    assert seen == [(before[0], max(before[1], 100), before[2])]


def test_verify_with_its_forked_signature_helper_prints_the_same_bytes(
    chain_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``verify`` forks a child to verify signatures ahead on a second core for a large
    input (app/ingest/forked.py); forced on for the worked example, with a broken chain
    and a retransmission beside it, the output is byte for byte the one without."""
    from app.ingest import forked

    hop = json.loads(Path("hop3.json").read_text())
    del hop["chain"][1]
    Path("broken.json").write_text(json.dumps(hop))
    argv = ["verify", "--trust", "trust.json", "--at", "1793000010", "--json"]
    inputs = ["broken.json", "hop1.json", "hop2.json", "hop3.json", "hop3.json"]
    code, alone, _ = _run(capsys, *argv, *inputs)
    started: list[int] = []
    real_start = forked.Helper.start.__func__  # type: ignore[attr-defined]

    def start(cls: type[forked.Helper], *args: object, **kw: object) -> object:
        helper = real_start(cls, *args, **kw)
        if helper is not None:
            started.append(helper.pid)
        return helper

    monkeypatch.setattr(forked, "AHEAD", 0)
    monkeypatch.setattr(forked.Helper, "start", classmethod(start))
    # ``--jobs 2`` forks the helper whatever the input's size and the machine's load.
    assert _run(capsys, *argv, "--jobs", "2", *inputs) == (code, alone, "")
    outcomes = [v["outcome"] for v in json.loads(alone)]
    assert outcomes == ["reject", "accept", "accept", "duplicate", "duplicate"]
    assert code == 1 and len(started) == 1
    # ``auto`` forks nothing for an input this small.
    assert _run(capsys, *argv, "--jobs", "auto", *inputs) == (code, alone, "")
    assert len(started) == 1
    # ``--jobs 1``: no helper and no thread pool, the same bytes.
    import app.ingest.verifying as verifying

    def no_threads(*args: object, **kwargs: object) -> object:
        raise AssertionError("--jobs 1 uses no thread pool")

    monkeypatch.setattr(verifying, "submit_ahead", no_threads)
    assert _run(capsys, *argv, "--jobs", "1", *inputs) == (code, alone, "")
    assert len(started) == 1


@pytest.mark.parametrize("jobs", ["0", "-1", "two", ""])
def test_verify_refuses_a_jobs_count_that_is_not_auto_or_positive(
    chain_dir: Path, capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["verify", "--trust", "trust.json", "--jobs", jobs, "hop1.json"])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == ""
    assert "argument --jobs" in err and "auto" in err
