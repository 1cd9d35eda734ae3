"""Reading a capture from a binary file (``read_capture`` over a stream) gives what reading its
octets gives, holding one item at a time: both go through the one reader of each format
(app/capture/formats.py), octets through ``io.BytesIO``."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.capture import formats as capture
from app.capture import streams
from app.capture.carriers import Carried, CarrierError, Found, read_capture

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def summary(found: list[Found]) -> list[tuple[str, str, Any]]:
    return [
        ("carried", f.source, f.value) if isinstance(f, Carried) else ("error", f.source, f.detail)
        for f in found
    ]


def both(data: bytes, name: str = "cap", **kw: Any) -> tuple[list[Any], list[Any]]:
    whole = summary(list(read_capture(data, name=name, **kw)))
    streamed = summary(list(read_capture(io.BytesIO(data), name=name, **kw)))
    return whole, streamed


@pytest.mark.parametrize("example", ["capture.jsonl", "broken.jsonl"])
def test_the_examples_read_the_same_streamed(example: str) -> None:
    whole, streamed = both((EXAMPLES / example).read_bytes(), name=example)
    assert whole
    assert streamed == whole


def _records() -> list[dict[str, Any]]:
    lines = (EXAMPLES / "capture.jsonl").read_bytes().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_json_array_and_cbor_sequence_read_the_same_streamed() -> None:
    records = _records()
    whole, streamed = both(json.dumps(records, indent=1).encode(), name="cap.json")
    assert len(whole) >= len(records) and streamed == whole
    sequence = b"".join(cbor2.dumps(r) for r in records)
    whole, streamed = both(sequence, name="cap.cbor")
    assert len(whole) == len(records) and streamed == whole


def test_a_sniffed_stream_finds_its_format_past_the_first_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams, "STREAM_CHUNK", 16)  # the first line spans several chunks
    data = b"\n".join(json.dumps(r).encode() for r in _records()) + b"\n"
    whole, streamed = both(data, name="-")
    assert streamed == whole and all(kind == "carried" for kind, _, _ in whole)


def test_a_broken_json_array_keeps_the_elements_before_the_break() -> None:
    first, second = _records()[:2]
    data = f"[{json.dumps(first)}, {json.dumps(second)}, {{".encode()
    whole, streamed = both(data, name="cap.json")
    assert streamed == whole
    assert [kind for kind, _, _ in whole][:2] == ["carried", "carried"]
    assert whole[-1][0] == "error" and "ends early at byte" in whole[-1][2]


def test_a_bad_array_element_costs_only_itself() -> None:
    first = _records()[0]
    data = f'[{json.dumps(first)}, {{"a": 1, "a": 2}}, {json.dumps(first)}]'.encode()
    whole, streamed = both(data, name="cap.json")
    assert streamed == whole
    assert [(kind, source) for kind, source, _ in whole] == [
        ("carried", "cap.json[0]"),
        ("error", "cap.json[1]"),
        ("carried", "cap.json[2]"),
    ]


def test_an_over_long_array_element_ends_the_array(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bound is checked as chunks arrive: it caps what one element can hold in memory.
    monkeypatch.setattr(streams, "MAX_ITEM_OCTETS", 64)
    monkeypatch.setattr(streams, "STREAM_CHUNK", 32)
    data = b'[{"pad": "' + b"x" * 200 + b'"}, {}]'
    [error] = list(read_capture(data, name="cap.json"))
    assert isinstance(error, CarrierError) and error.source == "cap.json"
    assert "element 0 is longer than 64 bytes" in error.detail


def test_an_over_long_line_is_one_error_and_the_next_line_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(streams, "MAX_ITEM_OCTETS", 64)
    record = json.dumps(_records()[0]).encode()
    data = b'{"pad": "' + b"x" * 200 + b'"}\n' + record + b"\n"
    found = list(read_capture(io.BytesIO(data), name="cap.jsonl"))
    assert isinstance(found[0], CarrierError) and found[0].source == "cap.jsonl:1"
    assert "longer than 64 bytes" in found[0].detail


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(json_values, max_size=6), chunk=st.integers(1, 9), spaces=st.booleans())
def test_any_json_array_splits_into_its_elements(
    values: list[Any], chunk: int, spaces: bool
) -> None:
    data = json.dumps(values, indent=1 if spaces else None, ensure_ascii=False).encode()
    stream = io.BytesIO(data)
    head = stream.read(chunk)
    fmt = capture.CaptureFormat.JSON
    saved, streams.STREAM_CHUNK = streams.STREAM_CHUNK, chunk  # cut strings and escapes
    try:
        streamed = list(capture.read_stream(stream, head, name="a", fmt=fmt))
    finally:
        streams.STREAM_CHUNK = saved
    expected = [capture.CaptureItem(f"a[{i}]", value) for i, value in enumerate(values)]
    assert streamed == expected
    assert list(capture.read_items(data, name="a", fmt=fmt)) == expected
