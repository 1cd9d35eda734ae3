"""A k-hop delegation chain as a capture, shared by tests/test_chain_cost.py and
bench/lean_path.py."""

from __future__ import annotations

import json

from handoff_context import Signer, TrustStore, handoff_object, make_chain, trust_document

T0 = 1_793_000_000


def chain_capture(k: int, alg: str = "Ed25519") -> tuple[TrustStore, bytes]:
    """A k-hop chain as a JSON Lines capture: hop i carries the i offers before it, each
    received by its delegate 1 s after issue; and the trust store of its k + 1 agents."""
    signers = [Signer.generate(f"spiffe://t.example/a{i:02d}", alg) for i in range(k + 1)]
    offers = make_chain(
        signers[:k], dialog="ctx-chain", iat=T0, step=5, lifetime=120, final_aud=signers[k].iss
    )
    lines = [
        json.dumps(
            {
                "received_at": T0 + i * 5 + 1,
                "received_by": signers[i + 1].iss,
                "dialog": "ctx-chain",
                "payload": handoff_object(offer, offers[:i]),
            }
        )
        for i, offer in enumerate(offers)
    ]
    return TrustStore.from_mapping(trust_document(signers)), "\n".join(lines).encode()
