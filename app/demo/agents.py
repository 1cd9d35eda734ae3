"""The cast of a demo: agents with keys derived from the seed, their trust file, one rogue.

Every key, ES256 included, is derived from the seeded random generator, so the same seed
gives the same trust file byte for byte. (ECDSA *signatures* still draw fresh randomness:
see the package docstring.)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from handoff_context import Signer, b64url_encode, import_private_key, trust_document

# P-256 group order (SEC 2).
P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551

# The first two agents are always an assistant and a planner; the rest cycle through these
# roles, so a large cast still has a few assistants and planners to start dialogs.
_ROLES = ("coder", "tester", "reviewer", "researcher", "coder", "tester", "planner", "assistant")
WORKER_ROLES = frozenset({"coder", "tester", "reviewer", "researcher"})
_ORGS = ("a.example", "b.example", "c.example")
MIN_AGENTS = 4  # an assistant, a planner and two agents to fan out to


@dataclass(frozen=True)
class Agent:
    """One agent: its identifier (``iss``), role, short name and signing key."""

    iss: str
    role: str
    name: str
    signer: Signer

    @property
    def alg(self) -> str:
        return self.signer.alg


@dataclass(frozen=True)
class Cast:
    """The trusted agents (all in the trust file) and one rogue that is not."""

    agents: tuple[Agent, ...]
    rogue: Agent

    def trust_document(self) -> dict[str, Any]:
        """The profile §4 trust file for the trusted agents (the rogue is left out)."""
        return trust_document([a.signer for a in self.agents])

    def by_role(self, *roles: str) -> list[Agent]:
        return [a for a in self.agents if a.role in roles]


def private_key(rng: random.Random, alg: str, kid: str) -> Any:
    """A joserfc private key whose secret comes from ``rng`` (deterministic for a seed)."""
    if alg == "Ed25519":
        secret = rng.randbytes(32)
        ed_public = ed25519.Ed25519PrivateKey.from_private_bytes(secret).public_key()
        jwk = {
            "kty": "OKP",
            "crv": "Ed25519",
            "kid": kid,
            "x": b64url_encode(ed_public.public_bytes_raw()),
            "d": b64url_encode(secret),
        }
    elif alg == "ES256":
        scalar = rng.randrange(1, P256_N)
        numbers = ec.derive_private_key(scalar, ec.SECP256R1()).public_key().public_numbers()
        jwk = {
            "kty": "EC",
            "crv": "P-256",
            "kid": kid,
            "x": b64url_encode(numbers.x.to_bytes(32, "big")),
            "y": b64url_encode(numbers.y.to_bytes(32, "big")),
            "d": b64url_encode(scalar.to_bytes(32, "big")),
        }
    else:
        raise ValueError(f"unsupported alg {alg!r}")
    return import_private_key(jwk)


def _agent(rng: random.Random, *, role: str, name: str, org: str) -> Agent:
    alg = rng.choice(("ES256", "Ed25519"))
    kid = f"{name}-{alg.lower()}"
    iss = f"spiffe://{org}/agent/{name}"
    return Agent(iss=iss, role=role, name=name, signer=Signer(iss, private_key(rng, alg, kid), alg))


def make_cast(seed: int, count: int) -> Cast:
    """``count`` trusted agents (a mix of ES256 and Ed25519) and one untrusted rogue.

    Raises ValueError when ``count`` is below MIN_AGENTS.
    """
    if count < MIN_AGENTS:
        raise ValueError(f"a demo needs at least {MIN_AGENTS} agents")
    rng = random.Random(f"handoff-trace-demo:{seed}:agents")
    numbers: dict[str, int] = {}
    agents = []
    for i in range(count):
        role = ("assistant", "planner")[i] if i < 2 else _ROLES[(i - 2) % len(_ROLES)]
        numbers[role] = numbers.get(role, 0) + 1
        name = f"{role}-{numbers[role]}"
        agents.append(_agent(rng, role=role, name=name, org=_ORGS[i % len(_ORGS)]))
    rogue = _agent(rng, role="rogue", name="shadow-1", org="rogue.example")
    return Cast(agents=tuple(agents), rogue=rogue)
