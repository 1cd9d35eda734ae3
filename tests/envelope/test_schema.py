"""The schema's fast path (``app.envelope.schema.plainly_valid``) never accepts what the
JSON Schema refuses: checked against jsonschema itself on generated envelopes, valid ones
and ones with a member dropped, added or replaced by any JSON value."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.envelope.schema import plainly_valid, schema_errors, validator

from .builders import envelope

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_NUMBER = st.integers(min_value=-3, max_value=2**54) | st.floats(allow_nan=False)
_TEXT = st.text(max_size=3) | st.text(min_size=2000, max_size=2050)
_FACT = st.fixed_dictionaries(
    {"key": _TEXT | _JSON, "value": _JSON, "verified": st.booleans() | _JSON},
    optional={"source": st.none() | _TEXT | _JSON, "extra": _JSON},
)
_MEMBER = {
    "version": _NUMBER | _JSON,
    "epoch": _NUMBER | _JSON,
    "case_id": _TEXT | _JSON,
    "goal": _TEXT | _JSON,
    "summary": _TEXT | _JSON,
    "done": st.lists(_TEXT | _JSON, max_size=3) | _JSON,
    "facts": st.lists(_FACT, max_size=3) | _JSON,
    "constraints": _JSON,
}


def jsonschema_says_valid(value: Any) -> bool:
    return not list(validator().iter_errors(value))


@st.composite
def envelopes(draw: st.DrawFn) -> Any:
    body = envelope()
    for name in draw(st.lists(st.sampled_from(sorted(_MEMBER)), max_size=3, unique=True)):
        body[name] = draw(_MEMBER[name])
    if draw(st.booleans()):
        del body[draw(st.sampled_from(sorted(body)))]
    if draw(st.booleans()):
        body[draw(st.text(max_size=4))] = draw(_JSON)
    return body


@settings(max_examples=400, deadline=None)
@given(envelopes())
def test_the_fast_path_accepts_only_what_the_schema_accepts(body: Any) -> None:
    if plainly_valid(body):
        assert jsonschema_says_valid(body)
    assert (schema_errors(body) == ()) == jsonschema_says_valid(body)


def test_the_fast_path_takes_a_plain_envelope_and_the_float_numbers_of_a2a_1_0() -> None:
    body = envelope()
    assert plainly_valid(body)
    assert plainly_valid({**body, "version": 2.0, "epoch": 3.0})
    assert not plainly_valid({**body, "epoch": 3.5})
    assert not plainly_valid({**body, "version": True})
    assert schema_errors({**body, "epoch": 3.5}) == ("epoch: 3.5 is not of type 'integer'",)
