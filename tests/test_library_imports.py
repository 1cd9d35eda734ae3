"""The service uses the library through its public API: an import from one of the library's
private modules (``handoff_context._x``) is allowed only for names the public namespace does
not offer, so a rule is never reached around the documented surface by accident."""

from __future__ import annotations

import ast
from pathlib import Path

import handoff_context

APP = Path(__file__).resolve().parents[1] / "app"
PUBLIC = set(handoff_context.__all__)


def private_imports_of_public_names() -> list[str]:
    found = []
    for path in sorted(APP.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            if node.module.startswith("handoff_context._"):
                found += [
                    f"{path.relative_to(APP.parent)}:{node.lineno}: {a.name}"
                    for a in node.names
                    if a.name in PUBLIC
                ]
    return found


def test_the_service_imports_public_names_from_the_package() -> None:
    assert private_imports_of_public_names() == []
