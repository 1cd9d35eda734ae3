"""``strict_json_loads`` reads with orjson where it can vouch for the answer
(``_encoding._fast_loads``) and with the standard library's strict scanner otherwise
(``_strict_loads``): every input must give the same value, of the same types in the same
order, or the same error with the same detail, whichever way it went. These tests compare
the two on JSON text written every way, with the cases the fast path must hand over
(duplicate members, integers beyond 64 bits, deep nesting, escapes of ``:``), on mutated
text and on random octets; and they check that the fast path is taken at all."""

from __future__ import annotations

import json
from typing import Any

import orjson
from handoff_context import _encoding
from handoff_context._encoding import MAX_DEPTH, strict_json_loads
from handoff_context.errors import MalformedError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from strategies import JSON_VALUES, mutated

PROPERTY = settings(
    deadline=None, derandomize=True, max_examples=400, suppress_health_check=[HealthCheck.too_slow]
)


def outcome(parse: Any, data: bytes) -> tuple[str, str]:
    """What a parse gave: the value's repr (which tells 1 from 1.0 and True, -0.0 from 0.0,
    and shows the members' order) or the error's detail."""
    try:
        return "value", repr(parse(data, what="line 7"))
    except MalformedError as exc:
        return "error", exc.detail


def same_both_ways(data: bytes) -> None:
    assert outcome(strict_json_loads, data) == outcome(_encoding._strict_loads, data)


def test_orjson_is_there() -> None:
    # The service installs it, and so does the library's ``test`` extra: without it these
    # tests would compare the strict path with itself.
    assert _encoding.orjson is orjson


NUMBERS = st.from_regex(r"\A-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?\Z")
# Text that looks like JSON's pieces, so that random joins of them are often JSON.
TOKENS = st.sampled_from(
    [
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        " ",
        "\n",
        '"a"',
        '"b"',
        '"a:b"',
        '"\\u003a"',
        '"\\u003A"',
        '"\\\\u003a"',
        '"\\""',
        '"\\ud800"',
        '"\\ud83d\\ude00"',
        "true",
        "null",
        "NaN",
        "Infinity",
        "-Infinity",
        "1e400",
        "-0",
        "-0.0",
        "18446744073709551616",
        "-9223372036854775809",
        "12345678901234567890123",
        '"\\/"',
        "\t",
        "\r",
        '"é"',
    ]
)


@PROPERTY
@given(JSON_VALUES, st.booleans(), st.sampled_from([None, 0, 2]), st.booleans())
def test_json_written_any_way(value: Any, ascii: bool, indent: int | None, compact: bool) -> None:
    separators = (",", ":") if compact else None
    text = json.dumps(value, ensure_ascii=ascii, indent=indent, separators=separators)
    same_both_ways(text.encode("utf-8", errors="surrogatepass"))


@PROPERTY
@given(NUMBERS, st.sampled_from(["{}", "[{}]", '{{"n":{}}}', "[1, {}, 2]"]))
@example("18446744073709551616", "{}")
@example("9223372036854775808", "[{}]")
@example("-9223372036854775809", "{}")
@example("1" * 400, "{}")
@example("1" * 5000, "{}")
@example("1e400", "{}")
@example("-1.5e-400", "{}")
@example("2.2250738585072011e-308", "{}")
def test_numbers(number: str, around: str) -> None:
    same_both_ways(around.format(number).encode())


@PROPERTY
@given(st.lists(TOKENS, max_size=30))
@example(["{", '"a"', ":", "1", ",", '"a"', ":", "2", "}"])
@example(["{", '"a"', ":", '"\\u003a"', ",", '"a"', ":", "2", "}"])
@example(["{", '"a"', ":", "1", ",", '"a"', ":", '"\\u003a"', "}"])
@example(["{", '"a:b"', ":", "1", ",", '"a:b"', ":", '"a:b"', "}"])
def test_token_soup(tokens: list[str]) -> None:
    same_both_ways("".join(tokens).encode("utf-8", errors="surrogatepass"))


@PROPERTY
@given(
    st.dictionaries(st.text(max_size=4), JSON_VALUES, min_size=1, max_size=5),
    st.data(),
)
def test_duplicate_members(members: dict[str, Any], data: st.DataObject) -> None:
    # One member written again, anywhere in the object, with any value (the same one too).
    items = [json.dumps(k) + ":" + json.dumps(v) for k, v in members.items()]
    key = data.draw(st.sampled_from(sorted(members)))
    # A value may spell ``:`` as ``\u003a``, in as many places as the other took ``:``.
    escaped = st.integers(1, 4).map(lambda n: '"' + "\\u003a" * n + '"')
    again = (
        json.dumps(key)
        + ":"
        + data.draw(JSON_VALUES.map(json.dumps) | st.just(json.dumps(members[key])) | escaped)
    )
    items.insert(data.draw(st.integers(0, len(items))), again)
    text = "{" + ",".join(items) + "}"
    if data.draw(st.booleans()):
        text = '{"outer": [1, ' + text + "]}"
    same_both_ways(text.encode("utf-8", errors="surrogatepass"))
    assert outcome(strict_json_loads, text.encode("utf-8", errors="surrogatepass"))[0] == "error"


@PROPERTY
@given(st.integers(MAX_DEPTH - 2, MAX_DEPTH + 3), st.sampled_from(["[", '{"a":']))
def test_nesting(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    same_both_ways((opener * depth + "1" + closer * depth).encode())


@PROPERTY
@given(JSON_VALUES)
def test_canonical_text(value: Any) -> None:
    # Text that orjson writes back octet for octet skips the duplicate and integer checks
    # (``_plain``): it is still read the same both ways, by orjson unless it nests too deep.
    try:
        data = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return  # an integer beyond 64 bits: orjson writes no text for it
    same_both_ways(data)
    deep = data.count(b"{") + data.count(b"[") > MAX_DEPTH
    assert (_encoding._fast_loads(data) is _encoding._NOT_FAST) == deep


@example('{"a":1,"a":[1E2,1E2,1E2]}')  # written back as {"a":[100.0,100.0,100.0]}
@example('{"a":1,"a":[1E2,1E2,1E2] }')
@example("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
@given(st.just("{}"))
def test_canonical_is_octet_for_octet(text: str) -> None:
    # A duplicate whose text orjson writes back no shorter than it came, and brackets
    # deeper than allowed in canonical text: refused both ways, with the strict path's
    # detail.
    same_both_ways(text.encode())


@PROPERTY
@given(JSON_VALUES.map(lambda v: json.dumps(v).encode()).flatmap(mutated))
def test_mutated(data: bytes) -> None:
    same_both_ways(data)


@PROPERTY
@given(st.binary(max_size=200))
@example(b"\xef\xbb\xbf{}")
@example(b'"\xed\xa0\x80"')
@example(b'"\xc0\x80"')
@example(b"\xff")
def test_random_octets(data: bytes) -> None:
    same_both_ways(data)


def test_the_fast_path_is_taken() -> None:
    # A capture record as the simulator writes it: read by orjson, not handed over.
    record = {
        "received_at": 1767225600.25,
        "received_by": "did:web:b.example",
        "payload": {"jsonrpc": "2.0", "id": 3, "result": {"urls": ["https://a.example:8443/"]}},
    }
    data = json.dumps(record).encode()
    assert _encoding._fast_loads(data) == record
    assert _encoding._fast_loads(b'{"a":1,"a":2}') is _encoding._NOT_FAST
