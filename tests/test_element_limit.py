"""HANDOFF_TRACE_MAX_ELEMENT_BYTES lowers the per-element ceiling below the profile's 64 KiB,
and an element over it is refused before any decoding (profile §1.2)."""

from __future__ import annotations

import json

from handoff_context import handoff_digest, handoff_object, make_offer
from sqlalchemy import Engine

from app.ingest.build import verify_options
from app.ingest.pipeline import Pipeline, ingest
from app.ingest.verifying import verify_inputs
from app.settings import Settings
from app.store import db
from app.store.models import ElementRow, RejectedOctetsRow
from tests.conftest import T0, World


def test_configured_element_limit_is_enforced(world: World) -> None:
    offer = make_offer(
        world.planner, aud=world.coder.iss, dialog="d", iat=T0, extra={"note": "x" * 2000}
    )
    capture = json.dumps(handoff_object(offer)).encode()
    roomy = verify_options(Settings.from_env({}), at=T0 + 5)
    tight = verify_options(
        Settings.from_env({"HANDOFF_TRACE_MAX_ELEMENT_BYTES": "1024"}), at=T0 + 5
    )
    [ok] = verify_inputs([("c.json", capture)], trust=world.trust, options=roomy).verdicts
    [refused] = verify_inputs([("c.json", capture)], trust=world.trust, options=tight).verdicts
    assert ok.outcome.value == "accept"
    assert (refused.outcome.value, refused.reason.value) == ("reject", "malformed")
    assert refused.detail == "offer is larger than 1024 octets"


def test_ingest_enforces_the_configured_element_limit_as_verify_does(
    world: World, engine: Engine
) -> None:
    offer = make_offer(
        world.planner, aud=world.coder.iss, dialog="d", iat=T0, extra={"note": "x" * 2000}
    )
    capture = json.dumps(handoff_object(offer)).encode()
    tight = verify_options(
        Settings.from_env({"HANDOFF_TRACE_MAX_ELEMENT_BYTES": "1024"}), at=T0 + 5
    )
    pipeline = Pipeline(engine=engine, trust=world.trust, options=tight)
    [stored] = ingest(pipeline, [("c.json", capture)], now=T0 + 10).verdicts
    [verified] = verify_inputs([("c.json", capture)], trust=world.trust, options=tight).verdicts
    assert stored.to_json() == verified.to_json()
    assert (stored.outcome.value, stored.reason.value) == ("reject", "malformed")
    with db.transaction(engine) as session:
        assert session.get(ElementRow, handoff_digest(offer)) is None  # refused, not stored
        assert session.get(RejectedOctetsRow, handoff_digest(offer)) is not None
