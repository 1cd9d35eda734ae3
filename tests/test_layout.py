"""The house, checked from the source (issue 11): app/'s top level holds packages and a
handful of modules, there is no import cycle, only app/store speaks SQL, and only the edge
reads the settings and the environment.

Everything here reads app/ with ``ast``; nothing is imported, so a rule holds for code no
test happens to run.

The import graph: an edge for every ``import`` and ``from ... import`` of an app module that
runs, at module level or inside a function; imports under ``if TYPE_CHECKING:`` never run
and are no edges. ``from package import module`` is an edge to the module, not to the
package's ``__init__``. Function-level imports count because a cycle through a lazy import
is still a cycle in the design (the old CLI cycle ran through such imports); module-level
and all-import cycles are checked separately so a failure says which it is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app"
# app/'s top level: packages, and these modules only.
TOP_MODULES = {"__init__.py", "errors.py", "settings.py"}

# SQL statements are built from these (sqlalchemy, sqlmodel) and run by these methods.
SQL_CONSTRUCTS = {"select", "text", "func", "insert", "update", "delete", "bindparam", "and_"}
SQL_METHODS = {"execute", "exec", "exec_driver_sql", "scalars", "scalar"}
# Modules outside app/store allowed to speak SQL: none.
SQL_OUTSIDE_STORE: set[str] = set()
# The edge: where the settings are read and the environment is looked at.
EDGE = {"app.settings", "app.web.app"}
EDGE_PACKAGES = ("app.cli",)


def modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(APP.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


# --- the top level and the packages --------------------------------------------------------


def test_the_top_level_holds_packages_and_a_handful_of_modules() -> None:
    entries = [p for p in APP.iterdir() if p.name != "__pycache__"]
    modules_here = {p.name for p in entries if p.is_file()}
    assert modules_here == TOP_MODULES
    packages = [p for p in entries if p.is_dir()]
    assert len(packages) >= 7
    for package in packages:
        # A regular package: setuptools' find (pyproject.toml) ships no namespace package.
        assert (package / "__init__.py").is_file(), package.name


# --- no import cycle ----------------------------------------------------------------------


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported(tree: ast.Module, known: set[str], *, in_functions: bool) -> set[str]:
    """The app modules ``tree`` imports (see the module docstring for what counts)."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _type_checking(node):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & known
                found.update(subs)
                if len(subs) < len(node.names):
                    found.add(node.module)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not in_functions:
                continue
            for child in ("body", "orelse", "finalbody"):
                visit(getattr(node, child, []))
            for handler in getattr(node, "handlers", []):
                visit(handler.body)
            for case in getattr(node, "cases", []):
                visit(case.body)

    visit(tree.body)
    return found & known


def import_graph(*, in_functions: bool) -> dict[str, set[str]]:
    trees = dict(modules())
    known = set(trees)
    return {
        name: imported(tree, known, in_functions=in_functions) - {name}
        for name, tree in trees.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle's modules (the strongly connected components of more than one module, or
    one that imports itself), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_import_cycle_among_module_level_imports() -> None:
    graph = import_graph(in_functions=False)
    assert "app.store.db" in graph["app.cli.store"]  # the graph sees imports at all
    assert cycles(graph) == []


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    graph = import_graph(in_functions=True)
    assert "app.cli.verify" in graph["app.cli.root"]  # root imports its groups lazily
    assert cycles(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"], ["e"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import x.y\n"
        "from x import z\n"
        "def f():\n    import x.w\n"
    )
    known = {"x", "x.y", "x.z", "x.w"}
    assert imported(tree, known, in_functions=False) == {"x.z"}
    assert imported(tree, known, in_functions=True) == {"x.z", "x.w"}


# --- the command line ------------------------------------------------------------------


def test_the_cli_shares_helpers_through_common_only() -> None:
    graph = import_graph(in_functions=True)
    cli = {name for name in graph if name.startswith("app.cli.")}
    # Shared helpers live in common, which needs no command module.
    assert graph["app.cli.common"] & cli == set()
    for name in cli - {"app.cli.root", "app.cli.common"}:
        others = graph[name] & cli - {"app.cli.common"}
        # run-demo ends by serving exactly as ``serve`` does, through its public command;
        # ``tap --enforce`` puts its enforcing layer (app.cli.enforce, no command of its own)
        # in front of the forwarding app, and ``--egress-listen`` its egress proxy
        # (app.cli.egress), which reads answers with the enforcing layer's reader.
        allowed = {
            "app.cli.run": {"app.cli.serve"},
            "app.cli.tap": {"app.cli.enforce", "app.cli.egress"},
            "app.cli.egress": {"app.cli.enforce"},
        }
        assert others <= allowed.get(name, set()), name


# Private names imported across modules: none. (The last, the envelope extractor reading the
# carriers' A2A task-state table and field reader, went with the carrier helpers' move into
# the protocol library: handoff_context.carry.TASK_STATES_0_3 and a2a_member are public.)
PRIVATE_IMPORTS: set[tuple[str, str]] = set()


def _imports_private(node: ast.ImportFrom) -> bool:
    def private(alias: ast.alias) -> bool:
        return alias.name.startswith("_") and not alias.name.endswith("__")  # not __version__

    return (node.module or "").split(".")[0] == "app" and any(map(private, node.names))


def test_no_module_imports_another_modules_private_names() -> None:
    found = set()
    for name, tree in modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _imports_private(node):
                found.add((name, node.module))
    assert found == PRIVATE_IMPORTS


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


# --- the README's layout section matches the tree --------------------------------------


def layout_entries() -> list[str]:
    """The paths the README's "Layout" section names, one per unindented line of its block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    return [line.split()[0] for line in block.splitlines()[1:] if line and not line[0].isspace()]


def test_every_path_the_layout_names_exists() -> None:
    entries = layout_entries()
    assert "lib/handoff-context/" in entries and "tests/" in entries
    missing = [entry for entry in entries if not (ROOT / entry).exists()]
    assert missing == []
    assert [e for e in entries if e.endswith("/") and not (ROOT / e).is_dir()] == []


def test_the_layout_names_every_package_and_module_of_app() -> None:
    named = set(layout_entries())
    here = {
        f"app/{p.name}/" if p.is_dir() else f"app/{p.name}"
        for p in APP.iterdir()
        if p.name not in ("__pycache__", "__init__.py")
    }
    assert here - named == set()


def test_the_edges_are_imported_by_nothing_below_them() -> None:
    graph = import_graph(in_functions=True)
    below = ("app.capture", "app.ingest", "app.envelope", "app.store", "app.demo")
    for name, targets in graph.items():
        if not name.startswith("app.cli"):
            # app/demo/load.py once raised the CLI's UsageError: the CLI sits on top.
            assert {t for t in targets if t.startswith("app.cli")} == set(), name
        if name.startswith(below) or name in ("app.settings", "app.errors"):
            assert {t for t in targets if t.startswith("app.web")} == set(), name


# --- judgement in one place (issue 20, item 3; docs/architecture.md) ------------------------

# What decodes or verifies elements: the library's parsers and verifier, and the private
# decoders behind them. None of it is for app/store, which holds SQL and nothing else.
DECODING = {
    "Verifier",
    "Session",  # handoff_context.Session: a verifier over a run of elements
    "parse_element",
    "parse_object",
    "decode_sign1",
    "try_read_payload",
    "strict_json_loads",
}
# The library's hop and flag rules (profile §8): the store reads the facts they take and
# writes what they derive; app.ingest.derive applies them.
RULES = {"derive_hop", "canonical_order", "equivocation_flag", "rejection_flags"}
BELOW_THE_STORE = ("app.capture", "app.envelope", "app.ingest")
PIPELINE_LINES = 400


def library_imports(tree: ast.Module) -> set[str]:
    """The names a module takes from the protocol library (any of its modules), and the
    library modules it imports whole."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("handoff_context"):
            found.update(alias.name for alias in node.names)
            found.add(node.module or "")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("handoff_context"))
    return found


def app_imports(tree: ast.Module) -> set[str]:
    """Every app module a module imports, at any level, under TYPE_CHECKING too."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("app"):
            found.add(node.module or "")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("app"))
    return found


def test_the_store_neither_verifies_nor_decodes_elements() -> None:
    store = {name: tree for name, tree in modules() if name.startswith("app.store")}
    assert len(store) > 10
    for name, tree in store.items():
        taken = library_imports(tree)
        assert taken & DECODING == set(), name
        assert taken & RULES == set(), name
        # Nor the private modules that decode (the COSE and payload readers).
        assert {m for m in taken if m.startswith("handoff_context._")} == set(), name


def test_the_rules_are_applied_in_ingest() -> None:
    trees = dict(modules())
    assert library_imports(trees["app.ingest.derive"]) >= RULES
    assert "app.store.derive" in app_imports(trees["app.ingest.derive"])


def test_the_store_imports_neither_capture_nor_envelope_nor_ingest() -> None:
    for name, tree in modules():
        if not name.startswith("app.store"):
            continue
        below = {m for m in app_imports(tree) if m.startswith(BELOW_THE_STORE)}
        assert below == set(), name


def test_the_settings_import_nothing_from_ingest_or_the_store() -> None:
    [tree] = [tree for name, tree in modules() if name == "app.settings"]
    imported = app_imports(tree)
    assert "app.errors" in imported  # the check sees imports at all
    assert {m for m in imported if m.startswith(("app.ingest", "app.store"))} == set()


def test_one_module_judges_and_the_pipeline_only_runs_transactions() -> None:
    pipeline = APP / "ingest" / "pipeline.py"
    assert len(pipeline.read_text(encoding="utf-8").splitlines()) < PIPELINE_LINES
    trees = dict(modules())
    # The verifier is built and called in the judge (and its memories), nowhere else on
    # the ingest path: the pipeline neither builds one nor parses an element.
    assert library_imports(trees["app.ingest.pipeline"]) & DECODING == set()
    judge = library_imports(trees["app.ingest.judge"])
    assert {"Verifier", "parse_element", "parse_object"} <= judge
    assert "app.ingest.judge" in app_imports(trees["app.ingest.pipeline"])


def test_one_factory_builds_the_pipeline() -> None:
    """Only app.ingest.build constructs a ``Pipeline``: every entry point asks it."""
    builders = set()
    for name, tree in modules():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "Pipeline"
            ):
                builders.add(name)
    assert builders == {"app.ingest.build"}


def test_the_judgement_checks_see_what_they_look_for() -> None:
    tree = ast.parse(
        "from handoff_context import Verifier, Form\n"
        "from handoff_context._cose import decode_sign1\n"
        "from app.capture.carriers import Carried\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from app.ingest.judge import Judge\n"
    )
    assert {"Verifier", "decode_sign1"} <= library_imports(tree) & DECODING
    rules = ast.parse("from handoff_context import derive_hop, Timing\n")
    assert library_imports(rules) & RULES == {"derive_hop"}
    assert app_imports(tree) == {"app.capture.carriers", "app.ingest.judge"}
