"""The issue 21 drills through the real agent integrations: a delegating agent
(``HandoffClient`` over a real a2a-sdk client) and a real a2a-sdk receiving agent behind
``HandoffRequestHandler`` whose trust is a ``TrustSources`` fed by a loopback JWKS server
(``keyservers.KeyServer``).

Rotation: the delegator publishes a new key beside the old one and signs with it; after one
explicit ``refresh()`` (no sleep, no restart of the receiver) the new offer is accepted and
the executor runs; an offer signed with the old key before the rotation still verifies in
the library. Revocation: once the old key is revoked (``TrustSources.revoke`` on the running
receiver, then the same revocation written into the configuration's ``revoked`` for a
receiver started on it), a new offer under it is refused with ``untrusted-key`` and a signed
``rejected`` before the executor runs."""

from __future__ import annotations

import asyncio
import time

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from handoff_context import (
    Context,
    InMemoryState,
    Outcome,
    Signer,
    StatusState,
    TrustStore,
    Verifier,
    handoff_object,
)
from handoff_context.a2a import HandoffClient
from handoff_context.agent import Agent, Delegation
from handoff_context.sources import TrustConfig, TrustSources
from keyservers import jwks, key_server

from .agents import Worker, a2a_app, card
from .hostile import Clock, message
from .servers import serving
from .test_enforce import a2a_sender

PLANNER = "spiffe://b.example/agent/planner"
CODER = Signer.generate("spiffe://c.example/agent/coder", "ES256", kid="c1")
JWKS = "/planner/jwks.json"


def test_rotation_and_revocation_through_the_a2a_integration() -> None:
    old = Signer.generate(PLANNER, "ES256", kid="p1")
    new = Signer.generate(PLANNER, "ES256", kid="p2")
    clock = Clock()  # the delegator's: wall-clock seconds, set back for the early offer
    knows_coder = TrustStore.from_mapping({"issuers": [CODER.trust_entry()]})

    def planner(signer: Signer) -> Agent:
        return Agent(signer, knows_coder, state=InMemoryState(), clock=clock)

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
        delegations: dict[str, Delegation] = {}
        revoked_at = int(time.time()) - 10

        async def ask(url: str, by: Agent, text: str, dialog: str) -> Delegation:
            async with a2a_sender(url) as sdk_client:
                client = HandoffClient(by, sdk_client, to=CODER.iss)
                request = pb.SendMessageRequest(message=message(text, dialog, None))
                try:
                    delegations[dialog] = await client.delegate(request)
                except InvalidParamsError:
                    assert client.last is not None
                    delegations[dialog] = client.last
                return delegations[dialog]

        async def drill(url: str) -> None:
            clock.offset = -20
            before = await ask(url, planner(old), "complete before", "rot-before")
            assert before.state is StatusState.COMPLETED
            clock.offset = 0
            # The new key is not published yet: its kid names none of the delegator's keys
            # (profile §4: bad-signature); refused with a signed rejected, the work not run.
            early = await ask(url, planner(new), "complete early", "rot-early")
            assert (early.refusal, early.state) == ("bad-signature", StatusState.REJECTED)

            # Rotation: the delegator publishes the new key beside the old one; one explicit
            # refresh and the receiver, still running, takes offers under it.
            keys.serve(JWKS, jwks(new, old))
            trust.refresh(force=True)
            rotated = await ask(url, planner(new), "complete rotated", "rot-new")
            assert (rotated.refusal, rotated.state) == (None, StatusState.COMPLETED)
            overlap = await ask(url, planner(old), "complete overlap", "rot-overlap")
            assert overlap.state is StatusState.COMPLETED

            # Revocation: from ten seconds ago on, the old key verifies nothing new.
            trust.revoke(at=revoked_at, kid="p1", reason="drill")
            revoked = await ask(url, planner(old), "complete revoked", "rot-revoked")
            assert (revoked.refusal, revoked.state) == ("untrusted-key", StatusState.REJECTED)
            # Still answered by the rotated key.
            again = await ask(url, planner(new), "complete again", "rot-again")
            assert again.state is StatusState.COMPLETED

        with serving(a2a_app(worker, card("http://coder/"), coder)) as url:
            asyncio.run(drill(url))
        # The refused offers never reached the executor.
        assert worker.runs == [
            "complete before",
            "complete rotated",
            "complete overlap",
            "complete again",
        ]

        # The same revocation written into the configuration (``revoked``): a receiver
        # started on it refuses the old key's new offers and takes the rotated key's.
        config = {"sources": [source], "revoked": [{"kid": "p1", "at": revoked_at}]}
        configured = TrustSources(TrustConfig.from_mapping(config))
        configured.refresh()
        restarted = Agent(CODER, configured, state=InMemoryState())

        async def from_config(url: str) -> None:
            stale = await ask(url, planner(old), "complete stale", "rot-config-old")
            assert (stale.refusal, stale.state) == ("untrusted-key", StatusState.REJECTED)
            fresh = await ask(url, planner(new), "complete fresh", "rot-config-new")
            assert fresh.state is StatusState.COMPLETED

        with serving(a2a_app(worker, card("http://coder/"), restarted)) as url:
            asyncio.run(from_config(url))
        assert worker.runs[4:] == ["complete fresh"]

        # The delegator then drops the old key. The offer signed with it before the rotation
        # (and before the revocation) still verifies in the library, under the same live
        # trust; the one signed after the revocation does not.
        keys.serve(JWKS, jwks(new))
        trust.refresh(force=True)
        for dialog, outcome, reason in (
            ("rot-before", Outcome.ACCEPT, None),
            ("rot-revoked", Outcome.REJECT, "untrusted-key"),
        ):
            verdict = Verifier(trust).verify_value(
                handoff_object(delegations[dialog].offer),
                Context(now=int(time.time()), receiver=CODER.iss, dialog=dialog),
                source="drill",
            )
            assert (verdict.outcome, verdict.reason) == (outcome, reason), verdict
        assert [kid for kid, _ in trust.status()[0].keys] == ["p2"]
