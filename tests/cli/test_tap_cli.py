"""``handoff-trace tap``: its options are checked before anything starts (the proxy itself
is exercised end to end by tests/live/test_system.py)."""

from __future__ import annotations

import contextlib
import io

import pytest

from app.cli import main


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--listen", "nohost"], "is not HOST:PORT"),
        (["--listen", "127.0.0.1:99999"], "is not HOST:PORT"),
        (["--upstream", "ftp://x"], "is not an http(s) URL"),
        (["--service", "trace:8000"], "is not an http(s) URL"),
    ],
)
def test_bad_options_are_usage_errors(args: list[str], complaint: str) -> None:
    good = {
        "--listen": "127.0.0.1:9001",
        "--upstream": "http://127.0.0.1:9000",
        "--receiver": "spiffe://b/agent/coder",
        "--service": "http://127.0.0.1:8000",
        "--token": "t",
    }
    good[args[0]] = args[1]
    argv = ["tap", *(x for pair in good.items() for x in pair)]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert complaint in err.getvalue()
