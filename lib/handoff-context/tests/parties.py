"""The test parties: a few signing agents (fresh keys per run) and their trust store.

Shared by the library's tests and the service's (both put this folder on the path)."""

from __future__ import annotations

from dataclasses import dataclass

from handoff_context import Signer, TrustStore, trust_document

T0 = 1_793_000_000  # issue time used throughout; receivers judge at about T0 + 30


@dataclass(frozen=True)
class World:
    assistant: Signer  # Ed25519
    planner: Signer  # Ed25519, kid p-ed1
    planner_alt: Signer  # the planner's second key (Ed25519, kid p-ed2)
    coder: Signer  # ES256
    tester: Signer  # ES256
    mallory: Signer  # not in the trust store
    trust: TrustStore


def make_world() -> World:
    assistant = Signer.generate("spiffe://a.example/agent/assistant", "Ed25519", kid="a-ed1")
    planner = Signer.generate("spiffe://a.example/agent/planner", "Ed25519", kid="p-ed1")
    planner_alt = Signer.generate(planner.iss, "Ed25519", kid="p-ed2")
    coder = Signer.generate("spiffe://b.example/agent/coder", "ES256", kid="c-es1")
    tester = Signer.generate("spiffe://c.example/agent/tester", "ES256", kid="t-es1")
    mallory = Signer.generate("spiffe://evil.example/agent/mallory", "Ed25519", kid="m-ed1")
    doc = trust_document([assistant, planner, coder, tester])
    doc["issuers"][1]["keys"].append(planner_alt.trust_entry()["keys"][0])
    return World(
        assistant, planner, planner_alt, coder, tester, mallory, TrustStore.from_mapping(doc)
    )
