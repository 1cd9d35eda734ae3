"""The repository stands alone: nothing in it points outside it, and every citation of the
profile names a section that docs/profile.md has.

A fresh clone with nothing beside it must pass its own tests, so no file may name a path
outside the checkout (the folder the project once kept beside it, or an absolute path into a
machine's work tree). The profile is cited as ``profile §N`` (docs/profile.md, "How to read
and cite this document"); the section sign is kept for that document alone, so every ``§N``
anywhere is a citation of it and must exist there. The old form ``SPEC N`` is gone.

Vendored data (tests/vectors/public, apart from its README, and the raw fuzz inputs) is
copied or captured byte for byte and is not ours to edit, so it is not read.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "docs" / "profile.md"

# Built from pieces so that this file does not name them itself.
OUTSIDE = re.compile(r"\.\./" + "shared" + r"\b|/" + "work" + r"/")
# A section sign and its number; generated JSON escapes the sign as \u00a7.
SECTION = re.compile(r"(?:§|\\u00a7)\s?(\d+(?:\.\d+)*)")
OLD_CITATION = re.compile(r"(?<![\w-])" + "SPEC" + r"(?:\.md\b| §?\d)")
HEADING = re.compile(r"^#{2,4} (\d+(?:\.\d+)*)[. ]", re.MULTILINE)
# Directories that are never part of the repository's content, for a tree without git.
_NOT_CONTENT = {
    ".git",
    ".venv",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "var",
    "test-artifacts",
    "build",
    "dist",
    "node_modules",
}


def _vendored(rel: str) -> bool:
    parts = f"/{rel}"
    if "/vectors/public/" in parts:
        return not rel.endswith("/README.md")
    return "/vectors/fuzz/" in parts and not rel.endswith(".json")


def _listed() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z"], check=True, capture_output=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        # Not a git checkout (an unpacked archive): every file that is not tool output.
        return [
            p.relative_to(ROOT).as_posix()
            for p in ROOT.rglob("*")
            if p.is_file()
            and not _NOT_CONTENT & set(p.relative_to(ROOT).parts)
            and not any(part.endswith(".egg-info") for part in p.parts)
        ]
    return [p for p in out.decode().split("\0") if p]


@cache
def texts() -> dict[str, str]:
    """Every text file of the repository that is ours, by path relative to the root."""
    found: dict[str, str] = {}
    for rel in _listed():
        path = ROOT / rel
        if _vendored(rel) or not path.is_file():
            continue
        try:
            found[rel] = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            continue  # binary (a database, an image): cites nothing
    return found


def _hits(pattern: re.Pattern[str]) -> list[str]:
    return [
        f"{rel}:{n}: {line.strip()[:120]}"
        for rel, text in sorted(texts().items())
        for n, line in enumerate(text.splitlines(), 1)
        if pattern.search(line)
    ]


def profile_sections() -> set[str]:
    return set(HEADING.findall(PROFILE.read_text(encoding="utf-8")))


def test_the_repository_has_files_to_check() -> None:
    # Guards the tests below against passing on an empty listing.
    assert "README.md" in texts() and "docs/profile.md" in texts()
    assert len(texts()) > 100


def test_no_file_names_a_path_outside_the_repository() -> None:
    offenders = _hits(OUTSIDE)
    assert not offenders, "paths outside the repository:\n" + "\n".join(offenders)


def test_the_profile_is_cited_in_the_house_form() -> None:
    offenders = _hits(OLD_CITATION)
    assert not offenders, "cite docs/profile.md as 'profile §N', not the old form:\n" + "\n".join(
        offenders
    )


def test_profile_has_the_sections_the_code_was_written_against() -> None:
    # The code cited the profile by these numbers before it moved into docs/profile.md.
    expected = {"1", "1.1", "1.2", "1.3", "1.4", *map(str, range(2, 13))}
    expected |= {f"6.{n}" for n in range(1, 9)}
    assert expected <= profile_sections()


def test_every_section_citation_exists_in_the_profile() -> None:
    sections = profile_sections()
    missing = [
        f"{rel}:{n}: §{number}"
        for rel, text in sorted(texts().items())
        for n, line in enumerate(text.splitlines(), 1)
        for number in SECTION.findall(line)
        if number not in sections
    ]
    assert not missing, "cited sections that docs/profile.md does not have:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("line", "numbers"),
    [
        ("see profile §6.4 and profile §6, §7, §5", ["6.4", "6", "7", "5"]),
        ('"rule": "profile \\u00a72"', ["2"]),
        ("profile §1-§3.", ["1", "3"]),
    ],
)
def test_section_pattern_reads_the_house_form(line: str, numbers: list[str]) -> None:
    assert SECTION.findall(line) == numbers
