"""The issue 21 drills through the real agent integrations: a real a2a-sdk receiving agent
behind ``HandoffRequestHandler`` whose trust is a ``TrustSources`` fed by a loopback JWKS
server (``keyservers.KeyServer``). Rotation: the delegator publishes a new key and signs
with it; after one explicit ``refresh()`` (no sleep, no restart) the new offer is accepted
and the executor runs, and an offer signed with the old key before the rotation still
verifies in the library. Revocation: once the old key is revoked, a new offer under it is
refused with ``untrusted-key`` before the executor runs."""

from __future__ import annotations

import asyncio
import time

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from handoff_context import (
    Context,
    InMemoryState,
    Outcome,
    Signer,
    Verifier,
    handoff_object,
    make_offer,
)
from handoff_context.agent import Agent
from handoff_context.sources import TrustConfig, TrustSources
from keyservers import jwks, key_server

from .agents import Worker, a2a_app, card
from .hostile import message
from .servers import serving
from .test_enforce import a2a_sender, send

PLANNER = "spiffe://b.example/agent/planner"
CODER = Signer.generate("spiffe://c.example/agent/coder", "ES256", kid="c1")
JWKS = "/planner/jwks.json"


def test_rotation_and_revocation_through_the_a2a_integration() -> None:
    old = Signer.generate(PLANNER, "ES256", kid="p1")
    new = Signer.generate(PLANNER, "ES256", kid="p2")
    now = int(time.time())
    with key_server() as keys:
        keys.serve(JWKS, jwks(old))
        source = {
            "name": "planner-jwks",
            "kind": "jwks",
            "url": keys.url(JWKS),
            "identifiers": [PLANNER],
            "refresh_seconds": 60,
        }
        trust = TrustSources(TrustConfig.from_mapping({"sources": [source]}))
        trust.refresh()
        # The TrustSources goes where a TrustStore goes, unchanged.
        coder = Agent(CODER, trust, state=InMemoryState())
        worker = Worker()
        before = make_offer(old, aud=CODER.iss, dialog="rot-before", iat=now - 20)
        early = make_offer(new, aud=CODER.iss, dialog="rot-early", iat=now)
        rotated = make_offer(new, aud=CODER.iss, dialog="rot-new", iat=now)
        overlap = make_offer(old, aud=CODER.iss, dialog="rot-overlap", iat=now)
        revoked = make_offer(old, aud=CODER.iss, dialog="rot-revoked", iat=now)

        async def drill(url: str) -> None:
            async with a2a_sender(url) as client:

                async def completes(text: str, dialog: str, offer: bytes) -> None:
                    events = await send(client, message(text, dialog, handoff_object(offer)))
                    assert events[-1].task.status.state == pb.TaskState.TASK_STATE_COMPLETED

                async def refused(text: str, dialog: str, offer: bytes) -> str:
                    with pytest.raises(InvalidParamsError) as caught:
                        await send(client, message(text, dialog, handoff_object(offer)))
                    return str((caught.value.data or {})["reason"])

                await completes("complete before", "rot-before", before)
                # The new key is not published yet: its kid names none of the delegator's
                # keys (profile §4: bad-signature), the offer is refused, the work not run.
                assert await refused("complete early", "rot-early", early) == "bad-signature"

                # Rotation: the delegator publishes the new key beside the old one; one
                # explicit refresh and the receiver takes offers under it.
                keys.serve(JWKS, jwks(new, old))
                trust.refresh(force=True)
                await completes("complete rotated", "rot-new", rotated)
                await completes("complete overlap", "rot-overlap", overlap)

                # Revocation: from ``now - 10`` on, the old key verifies nothing new.
                trust.revoke(at=now - 10, kid="p1", reason="drill")
                assert await refused("complete revoked", "rot-revoked", revoked) == (
                    "untrusted-key"
                )

        with serving(a2a_app(worker, card("http://coder/"), coder)) as url:
            asyncio.run(drill(url))
        # The refused offers never reached the executor.
        assert worker.runs == ["complete before", "complete rotated", "complete overlap"]

        # The offer signed with the old key before the rotation (and before the revocation)
        # still verifies in the library, under the same live trust; the revoked one does not.
        for offer, outcome, dialog in (
            (before, Outcome.ACCEPT, "rot-before"),
            (revoked, Outcome.REJECT, "rot-revoked"),
        ):
            verdict = Verifier(trust).verify_value(
                handoff_object(offer),
                Context(now=now, receiver=CODER.iss, dialog=dialog),
                source="drill",
            )
            assert verdict.outcome is outcome, verdict
        assert [k for k, _ in trust.status()[0].keys] == ["p2", "p1"]
