"""The library README's example runs as written, with the real a2a-sdk: the receiver's check
accepts the offer and the sender's check accepts the signed ``accepted``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from handoff_context import Outcome

README = Path(__file__).resolve().parents[1] / "lib" / "handoff-context" / "README.md"


def example() -> str:
    text = README.read_text()
    section = text[text.index("## Example") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README's example is a python code block"
    return match.group(1)


def test_the_example_signs_carries_checks_and_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    code = example()
    assert "from a2a.types" in code  # built with the real SDK, not by hand
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(code, str(README), "exec"), namespace)
    verdict, check = namespace["verdict"], namespace["check"]
    assert getattr(verdict, "outcome", None) is Outcome.ACCEPT
    assert getattr(check, "outcome", None) is Outcome.ACCEPT
    assert getattr(check, "element", None) == "status"
    assert capsys.readouterr().out == "accept status\n"
