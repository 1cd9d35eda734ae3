"""The answers' verdict lines (``app.web.answers.verdict_line``) are written by ``orjson``
and must stay byte for byte what ``json.dumps`` wrote before: the JSON answer of
``/ingest`` and ``/verify`` and their NDJSON lines are compared by clients and by the
benchmark's answer digests (``bench/http_instructions.py --answers``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from handoff_context import (
    ChainElementReport,
    ChainReport,
    CheckResult,
    Outcome,
    Reason,
    Result,
    Verdict,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.web.answers import Lines, Listing, verdict_line

_text = st.text(alphabet=st.characters(codec=None), max_size=12)  # lone surrogates too
_maybe = st.none() | _text


def _reference(shown: dict[str, Any]) -> bytes:
    """What the answers wrote for a verdict before ``orjson``."""
    return json.dumps(shown, separators=(",", ":"), ensure_ascii=False).encode()


def _outcome(reference: Any, value: dict[str, Any]) -> tuple[str, Any]:
    """The bytes, or the type of the error raised (a lone surrogate cannot be UTF-8)."""
    try:
        return "bytes", reference(value)
    except Exception as exc:  # the type of the error is what is compared
        return "raised", type(exc)


@st.composite
def verdicts(draw: st.DrawFn) -> Verdict:
    element = draw(st.sampled_from(["offer", "status", None]))
    check = CheckResult(draw(_text), draw(st.sampled_from(list(Result))), None, draw(_maybe))
    chain = ChainReport(
        carried=draw(st.booleans()),
        length=draw(st.integers(0, 2**70)),  # beyond 64 bits: orjson refuses, json decides
        partial=False,
        elements=[
            ChainElementReport(
                draw(st.integers(-(2**63), 2**63 - 1)),
                draw(st.none() | st.binary(min_size=32, max_size=32)),
                draw(_maybe),
                draw(_maybe),
                Result.PASS,
                None,
                draw(_maybe),
            )
        ],
    )
    return Verdict(
        source=draw(_text),
        element=element,
        digest=draw(st.none() | st.binary(min_size=32, max_size=32)),
        iss=draw(_maybe),
        aud=draw(_maybe),
        hop=draw(_maybe),
        outcome=draw(st.sampled_from(list(Outcome))),
        reason=draw(st.none() | st.sampled_from(list(Reason))),
        detail=draw(_maybe),
        checks=[check],
        chain=draw(st.none() | st.just(chain)),
        offer=draw(st.none() | st.binary(min_size=32, max_size=32)),
    )


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(verdicts(), st.none() | st.integers(1, 2**40))
def test_a_verdict_line_is_json_dumps_text(verdict: Verdict, item: int | None) -> None:
    shown = verdict.to_json()
    if item is not None:
        shown["item"] = item
    assert _outcome(verdict_line, shown) == _outcome(_reference, shown)


def test_the_text_orjson_and_json_dumps_could_part_on() -> None:
    verdict = Verdict(
        source='capture:1 \x00\x1f\x7f"\\/ é\u2028\u2029 \U0001f600',
        element="offer",
        iss="agent://planner",
        outcome=Outcome.REJECT,
        reason=Reason.BAD_SIGNATURE,
        detail="\t\n\r\b\f",
    )
    shown = verdict.to_json()
    assert verdict_line(shown) == _reference(shown)
    # A lone surrogate: refused by orjson, and by the UTF-8 encoding as it always was.
    shown["detail"] = "\ud800"
    with pytest.raises(UnicodeEncodeError):
        verdict_line(shown)


def test_listed_and_streamed_verdicts_are_their_lines() -> None:
    verdict = Verdict(source="capture:1", element="status", outcome=Outcome.ACCEPT)
    listing = Listing(numbered=True)
    listing.add(verdict)
    assert (
        listing.body({})
        == b'{"verdicts":['
        + _reference({**verdict.to_json(), "item": 1})
        + b'],"verdicts_omitted":0}'
    )
    lines = Lines()
    lines.verdict(verdict)
    lines.end({})
    assert lines.next_chunk() == _reference(verdict.to_json()) + b"\n{}\n"
