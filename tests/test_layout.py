"""The house, checked from the source (issue 11): only app/store speaks SQL, only the edge
reads the settings and the environment.

Everything here reads app/ with ``ast``; nothing is imported, so a rule holds for code no
test happens to run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"

# SQL statements are built from these (sqlalchemy, sqlmodel) and run by these methods.
SQL_CONSTRUCTS = {"select", "text", "func", "insert", "update", "delete", "bindparam", "and_"}
SQL_METHODS = {"execute", "exec", "exec_driver_sql", "scalars", "scalar"}
# Still speaking SQL outside app/store: the ingest modules, which the pipeline merge of
# issue 11 moves into app/store. The test below fails once one of them stops, so the list
# can only shrink.
SQL_OUTSIDE_STORE = {"app.ingest.pipeline", "app.ingest.rederive"}
# The edge: where the settings are read and the environment is looked at.
EDGE = {"app.settings", "app.web.app"}
EDGE_PACKAGES = ("app.cli",)


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(APP.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _imports_sql(node: ast.ImportFrom) -> bool:
    library = (node.module or "").split(".")[0] in ("sqlalchemy", "sqlmodel")
    return library and any(alias.name in SQL_CONSTRUCTS for alias in node.names)


def speaks_sql(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _imports_sql(node):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in SQL_METHODS
        ):
            return True
    return False


def reads_environment(tree: ast.Module) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "from_env"):
            found.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [f"line {node.lineno}: from os import {a.name}" for a in node.names]
    return found


def test_only_the_store_speaks_sql() -> None:
    speaking = {name for name, tree in modules() if speaks_sql(tree)}
    assert {n for n in speaking if n.startswith("app.store")}, "the check finds nothing at all"
    outside = {n for n in speaking if not n.startswith("app.store.") and n != "app.store"}
    assert outside == SQL_OUTSIDE_STORE


def test_nothing_below_the_edge_reads_the_environment_or_the_settings() -> None:
    for name, tree in modules():
        if name in EDGE or name.startswith(EDGE_PACKAGES):
            continue
        assert reads_environment(tree) == [], name
    for name, tree in modules():
        if name.startswith("app.store"):
            imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
            assert "app.settings" not in imported, name


def test_the_checks_see_what_they_look_for() -> None:
    sql = ast.parse("from sqlalchemy import select\n")
    env = ast.parse("import os\nx = os.environ.get('A')\ns = Settings.from_env()\n")
    assert speaks_sql(sql) and not speaks_sql(ast.parse("from sqlalchemy import Engine\n"))
    assert len(reads_environment(env)) == 2
