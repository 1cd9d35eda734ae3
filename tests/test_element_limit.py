"""HANDOFF_TRACE_MAX_ELEMENT_BYTES lowers the per-element ceiling below the profile's 64 KiB,
and an element over it is refused before any decoding (SPEC 1.2)."""

from __future__ import annotations

import json

from handoff_context.sign import handoff_object, make_offer
from sqlalchemy import Engine

from app.ingest.verifying import verify_inputs
from app.settings import Settings
from tests.conftest import T0, World
from tests.store.builders import elements, run


def test_configured_element_limit_is_enforced(world: World) -> None:
    offer = make_offer(
        world.planner, aud=world.coder.iss, dialog="d", iat=T0, extra={"note": "x" * 2000}
    )
    capture = json.dumps(handoff_object(offer)).encode()
    roomy = Settings.from_env({}).verify_options(at=T0 + 5)
    tight = Settings.from_env({"HANDOFF_TRACE_MAX_ELEMENT_BYTES": "1024"}).verify_options(at=T0 + 5)
    [ok] = verify_inputs([("c.json", capture)], trust=world.trust, options=roomy).verdicts
    [refused] = verify_inputs([("c.json", capture)], trust=world.trust, options=tight).verdicts
    assert ok.outcome.value == "accept"
    assert (refused.outcome.value, refused.reason.value) == ("reject", "malformed")
    assert refused.detail == "offer is larger than 1024 octets"


def test_the_limit_holds_on_ingest_too(engine: Engine, world: World) -> None:
    """Ingest parsed elements without the limit, so it stored what verify refused."""
    offer = make_offer(
        world.planner, aud=world.coder.iss, dialog="d", iat=T0, extra={"note": "x" * 2000}
    )
    record = handoff_object(offer)
    [refused] = run(engine, world.trust, [record], at=T0 + 5, max_element_bytes=1024).verdicts
    assert (refused.outcome.value, refused.reason.value) == ("reject", "malformed")
    assert refused.detail == "offer is larger than 1024 octets"
    assert elements(engine) == {}
