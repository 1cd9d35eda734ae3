"""Hostile CBOR through every storing entry point (issue 15, item 6): COSE elements whose
payloads cbor2 cannot decode (malformed simple values, nesting past 400, semantic tags with
the wrong content) made ``POST /api/v1/ingest`` answer 500 and ``handoff-trace ingest``
print a traceback, and in a CBOR sequence the items after such an item were lost. Now each
gets its own verdict, the rest of the sequence is stored, and a hypothesis fuzz of the CBOR
capture reader through the ingest endpoint keeps it so (the named vectors are in
tests/vectors/fuzz, run by tests/test_fuzz_vectors.py and tests/web/test_entry_points.py).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cbor2
import pytest
from handoff_context.vectors import generate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from app.cli import main as cli
from app.store.models import ElementRow, RejectedOctetsRow
from fuzz import targets
from tests.databases import Databases
from tests.web.conftest import Api, start

TRUST = targets.VECTORS / "trust.json"
# A protected header the strict reader accepts, so that it goes on to read the payload.
PROTECTED = cbor2.dumps({1: -19, 3: "application/handoff-offer+cbor"})
VALID = [
    generate.b64u_decode(item)
    for name in ("cose-valid-offer", "cose-chain", "cose-status-accepted")
    for item in json.loads((targets.VECTORS / "valid" / f"{name}.json").read_bytes())["input"]
]


def cose_item(payload: bytes, protected: bytes = PROTECTED) -> bytes:
    """A capture item carrying a COSE_Sign1 offer with these payload octets."""
    return cbor2.dumps({"offer": cbor2.dumps(cbor2.CBORTag(18, [protected, {}, payload, b""]))})


HOSTILE_PAYLOADS = {
    "two-byte simple value": bytes.fromhex("f810"),
    "nesting 401": b"\x81" * 401 + b"\x00",
    "tag 0 around an integer": bytes.fromhex("c001"),
    "tag 30 one over zero": b"\xd8\x1e" + cbor2.dumps([1, 0]),
    "tag 35 unbalanced": b"\xd8\x23" + cbor2.dumps("("),
    "tag 260 two octets": b"\xd9\x01\x04" + cbor2.dumps(b"\x00\x01"),
    "shared reference": b"\xd8\x1c" + cbor2.dumps([b"\xd8\x1d\x00"]),
}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def cbor_api(request: pytest.FixtureRequest, databases: Databases) -> Iterator[Api]:
    for api in start(databases.new(request.param), TRUST):
        api.clock.now = targets.AT
        yield api


def count(api: Api, table: Any) -> int:
    with api.engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(table)).scalar_one())


def ingest(api: Api, body: bytes) -> dict[str, Any]:
    response = api.post("/api/v1/ingest", body, content_type="application/cbor")
    assert response.status_code == 200, response.text[:300]
    answer: dict[str, Any] = response.json()
    assert answer["errors"] == []
    return answer


def test_a_hostile_item_in_a_sequence_spoils_nothing_else(cbor_api: Api) -> None:
    alone = [ingest(cbor_api, item)["verdicts"][0] for item in VALID]
    elements = count(cbor_api, ElementRow)
    hostile = [cose_item(p) for p in HOSTILE_PAYLOADS.values()]
    # The valid items again (retransmissions now), with hostile ones before, between, after.
    mixed = itertools.zip_longest(hostile, VALID, fillvalue=b"")
    body = b"".join(a + b for a, b in mixed) + hostile[0]
    verdicts = ingest(cbor_api, body)["verdicts"]
    assert len(verdicts) == len(hostile) + len(VALID) + 1
    judged = {v["digest"]: v for v in verdicts if v["reason"] != "malformed"}
    assert [judged[v["digest"]]["outcome"] for v in alone] == ["duplicate"] * len(VALID)
    malformed = [v for v in verdicts if v["reason"] == "malformed"]
    assert len(malformed) == len(hostile) + 1 and all(v["detail"] for v in malformed)
    assert count(cbor_api, ElementRow) == elements
    assert count(cbor_api, RejectedOctetsRow) >= len(hostile)


def test_cli_ingest_exits_1_with_verdicts_and_no_traceback(tmp_path: Path) -> None:
    capture = tmp_path / "hostile.cbor"
    capture.write_bytes(b"".join(cose_item(p) for p in HOSTILE_PAYLOADS.values()) + VALID[0])
    out, err = io.StringIO(), io.StringIO()
    args = ["ingest", "--db", f"sqlite:///{tmp_path / 's.db'}", "--trust", str(TRUST), "--json"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli([*args, str(capture)])
    assert code == 1, err.getvalue()
    assert "Traceback" not in err.getvalue()
    verdicts = json.loads(out.getvalue())
    assert [v["reason"] for v in verdicts][: len(HOSTILE_PAYLOADS)] == ["malformed"] * len(
        HOSTILE_PAYLOADS
    )
    assert len(verdicts) == len(HOSTILE_PAYLOADS) + 1


# --- the fuzz: generated CBOR, well-formed or not, as COSE payloads and as capture items ----

TAGS = [0, 1, 2, 3, 4, 5, 21, 24, 28, 29, 30, 32, 35, 36, 37, 256, 258, 260, 261, 1004, 55799]


def _head(major: int, argument: int) -> bytes:
    if argument < 24:
        return bytes([major << 5 | argument])
    for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if argument < 1 << (8 * size):
            return bytes([major << 5 | info]) + argument.to_bytes(size, "big")
    raise ValueError(argument)


def _cbor(children: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.lists(children, max_size=4).map(lambda xs: _head(4, len(xs)) + b"".join(xs)),
        st.lists(st.tuples(children, children), max_size=3).map(
            lambda kv: _head(5, len(kv)) + b"".join(k + v for k, v in kv)
        ),
        st.tuples(st.sampled_from(TAGS), children).map(lambda t: _head(6, t[0]) + t[1]),
        st.tuples(st.integers(1, 600), children).map(lambda t: b"\x81" * t[0] + t[1]),
        children.map(lambda c: b"\x9f" + c + b"\xff"),  # indefinite length
        children.map(lambda c: b"\x9f" + c),  # never ended
    )


ATOMS = st.one_of(
    st.integers(-(2**64), 2**64 - 1).map(cbor2.dumps),
    st.text(max_size=8).map(cbor2.dumps),
    st.binary(max_size=17).map(cbor2.dumps),
    st.integers(0, 255).map(lambda n: bytes([0xF8, n])),  # every simple value, legal or not
    st.sampled_from([b"\xf4", b"\xf5", b"\xf6", b"\xf7", b"\xf9\x7e\x00", b"\xfb" + b"\0" * 8]),
    st.binary(min_size=1, max_size=3),  # anything at all
)
RAW_CBOR = st.recursive(ATOMS, _cbor, max_leaves=12)
FUZZ = settings(
    deadline=None, derandomize=True, max_examples=60, suppress_health_check=list(HealthCheck)
)


@FUZZ
@given(
    payloads=st.lists(RAW_CBOR, min_size=1, max_size=4),
    items=st.lists(RAW_CBOR, max_size=2),
    protected=st.sampled_from([PROTECTED, b""]),
)
def test_fuzzed_cbor_through_ingest_gives_200_with_verdicts(
    cbor_api: Api, payloads: list[bytes], items: list[bytes], protected: bytes
) -> None:
    """COSE payloads and raw capture items from a generator of CBOR heads (any tag, any
    simple value, deep nesting, indefinite lengths, stray bytes), then a valid item: always
    200, no item lost to an error, and a malformed verdict with its reason for each COSE
    item (what follows a capture item that is not CBOR cannot be read, profile §10)."""
    body = b"".join(cose_item(p, protected) for p in payloads) + b"".join(items) + VALID[0]
    for path in ("/api/v1/ingest", "/api/v1/verify"):
        response = cbor_api.post(path, body, content_type="application/cbor")
        assert response.status_code == 200, (path, response.text[:300])
        answer = response.json()
        assert answer.get("errors", []) == []
        verdicts = answer["verdicts"]
        assert len(verdicts) >= len(payloads)
        assert all(v["reason"] == "malformed" and v["detail"] for v in verdicts[: len(payloads)])
