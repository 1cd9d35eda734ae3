"""Octets refused before they became an element are kept as evidence (``rejected_octets``)
and flagged under the hop their payload names; each test on SQLite and on PostgreSQL."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from handoff_context import (
    Context,
    Form,
    Policy,
    Verifier,
    b64url_decode,
    b64url_encode,
    digest_text,
    parse_element,
)
from sqlalchemy import Engine, select

from app.demo.elements import embedded_key_offer
from app.store.db import transaction
from app.store.models import RejectedObservationRow, RejectedOctetsRow
from tests.conftest import World
from tests.store.builders import T0, bundle, digest, elements, flags, hop_of, offer, rec, run


def _refused(engine: Engine) -> dict[bytes, RejectedOctetsRow]:
    with transaction(engine) as session:
        return {r.digest: r for r in session.execute(select(RejectedOctetsRow)).scalars()}


def _receipts(engine: Engine) -> list[RejectedObservationRow]:
    with transaction(engine) as session:
        query = select(RejectedObservationRow).order_by(RejectedObservationRow.id)
        return list(session.execute(query).scalars())


def _with_key(world: World) -> bytes:
    o = offer(world.planner, world.coder)
    return embedded_key_offer(dict(parse_element(o, Form.JWS).raw_payload), world.planner)


def test_an_offer_whose_header_carries_a_key_is_kept_and_flagged(
    engine: Engine, world: World
) -> None:
    keyed = _with_key(world)
    report = run(engine, world.trust, [rec(bundle(keyed), T0 + 3), rec(bundle(keyed), T0 + 2)])
    assert [v.reason.value for v in report.verdicts if v.reason] == ["untrusted-key"] * 2
    assert elements(engine) == {}  # not an element: nothing about it is trusted
    [row] = _refused(engine).values()
    assert (row.digest, row.octets, row.form, row.type) == (digest(keyed), keyed, "jws", "offer")
    assert (row.hop_iss, row.hop) == hop_of_payload(keyed)
    # A retransmission adds a receipt, never a second copy.
    receipts = _receipts(engine)
    assert [(r.received_at, r.reason) for r in receipts] == [
        (T0 + 3, "untrusted-key"),
        (T0 + 2, "untrusted-key"),
    ]
    assert receipts[0].verdict["digest"] == digest_text(digest(keyed))
    [flag] = flags(engine)
    assert (flag["kind"], flag["variant"]) == ("rejected-element", "untrusted-key")
    assert (flag["iss"], flag["hop"]) == hop_of_payload(keyed)
    assert flag["evidence"] == [digest_text(digest(keyed))]
    assert flag["opened_at"] == T0 + 2  # the first receipt by capture time, not by ingest


def hop_of_payload(octets: bytes) -> tuple[str, str]:
    payload = json.loads(b64url_decode(octets.split(b".")[1].decode(), what="payload"))
    return payload["iss"], payload["hop"]


def test_a_malformed_element_whose_payload_reads_is_filed_under_its_hop(
    engine: Engine, world: World
) -> None:
    o = offer(world.planner, world.coder)
    head, body, sig = o.split(b".")
    header = json.loads(b64url_decode(head.decode(), what="header"))
    header["extra"] = 1  # a header member the profile does not allow
    bad = b".".join([b64url_encode(json.dumps(header).encode()).encode(), body, sig])
    run(engine, world.trust, [rec(bundle(o), T0 + 1), rec(bundle(bad), T0 + 2)])
    assert set(_refused(engine)) == {digest(bad)}
    kinds = {(f["kind"], f["variant"], f["iss"], f["hop"]) for f in flags(engine)}
    assert kinds == {("rejected-element", "malformed", *hop_of(o))}


def test_an_object_that_is_none_is_kept_without_a_hop(engine: Engine, world: World) -> None:
    report = run(engine, world.trust, [rec({"offer": 5}, T0 + 1)])
    assert report.verdicts[0].reason is not None
    assert report.verdicts[0].reason.value == "malformed"
    [row] = _refused(engine).values()
    assert (row.form, row.type, row.hop, row.octets) == ("json", None, None, b'{"offer":5}')
    assert row.digest == hashlib.sha256(b'{"offer":5}').digest()
    assert flags(engine) == []  # no hop to file it under; the row is the evidence


def test_a_refused_item_is_parsed_once_and_judged_as_the_verifier_judges_it(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each refused item's object is read once on its way to its verdict and its evidence
    (issue 20: three times before), and the verdict is the library's own for that value."""
    import handoff_context._verify as library_verify

    import app.ingest.judge as judge_module
    import app.ingest.refused as refused_module

    calls: list[object] = []
    for module in (judge_module, refused_module, library_verify):
        real = module.parse_object

        def counting(value: object, *a: Any, _real: Any = real, **kw: Any) -> Any:
            calls.append(value)
            return _real(value, *a, **kw)

        monkeypatch.setattr(module, "parse_object", counting)
    keyed = _with_key(world)
    items = [{"offer": 7}, {"offer": "a.b.c", "status": "a.b.c"}, bundle(keyed)]
    report = run(engine, world.trust, [rec(item, T0 + 1) for item in items])
    assert len(calls) == len(items)
    expected = Verifier(trust=world.trust, policy=Policy())
    for item, verdict in zip(items, report.verdicts, strict=True):
        mine = expected.verify_value(item, Context(now=T0 + 1), source=verdict.source)
        assert verdict.to_json() == mine.to_json()
    assert len(_receipts(engine)) == 3
