"""``handoff-trace tokens`` and the checks ``handoff-trace serve`` makes before it starts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from app.cli import main
from app.store.db import make_engine, transaction
from app.store.tokens import Role, authenticate


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DATABASE_URL", "HANDOFF_TRACE_TRUST_FILE"):
        monkeypatch.delenv(name, raising=False)


def test_tokens_create_list_revoke(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "tokens", "create", "--role", "ingest", "--name", "ci", "--db", db_url
    )
    assert code == 0
    token = out.splitlines()[-1]
    # Profile §12: the token alone on the last line.
    assert token.startswith("ht_") and " " not in token
    engine = make_engine(db_url)
    try:
        with transaction(engine) as session:
            principal = authenticate(session, token, now=int(time.time()))
        assert principal is not None and (principal.name, principal.role) == ("ci", Role.INGEST)

        code, out, _ = run(capsys, "tokens", "list", "--json", "--db", db_url)
        [listed] = json.loads(out)
        assert (listed["name"], listed["role"], listed["revoked_at"]) == ("ci", "ingest", None)
        assert token not in out
        code, out, _ = run(capsys, "tokens", "list", "--db", db_url)
        assert "ci" in out and token not in out

        assert run(capsys, "tokens", "revoke", "--name", "ci", "--db", db_url)[0] == 0
        with transaction(engine) as session:
            assert authenticate(session, token, now=int(time.time())) is None
    finally:
        engine.dispose()
    code, _, err = run(capsys, "tokens", "revoke", "--name", "ci", "--db", db_url)
    assert (code, err.strip()) == (2, "handoff-trace: error: no active token named 'ci'")
    # A name is never given to a second token, so the audit log's actors stay unambiguous.
    code, _, err = run(capsys, "tokens", "create", "--role", "read", "--name", "ci", "--db", db_url)
    assert code == 2 and "exists already" in err


@pytest.mark.parametrize("name", ["", "has space", "-dash-first", "x" * 65, "bidi\u202e"])
def test_token_names_are_plain(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    code, _, err = run(capsys, "tokens", "create", "--role", "read", f"--name={name}", "--db", url)
    assert code == 2 and "token name" in err


def test_tokens_create_expires_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    before = int(time.time())
    code, out, _ = run(
        capsys,
        "tokens",
        "create",
        "--role",
        "read",
        "--name",
        "temp",
        "--expires-in",
        "12h",
        "--db",
        url,
    )
    assert code == 0 and "expires 20" in out
    token = out.splitlines()[-1]
    _, out, _ = run(capsys, "tokens", "list", "--json", "--db", url)
    [listed] = json.loads(out)
    assert before + 12 * 3600 <= listed["expires_at"] <= int(time.time()) + 12 * 3600
    engine = make_engine(url)
    try:
        with transaction(engine) as session:
            assert authenticate(session, token, now=listed["expires_at"] - 1) is not None
            assert authenticate(session, token, now=listed["expires_at"]) is None
    finally:
        engine.dispose()
    _, out, _ = run(capsys, "tokens", "list", "--db", url)
    assert "EXPIRES" in out.splitlines()[0]


@pytest.mark.parametrize("value", ["0", "-1", "12x", "1.5h", "", "9999999999d"])
def test_tokens_create_refuses_a_bad_duration(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tokens", "create", "--role", "read", "--name", "t", f"--expires-in={value}"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--db", f"sqlite:///{tmp_path}/d"])
    assert exit_info.value.code == 2
    assert "is not a duration" in capsys.readouterr().err


def test_tokens_create_refuses_an_expiry_beyond_ten_years(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tokens", "create", "--role", "read", "--name", "t", "--expires-in", "4000d"]
    code, _, err = run(capsys, *argv, "--db", f"sqlite:///{tmp_path / 'd.sqlite'}")
    assert code == 2 and "a token expires 1 s to" in err


def test_tokens_create_needs_a_known_role(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(
            ["tokens", "create", "--role", "root", "--name", "x", "--db", f"sqlite:///{tmp_path}/d"]
        )
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_serve_refuses_to_start_without_a_trust_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "serve", "--db", f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert code == 2
    assert err.strip() == (
        "handoff-trace: error: no trust file: set HANDOFF_TRACE_TRUST_FILE or pass --trust FILE "
        "(the service refuses to verify against nothing)"
    )
    assert not (tmp_path / "db.sqlite").exists()  # nothing touched before the check


def test_serve_refuses_an_unsafe_trust_file(
    trust_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trust_file.chmod(0o666)
    code, _, err = run(
        capsys, "serve", "--trust", str(trust_file), "--db", f"sqlite:///{tmp_path}/d"
    )
    assert code == 2 and "writable by every user" in err
    missing = tmp_path / "missing.json"
    code, _, err = run(capsys, "serve", "--trust", str(missing), "--db", f"sqlite:///{tmp_path}/d")
    assert code == 2 and "cannot read trust file" in err


def test_serve_refuses_an_unreachable_database(
    trust_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "postgresql+psycopg://nobody@127.0.0.1:1/none?connect_timeout=2"
    code, _, err = run(capsys, "serve", "--trust", str(trust_file), "--db", url)
    assert code == 2 and err.startswith("handoff-trace: error: migration failed: ")
    assert "Traceback" not in err


def test_serve_checks_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--port", "70000"], ["--port", "0"], ["--workers", "0"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["serve", *argv])
        assert exit_info.value.code == 2
    capsys.readouterr()
