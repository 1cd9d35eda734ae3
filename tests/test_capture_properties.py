"""Property tests of the capture readers, carrier extraction and the verify path behind them
(issue 6, fuzzing): on any input they never raise, and every answer is a payload, a carried
object or an error naming its place (app/capture/formats.py, app/capture/carriers.py: "Nothing
here raises
on bad input"). The properties are fuzz/targets.py's, the ones ``make fuzz`` runs for
minutes under atheris; here they run bounded and derandomized, from raw bytes, from the
vectors' captures in every format and carrier (fuzz/seeds.py) with byte edits, and from
structure-aware edits of the decoded payloads.
"""

from __future__ import annotations

import json
from typing import Any

import cbor2
from handoff_context.carry import A2A_EXTENSION_URI, MCP_META_KEY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import JSON_VALUES, mutated

from app.capture.formats import CaptureFormat
from fuzz import seeds, targets

FUZZ = settings(
    deadline=None, derandomize=True, max_examples=150, suppress_health_check=list(HealthCheck)
)
FEW = settings(FUZZ, max_examples=40)

CAPTURES = list(seeds.captures())
PAYLOADS = list(seeds.payloads())
FORMATS = st.sampled_from(list(CaptureFormat))
CONTENT_TYPES = st.sampled_from(targets.CONTENT_TYPES)


# --- raw bytes and byte edits of real captures -------------------------------------------


@FUZZ
@given(data=st.binary(max_size=600), fmt=FORMATS)
def test_read_items_random_bytes(data: bytes, fmt: CaptureFormat) -> None:
    targets.capture_file(data, fmt)


@FUZZ
@given(
    data=st.sampled_from([body for _, body in CAPTURES]).flatmap(mutated),
    fmt=FORMATS,
)
def test_read_items_mutated_captures(data: bytes, fmt: CaptureFormat) -> None:
    targets.capture_file(data, fmt)


@FUZZ
@given(data=st.binary(max_size=600), content_type=CONTENT_TYPES)
def test_read_capture_random_bytes(data: bytes, content_type: str | None) -> None:
    targets.capture_carriers(data, content_type)


@FUZZ
@given(capture=st.sampled_from(CAPTURES), data=st.data())
def test_read_capture_mutated_captures(capture: tuple[str | None, bytes], data: Any) -> None:
    content_type, body = capture
    targets.capture_carriers(data.draw(mutated(body), label="capture"), content_type)


@FEW
@given(capture=st.sampled_from(CAPTURES), data=st.data())
def test_verify_inputs_mutated_captures(capture: tuple[str | None, bytes], data: Any) -> None:
    content_type, body = capture
    targets.capture_verified(data.draw(mutated(body), label="capture"), content_type)


# --- structure-aware: edits of decoded payloads, re-encoded ------------------------------

# Values the carriers look for, so that edits reach the code behind the first branch.
CARRIER_PARTS = st.sampled_from(
    [
        A2A_EXTENSION_URI,
        MCP_META_KEY,
        "payload",
        "received_at",
        "received_by",
        "method",
        "params",
        "result",
        "message",
        "metadata",
        "_meta",
        "status",
        "task",
        "kind",
        "SendMessage",
        "message/send",
        "tools/call",
        "tasks/cancel",
        "CancelTask",
        "notifications/cancelled",
        "offer",
        "chain",
    ]
)
LEAVES = JSON_VALUES | CARRIER_PARTS | st.binary(max_size=8) | st.just(float("nan"))


@st.composite
def tree_edited(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with one node somewhere replaced, deleted or given a sibling."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value, key=repr)))
        out = dict(value)
        choice = draw(st.sampled_from(["descend", "replace", "delete", "add"]))
        if choice == "descend":
            out[key] = draw(tree_edited(value[key]))
        elif choice == "replace":
            out[key] = draw(LEAVES)
        elif choice == "delete":
            del out[key]
        else:
            out[draw(CARRIER_PARTS | st.text(max_size=6))] = draw(LEAVES)
        return out
    if isinstance(value, list) and value and draw(st.booleans()):
        at = draw(st.integers(0, len(value) - 1))
        return [*value[:at], draw(tree_edited(value[at])), *value[at + 1 :]]
    return draw(LEAVES | st.just(value) | st.lists(st.just(value), max_size=3))


WRAPPED = [w for p in PAYLOADS[::4] for w in seeds._wrapped(p)]


@FUZZ
@given(st.sampled_from(WRAPPED).flatmap(tree_edited))
def test_extract_edited_payloads(value: Any) -> None:
    targets.carried_value(value)


@FUZZ
@given(st.lists(st.sampled_from(WRAPPED).flatmap(tree_edited), min_size=1, max_size=4))
def test_read_capture_edited_payloads_in_every_format(values: list[Any]) -> None:
    jsonable = [v for v in values if _jsonable(v)]
    if jsonable:
        text = [json.dumps(v, allow_nan=True) for v in jsonable]
        targets.capture_carriers("\n".join(text).encode(), "application/x-ndjson")
        targets.capture_carriers(("[" + ",".join(text) + "]").encode(), "application/json")
    try:
        sequence = b"".join(cbor2.dumps(v) for v in values)
    except (ValueError, TypeError, cbor2.CBOREncodeError):
        return
    targets.capture_carriers(sequence, "application/cbor-seq")


@FEW
@given(st.sampled_from(WRAPPED).flatmap(tree_edited))
def test_verify_edited_payloads(value: Any) -> None:
    if _jsonable(value):
        targets.capture_verified(json.dumps(value).encode(), "application/json")


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
