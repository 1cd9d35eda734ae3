"""``handoff-trace tap``: its options are checked before anything starts (the proxy itself
is exercised end to end by tests/live/test_tap_proxy.py and tests/live/test_system.py)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from app.cli import main

GOOD = {
    "--listen": "127.0.0.1:9001",
    "--upstream": "http://127.0.0.1:9000",
    "--receiver": "spiffe://b/agent/coder",
    "--service": "http://127.0.0.1:8000",
}


# --egress-listen with what it needs but its address (then given by each case).
EGRESS = ["--enforce", "--trust", "TRUST", "--key-file", "OWN", "--egress-listen"]


def run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exited:
            code = int(exited.code or 0)
    return code, err.getvalue()


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--listen", "nohost"], "is not HOST:PORT"),
        (["--listen", "127.0.0.1:99999"], "is not HOST:PORT"),
        (["--upstream", "ftp://x"], "is not an http(s) URL"),
        (["--service", "trace:8000"], "is not an http(s) URL"),
        (["--idle-timeout", "0"], "is not between 0 and 86400 seconds"),
        (["--shutdown-timeout", "soon"], "is not a whole number"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], complaint: str) -> None:
    options = {**GOOD, args[0]: args[1]}
    code, err = run(["tap", *(x for pair in options.items() for x in pair)])
    assert code == 2
    assert complaint in err


def test_the_token_is_never_taken_on_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANDOFF_TRACE_TOKEN", "from-the-environment")
    code, err = run(["tap", *(x for pair in GOOD.items() for x in pair), "--token", "t"])
    assert code == 2
    assert "--token is not taken" in err and "--token-file" in err
    assert "from-the-environment" not in err


@pytest.mark.parametrize(
    ("file_text", "env", "complaint"),
    [
        (None, "", "no ingest token: pass --token-file FILE or set HANDOFF_TRACE_TOKEN"),
        ("", "ignored", "no ingest token"),
        ("two words\n", "", "does not hold one token"),
        ("missing", "", "cannot read the token file"),
    ],
)
def test_a_missing_or_bad_token_is_a_usage_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    file_text: str | None,
    env: str,
    complaint: str,
) -> None:
    monkeypatch.setenv("HANDOFF_TRACE_TOKEN", env)
    argv = ["tap", *(x for pair in GOOD.items() for x in pair)]
    if file_text is not None:
        token_file = tmp_path / "token"
        if file_text != "missing":
            token_file.write_text(file_text)
        argv += ["--token-file", str(token_file)]
    code, err = run(argv)
    assert code == 2
    assert complaint in err
    assert err.count("\n") == 1  # one line, no traceback


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        (["--enforce"], "--enforce needs the trust configuration: --trust FILE"),
        (["--trust", "TRUST"], "--trust and --key-file are for --enforce"),
        (["--enforce", "--trust", "MISSING"], "cannot use the trust file"),
        (["--enforce", "--trust", "TRUST", "--key-file", "MISSING"], "cannot use the key file"),
        (["--enforce", "--trust", "TRUST", "--key-file", "OTHER"], "not the --receiver"),
        (["--egress-listen", "127.0.0.1:9002"], "--egress-listen needs --enforce and"),
        (["--delegate", "spiffe://t", "http://t"], "--delegate is for --egress-listen"),
        (
            ["--enforce", "--trust", "TRUST", "--egress-listen", "127.0.0.1:9002"],
            "--egress-listen needs --enforce and the agent's --key-file",
        ),
        (
            [*EGRESS, "0.0.0.0:9002", "--delegate", "spiffe://t", "http://t"],
            "--egress-listen must be a loopback address",
        ),
        (
            [*EGRESS, "127.0.0.1:9001", "--delegate", "spiffe://t", "http://t"],
            "--egress-listen needs a port of its own",
        ),
        ([*EGRESS, "127.0.0.1:9002"], "needs at least one --delegate ID URL"),
        ([*EGRESS, "127.0.0.1:9002", "--delegate", "spiffe://t", "t:80"], "not an http(s) URL"),
        (
            [
                *EGRESS,
                "[::1]:9002",
                *("--delegate", "a", "http://t", "--delegate", "b", "http://T"),
            ],
            "T is named twice",
        ),
    ],
)
def test_bad_enforce_options_are_usage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str], complaint: str
) -> None:
    from handoff_context import Signer, trust_document

    other = Signer.generate("spiffe://b/agent/other", "Ed25519", kid="o1")
    own = Signer.generate(GOOD["--receiver"], "Ed25519", kid="c1")
    (tmp_path / "trust.json").write_text(json.dumps(trust_document([other])))
    other.save(tmp_path / "other.jwk")
    own.save(tmp_path / "own.jwk")
    files = {
        "TRUST": tmp_path / "trust.json",
        "OTHER": tmp_path / "other.jwk",
        "OWN": tmp_path / "own.jwk",
        "MISSING": tmp_path / "missing",
    }
    monkeypatch.setenv("HANDOFF_TRACE_TOKEN", "t")
    argv = ["tap", *(x for pair in GOOD.items() for x in pair)]
    argv += [str(files.get(x, x)) for x in extra]
    argv += ["--state-dir", str(tmp_path)]
    code, err = run(argv)
    assert code == 2, err
    assert complaint in err
    assert err.count("\n") == 1  # one line, no traceback
