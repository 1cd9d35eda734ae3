"""What starting the CLI imports (issue 15, item 7): ``--version`` and ``--help`` import no
command module and nothing of the store, the web stack or the charts; ``verify`` imports no
store, and nothing of signing (joserfc, and with it ``cryptography``'s X.509 layer: about
0.04 s, a quarter of every start). Timing itself is in bench/cli_start.py; here the cause
of a slow start is guarded, in a fresh interpreter for each start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.root import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# The service's stack, the charts and the store's libraries.
HEAVY = ("sqlalchemy", "sqlmodel", "alembic", "fastapi", "starlette", "uvicorn", "plotly", "jinja2")
PROBE = """
import json, sys
from app.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
json.dump({"code": code, "modules": sorted(sys.modules)}, sys.stderr)
"""


def imported(*argv: str) -> tuple[int, set[str]]:
    """The exit code of one start and every module it imported."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=ROOT, check=False
    )
    report = json.loads(done.stderr[done.stderr.index('{"code"') :])
    return int(report["code"] or 0), set(report["modules"])


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in HEAVY}


def test_import_app_cli_pulls_in_nothing_of_the_app() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import json, sys, app.cli; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    modules = set(json.loads(done.stdout))
    assert {m for m in modules if m.startswith("app")} == {"app", "app.cli"}
    assert heavy(modules) == set()
    assert "handoff_context" not in modules


@pytest.mark.parametrize("argv", [["--version"], ["--help"]], ids=" ".join)
def test_version_and_help_import_no_command(argv: list[str]) -> None:
    code, modules = imported(*argv)
    assert code == 0
    assert heavy(modules) == set()
    assert {m for m in modules if m.startswith("app")} == {
        "app",
        "app.cli",
        "app.cli.common",
        "app.cli.root",
        "app.errors",  # UsageError's base: a few lines, no imports of its own
    }
    assert "handoff_context" not in modules and "cryptography" not in modules


def test_verify_imports_no_store() -> None:
    code, modules = imported(
        "verify", "--trust", str(EXAMPLES / "trust.json"), str(EXAMPLES / "capture.jsonl")
    )
    assert code == 0  # the example capture verifies
    assert heavy(modules) == set()
    assert not {m for m in modules if m.startswith(("app.store", "app.web", "app.ingest.pipeline"))}
    assert not {m for m in modules if m.startswith(("joserfc", "cryptography.x509"))}


def test_a_command_imports_its_own_group_only() -> None:
    code, modules = imported("tokens", "--help")
    assert code == 0
    commands = {m for m in modules if m.startswith("app.cli.") and m != "app.cli.common"}
    assert commands == {"app.cli.root", "app.cli.serve"}


def test_the_command_table_says_what_the_modules_say() -> None:
    """``COMMANDS`` lists the commands for ``--help`` without importing them: names, order
    and help must be those of the parsers the modules build."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    listed = [(c.dest, c.help) for c in sub._choices_actions]  # type: ignore[attr-defined]
    assert listed == [(name, entry[1]) for name, entry in COMMANDS.items()]


def test_help_lists_every_command_as_before() -> None:
    lazy = build_parser(None, everything=False).format_help()
    assert lazy == build_parser().format_help()
