"""The envelope stage's two uses of a capture item's own JSON text (issue 20, item 4):
``payload_octets`` writes the stored octets with ``orjson`` when the text shows no float,
and ``may_hold_items`` rules out an item before its value is walked. Neither may change
what is stored: the octets (and so their digest and the receipts' dedupe keys) stay byte
for byte ``json.dumps``'s, and an item ruled out is one ``find_items`` finds nothing in.
"""

from __future__ import annotations

import json
from typing import Any

from handoff_context.carry import A2A_EXTENSION_URI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.capture.formats import CaptureFormat, CaptureItem, read_items
from app.envelope.extract import DEFAULT_TYPES, find_items, may_hold_items
from app.ingest.envelope import payload_octets

from .builders import V2, message_v1, send_v1

# --- payload_octets: the same octets with or without the text -----------------------------

_text = st.text(alphabet=st.characters(codec=None), max_size=12)  # lone surrogates too
_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [1e-05, 1e16, 0.1, -0.0, 5e-324, 1.5e300, 1e22, 123.456]
)
_leaf = (
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | _floats | _text
)
_json = st.recursive(
    _leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=24,
)


def _texts(value: Any) -> list[bytes]:
    """Ways a capture could have written ``value``: ASCII-escaped with spaces, indented,
    compact UTF-8."""
    return [
        json.dumps(value).encode(),
        json.dumps(value, indent=1).encode(),
        json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", errors="surrogatepass"
        ),
    ]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_json)
def test_the_octets_are_json_dumps_whatever_the_value(value: Any) -> None:
    expected = payload_octets(value)  # json.dumps, or CBOR for NaN and infinities
    for raw in _texts(value):
        assert payload_octets(value, raw) == expected


def test_the_fast_path_writes_json_dumps_text_and_floats_keep_theirs() -> None:
    value = {"b": [1, "é\u2028", None, True, {"x": -(2**63)}], "a": '\x00\x1f"\\/'}
    raw = json.dumps(value).encode()
    assert payload_octets(value, raw) == (
        json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(),
        "json",
    )
    # orjson would write 1e-05 as 0.00001: a float keeps json.dumps's text.
    small = {"at": 1e-05, "note": "no float in here"}
    assert payload_octets(small, json.dumps(small).encode()) == (
        b'{"at":1e-05,"note":"no float in here"}',
        "json",
    )
    # A float alone (no ":" before it), and in an indented array.
    assert payload_octets(1e-05, b" 1e-05\n") == (b"1e-05", "json")
    assert payload_octets([1e-05], b"[\n  1e-05\n]") == (b"[1e-05]", "json")
    # Negative, exponent, NaN: each keeps json.dumps's text (CBOR for NaN, as before).
    for value in ({"a": -1e-05}, {"a": [0, 2e-7]}, {"a": float("nan")}, {"a": -float("inf")}):
        assert payload_octets(value, json.dumps(value, indent=1).encode()) == payload_octets(value)
    # A lone surrogate and an integer beyond 64 bits: orjson refuses, json.dumps decides.
    odd = {"s": "\ud800", "n": 2**70}
    assert payload_octets(odd, json.dumps(odd).encode()) == payload_octets(odd)


# --- may_hold_items: an item ruled out holds no envelope item -----------------------------

_NAMES = [
    "kind", "parts", "data", "mediaType", "media_type", "metadata", "mimeType", "case_id",
    "accepted", "case_event", "message", "params", "method", "result", "payload", "status",
    "artifacts", "artifact", "history", "messageId", "task", "epoch", "state", "id",
    "received_at", "received_by", "agent", "action", "at", "text",
]  # fmt: skip
_WORDS = [
    V2, V2.upper(), "application/vnd.other.handoff.v9+json", "application/json", "message",
    "data", "task", "message/send", "SendMessage", "completed", "write", "C-1", "x",
]  # fmt: skip
_word = st.sampled_from(_WORDS) | _text
_payload = st.recursive(
    st.none() | st.booleans() | st.integers(0, 10) | _word,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(_NAMES) | _text, inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_payload, st.booleans(), st.booleans())
def test_an_item_ruled_out_holds_no_envelope_item(
    value: Any, ascii_only: bool, escape_slash: bool
) -> None:
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", errors="surrogatepass")
    if escape_slash:
        raw = raw.replace(b"/", b"\\/")
    if not may_hold_items(raw, DEFAULT_TYPES):
        assert find_items(value, source="x", accepted=DEFAULT_TYPES) == []


_KIT = frozenset({"application/x-kit"})  # a configured type: no "handoff" in it


def _line(media: str, *, ascii_only: bool = True) -> bytes:
    """A 1.0 SendMessage whose only marker is its data part's media type."""
    message = message_v1({"a": 1}, media_type=media, text="hi", urls=[])
    return json.dumps(send_v1(message), ensure_ascii=ascii_only).encode()


def test_escapes_and_case_do_not_hide_an_envelope() -> None:
    spelled = [
        _line("application/x-kit"),
        _line("APPLICATION/X-Kit; charset=utf-8"),
        _line("application/x-kit").replace(b"/", b"\\/"),  # "\/" is "/" in JSON
        _line("application/x-\u212ait"),  # the Kelvin sign, written as an escape
        _line("application/x-\u212ait", ascii_only=False),  # and as its UTF-8 octets
        _line("application/x-kit").replace(b"x-kit", b"x-\\u006bit"),
    ]
    for raw in spelled:
        assert find_items(json.loads(raw), source="x", accepted=_KIT)  # an envelope item
        assert may_hold_items(raw, _KIT)
    other = _line("application/x-other")
    assert not may_hold_items(other, _KIT)
    assert find_items(json.loads(other), source="x", accepted=_KIT) == []
    # The default type, and handoff-like types (drift), are found by "handoff".
    default = json.dumps(send_v1(message_v1(media_type=V2.upper()))).encode()
    assert find_items(json.loads(default), source="x") and may_hold_items(default)


def test_items_without_envelopes_are_ruled_out_and_read_alike() -> None:
    signed = {"messageId": "m", "metadata": {A2A_EXTENSION_URI: {"offer": "eyJ0.e30.c2ln"}}}
    lines = [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup"}}',
        json.dumps({"received_at": 5, "payload": {"message": signed}}).encode(),
        json.dumps(send_v1(message_v1())).encode(),
        b'{"received_at":5,"payload":{"case_event":{"case_id":"C-1"}}}',
    ]
    read = list(read_items(b"\n".join(lines), name="c.jsonl", fmt=CaptureFormat.JSONL))
    assert all(isinstance(item, CaptureItem) and item.raw is not None for item in read)
    held = [may_hold_items(item.raw) for item in read if isinstance(item, CaptureItem) and item.raw]
    assert held == [False, False, True, True]  # a signed offer's carrier key is no marker
