"""The example system's handoff code is what its README says (issue 19, "three lines"):
every line of an agent that touches the handoff library is marked ``# handoff``, the README
table gives each process's count, and no process needs more than five."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "examples" / "agents"
AGENTS = ("coder.py", "tool.py", "planner.py", "user.py")
HANDOFF_NAMES = {
    "agent",
    "reporter",
    "Agent",
    "Signer",
    "TrustStore",
    "Reporter",
    "HandoffRequestHandler",
    "HandoffClient",
    "HandoffMcpClient",
    "HandoffMiddleware",
}


def handoff_lines(path: Path) -> set[int]:
    """Lines (outside imports and type annotations) that use a name of the handoff
    library."""
    tree = ast.parse(path.read_text())
    annotations: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            annotations |= {id(n) for n in ast.walk(node.annotation)}
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            annotations |= {id(n) for n in ast.walk(node.returns)}
    return {
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id in HANDOFF_NAMES and id(node) not in annotations
    }


def marked(path: Path) -> set[int]:
    return {
        n for n, line in enumerate(path.read_text().splitlines(), 1) if line.endswith("# handoff")
    }


def readme_counts() -> dict[str, int]:
    text = (HERE / "README.md").read_text()
    return {m[1]: int(m[2]) for m in re.finditer(r"^\| `(\w+\.py)` \| (\d+) \|", text, re.M)}


@pytest.mark.parametrize("name", AGENTS)
def test_every_handoff_line_is_marked_and_counted(name: str) -> None:
    path = HERE / name
    uses, marks = handoff_lines(path), marked(path)
    # A statement or call may span lines: each use sits on a marked line or inside a short
    # statement or call that has one.
    statements = [
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.stmt | ast.Call)
    ]
    for line in uses:
        spans = [(a, b) for a, b in statements if a <= line <= b and (b - a) < 6]
        assert line in marks or any(set(range(a, b + 1)) & marks for a, b in spans), (
            f"{name}:{line} uses the handoff library without a '# handoff' mark"
        )
    assert readme_counts()[name] == len(marks) <= 5
