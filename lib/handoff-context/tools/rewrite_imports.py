#!/usr/bin/env python3
"""Rewrite imports of handoff_context's former public modules to the public API.

    python lib/handoff-context/tools/rewrite_imports.py app tests bench fuzz lib examples

The library's modules became private (``handoff_context.verify`` is now
``handoff_context._verify``) behind one public namespace (``handoff_context.__all__``). For
every ``from handoff_context.X import a, b`` outside the library, the names that are public
are imported from ``handoff_context`` and the rest from the private module; inside the
library every import names the private module (importing the package from its own modules
would be circular). ``import handoff_context.X as m`` and ``from handoff_context import X``
(a module) name the private module. Any other dotted mention (docstrings, comments,
monkeypatch targets) is rewritten with a word-boundary regex. Run ``ruff check --fix`` and
``ruff format`` afterwards: rewritten statements are written on one line, unsorted.

Kept in the repository so that a branch written against the old module names can be brought
up to date by running it again.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

RENAMED = [
    "chain",
    "cose",
    "encoding",
    "handoff",
    "jws",
    "lifecycle",
    "memory",
    "model",
    "refs",
    "sign",
    "signature",
    "trust",
    "verdict",
    "verify",
]
LIBRARY = Path(__file__).resolve().parents[1] / "src" / "handoff_context"
PUBLIC: set[str] = set()  # handoff_context.__all__, read once the library itself is rewritten
DOTTED = re.compile(r"\bhandoff_context\.(" + "|".join(RENAMED) + r")\b")


def _names(node: ast.ImportFrom) -> list[str]:
    return [a.name if a.asname is None else f"{a.name} as {a.asname}" for a in node.names]


def _rewrite_from(node: ast.ImportFrom, inside: bool) -> list[str] | None:
    """The statements replacing ``node``, or None to keep it."""
    module = node.module or ""
    if module == "handoff_context":
        modules = [a for a in node.names if a.name in RENAMED]
        if not modules:
            return None
        rest = [a for a in node.names if a.name not in RENAMED]
        out = [f"from handoff_context import _{a.name} as {a.asname or a.name}" for a in modules]
        if rest:
            out.append("from handoff_context import " + ", ".join(_names_of(rest)))
        return out
    parts = module.split(".")
    if len(parts) != 2 or parts[0] != "handoff_context" or parts[1].lstrip("_") not in RENAMED:
        return None
    private = f"handoff_context._{parts[1].lstrip('_')}"
    if inside:
        if parts[1].startswith("_"):
            return None
        return [f"from {private} import " + ", ".join(_names(node))]
    if parts[1].startswith("_") and not any(a.name in PUBLIC for a in node.names):
        return None
    public = [a for a in node.names if a.name in PUBLIC]
    hidden = [a for a in node.names if a.name not in PUBLIC]
    out = []
    if public:
        out.append("from handoff_context import " + ", ".join(_names_of(public)))
    if hidden:
        out.append(f"from {private} import " + ", ".join(_names_of(hidden)))
    return out


def _names_of(aliases: list[ast.alias]) -> list[str]:
    return [a.name if a.asname is None else f"{a.name} as {a.asname}" for a in aliases]


def _rewrite_import(node: ast.Import) -> list[str] | None:
    if not any(DOTTED.fullmatch(a.name) for a in node.names):
        return None
    return [
        "import "
        + DOTTED.sub(lambda m: f"handoff_context._{m.group(1)}", a.name)
        + ("" if a.asname is None else f" as {a.asname}")
        for a in node.names
    ]


def rewrite(path: Path) -> bool:
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    inside = LIBRARY in path.resolve().parents
    edits: list[tuple[int, int, list[str]]] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            new = _rewrite_from(node, inside)
        elif isinstance(node, ast.Import):
            new = _rewrite_import(node)
        else:
            continue
        if new is not None:
            edits.append((node.lineno - 1, node.end_lineno or node.lineno, new))
    for start, end, new in sorted(edits, reverse=True):
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
        comment = next((ln[ln.index("#") :].strip() for ln in lines[start:end] if "#" in ln), "")
        block = [indent + stmt + "\n" for stmt in new]
        if comment:
            block[0] = block[0].rstrip("\n") + "  " + comment + "\n"
        lines[start:end] = block
    out = DOTTED.sub(lambda m: f"handoff_context._{m.group(1)}", "".join(lines))
    if out != text:
        path.write_text(out)
        return True
    return False


def main(argv: list[str]) -> int:
    # The library first: its package cannot be imported (for __all__) before its own
    # modules name each other by their new names.
    changed = sum(rewrite(path) for path in sorted(LIBRARY.rglob("*.py")))
    sys.path.insert(0, str(LIBRARY.parent))
    import handoff_context

    PUBLIC.update(handoff_context.__all__)
    for root in argv:
        for path in sorted(Path(root).rglob("*.py")):
            skip = ".venv" in path.parts or LIBRARY in path.resolve().parents
            if skip or path.resolve() == Path(__file__).resolve():
                continue
            changed += rewrite(path)
    print(f"{changed} files rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
