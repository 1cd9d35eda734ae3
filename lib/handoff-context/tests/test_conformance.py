"""The conformance kit's own command with this library as the implementation, and its
comparison of verdicts with expectations."""

from __future__ import annotations

import pytest
from handoff_context import conformance
from handoff_context.vectors import DIRECTORY, stored_vectors


def test_the_library_passes_every_published_vector(capsys: pytest.CaptureFixture[str]) -> None:
    assert conformance.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    count = len(stored_vectors())
    assert out[-1] == f"{count} vectors: {count} passed, 0 failed"
    assert sum(line.startswith("pass ") for line in out) == count


def test_a_wrong_answer_is_a_failure_naming_what_differs() -> None:
    doc = conformance.load_vector(DIRECTORY / "invalid" / "alg-none.json")
    good = conformance.library_verdicts(doc)
    assert isinstance(good, list)
    flipped = [{**good[0], "outcome": "accept", "reason": None}]
    problems = conformance.check_vector(doc, run=lambda d, p: flipped)
    assert problems and "outcome 'accept', expected 'reject'" in problems[0]
    refused = conformance.check_vector(doc, run=lambda d, p: conformance.Refused("exit 2"))
    assert refused == ["alg-none: no verdicts: exit 2"]


def test_a_trust_vector_passes_on_any_refusal_only_when_wording_is_not_exact() -> None:
    path = next(p for p in stored_vectors() if "expect_trust_error" in p.read_text())
    doc = conformance.load_vector(path)
    refuse = conformance.Refused("exit 2: no")
    assert conformance.check_vector(doc, run=lambda d, p: refuse, exact_refusal=False) == []
    assert conformance.check_vector(doc, run=lambda d, p: refuse) != []
    accepted = conformance.check_vector(doc, run=lambda d, p: [], exact_refusal=False)
    assert accepted and "accepted" in accepted[0]


def test_unknown_vector_names_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert conformance.main(["--only", "no-such-vector"]) == 2
    assert "no vectors selected" in capsys.readouterr().err
