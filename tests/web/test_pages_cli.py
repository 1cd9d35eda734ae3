"""``handoff-trace users`` and ``handoff-trace run-demo`` (what ``make run`` starts)."""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select

from app.cli import main
from app.cli import run as run_cli
from app.store import db
from app.store.models import UserRow
from app.store.users import check_password, open_session, session_user


def _check(url: str, username: str, password: str) -> bool:
    engine = db.make_engine(url)
    try:
        with db.transaction(engine) as session:
            return check_password(session, username=username, password=password) is not None
    finally:
        engine.dispose()


def test_users_create_prints_a_generated_password_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert main(["users", "create", "--username", "ops", "--role", "operator", "--db", url]) == 0
    out = capsys.readouterr().out.splitlines()
    password = out[-1]
    assert "shown once" in out[0] and len(password) >= 16
    assert _check(url, "ops", password)
    assert not _check(url, "ops", password + "x")
    assert main(["users", "create", "--username", "ops", "--role", "read", "--db", url]) == 2
    assert "exists already" in capsys.readouterr().err


def test_users_create_reads_the_password_from_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    monkeypatch.setattr("sys.stdin", io.StringIO("correct horse battery\n"))
    args = ["users", "create", "--username", "ann", "--role", "admin", "--password-stdin"]
    assert main([*args, "--db", url]) == 0
    assert "correct horse" not in capsys.readouterr().out
    assert _check(url, "ann", "correct horse battery")
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert (
        main(
            [
                "users",
                "create",
                "--username",
                "bo",
                "--role",
                "read",
                "--password-stdin",
                "--db",
                url,
            ]
        )
        == 2
    )
    assert "12 to 1024 characters" in capsys.readouterr().err
    assert main(["users", "list", "--json", "--db", url]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(u["username"], u["role"]) for u in listed] == [("ann", "admin")]


def test_users_refuse_the_ingest_role_and_bad_names(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with pytest.raises(SystemExit):
        main(["users", "create", "--username", "x", "--role", "ingest", "--db", url])
    assert main(["users", "create", "--username", "<b>", "--role", "read", "--db", url]) == 2


def test_users_disable_ends_the_accounts_sessions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert main(["users", "create", "--username", "ops", "--role", "operator", "--db", url]) == 0
    password = capsys.readouterr().out.splitlines()[-1]
    engine = db.make_engine(url)
    try:
        with db.transaction(engine) as session:
            user = session.execute(select(UserRow).where(UserRow.username == "ops")).scalar_one()
            cookies = [open_session(session, user=user, now=1, lifetime=10**10) for _ in "ab"]
        assert main(["users", "disable", "--username", "ops", "--db", url]) == 0
        assert "2 open session(s) ended" in capsys.readouterr().out
        with db.transaction(engine) as session:
            assert all(session_user(session, token=c, now=2) is None for c in cookies)
    finally:
        engine.dispose()
    assert not _check(url, "ops", password)
    assert main(["users", "list", "--json", "--db", url]) == 0
    assert json.loads(capsys.readouterr().out)[0]["disabled"] is True
    assert main(["users", "disable", "--username", "ops", "--db", url]) == 2
    assert "no enabled user named 'ops'" in capsys.readouterr().err


def test_run_demo_loads_once_and_prints_a_fresh_login(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[argparse.Namespace] = []
    monkeypatch.setattr("app.cli.serve.cmd_serve", lambda args: served.append(args) or 0)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    # run-demo puts the demo's log key into the environment for ``serve``: recorded as
    # absent here, so that it is gone again after the test (a later test's ``export``
    # would sign with it).
    monkeypatch.setenv("HANDOFF_TRACE_LOG_KEY_FILE", "")
    monkeypatch.delenv("HANDOFF_TRACE_LOG_KEY_FILE")
    monkeypatch.setenv("HANDOFF_TRACE_PORT", str(_free_port()))
    url = f"sqlite:///{tmp_path / 's.db'}"
    args = ["run-demo", "--db", url, "--dir", str(tmp_path / "demo"), "--dialogs", "3"]
    chosen = _free_port()
    assert main([*args, "--port", str(chosen)]) == 0
    first = capsys.readouterr()
    assert f"http://127.0.0.1:{chosen}/" in first.out
    password = first.out.split("one-time password ", 1)[1].split()[0]
    assert _check(url, run_cli.DEMO_USER, password)
    assert served[0].trust.endswith("capture.trust.json") and served[0].db == url
    assert main(args) == 0
    second = capsys.readouterr()
    assert "not loading again" in second.err
    again = second.out.split("one-time password ", 1)[1].split()[0]
    assert again != password and _check(url, run_cli.DEMO_USER, again)
    assert not _check(url, run_cli.DEMO_USER, password)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_run_demo_says_a_taken_port_before_loading_or_printing_a_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[int] = []  # the port of the socket each serve was given
    monkeypatch.setattr(
        "app.cli.serve.cmd_serve", lambda args: served.append(args.sock.getsockname()[1]) or 0
    )
    monkeypatch.delenv("DATABASE_URL", raising=False)
    # run-demo puts the demo's log key into the environment for ``serve``: recorded as
    # absent here, so that it is gone again after the test (a later test's ``export``
    # would sign with it).
    monkeypatch.setenv("HANDOFF_TRACE_LOG_KEY_FILE", "")
    monkeypatch.delenv("HANDOFF_TRACE_LOG_KEY_FILE")
    url = f"sqlite:///{tmp_path / 's.db'}"
    args = ["run-demo", "--db", url, "--dir", str(tmp_path / "demo"), "--dialogs", "2"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        # The port comes from HANDOFF_TRACE_PORT (what `make run` with no PORT leaves alone).
        monkeypatch.setenv("HANDOFF_TRACE_PORT", str(port))
        assert main(args) == 2
        said = capsys.readouterr()
        assert f"port {port} on 127.0.0.1 is taken" in said.err and "PORT=8123" in said.err
        assert "password" not in said.out + said.err and served == []
        assert not (tmp_path / "demo").exists()  # nothing loaded either
        # Another port given: it serves there, on the socket it bound first.
        other = _free_port()
        assert main([*args, "--port", str(other)]) == 0
    out = capsys.readouterr().out
    assert f"http://127.0.0.1:{other}/" in out and "one-time password" in out
    assert served == [other]


def test_make_run_installs_only_what_running_needs_and_takes_port(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "MAKEFLAGS": ""}
    dry = subprocess.run(
        ["make", "-n", "-C", str(repo), "run", "PORT=8123", f"STAMP_DIR={tmp_path}"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    installs = [line for line in dry.splitlines() if "pip install" in line and " -e " in line]
    assert installs and all("[dev" not in line and "dev]" not in line for line in installs)
    assert "run-demo --port 8123" in dry
    plain = subprocess.run(
        ["make", "-n", "-C", str(repo), "run", f"STAMP_DIR={tmp_path}"],
        capture_output=True,
        text=True,
        env={**env, "PORT": ""},
        check=True,
    ).stdout
    assert "run-demo" in plain and "--port" not in plain
