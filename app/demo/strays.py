"""Rejection faults: extra offers that a careful receiver must refuse, each for one reason.

A stray is issued by a hop's delegate while that hop is working, properly linked (its
``prev`` names the hop's offer, its ``iat`` lies inside that offer's life) so that nothing
but the injected fault is wrong with it; it gets no status and no children. Each is built
against the default receiver parameters (skew 60 s, lifetime 300 s, chain 16).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from handoff_context import Form, Signer, handoff_digest, handoff_object, sign_payload

from app.demo.agents import Agent, private_key
from app.demo.elements import corrupt_signature, embedded_key_offer

if TYPE_CHECKING:
    from app.demo.plan import Edge, Stray
    from app.demo.simulate import DialogSim


class Strays:
    """Builds and emits the strays of one simulated dialog."""

    def __init__(self, sim: DialogSim) -> None:
        self.sim = sim
        self.rng = sim.rng
        self.cast = sim.cast
        self.form = sim.form

    def emit(self, e: Edge, stray: Stray, t: int) -> None:
        builders = {
            "bad-signature": self._bad_signature,
            "untrusted-key": self._untrusted_key,
            "wrong-audience": self._wrong_audience,
            "stale": self._stale,
            "broken-chain": self._broken_chain,
            "cycle": self._cycle,
            "too-deep": self._too_deep,
            "policy": self._dialog_mismatch,
            "ref-mismatch": self._ref_mismatch,
        }
        builders[stray.kind](e, stray.variant, t)

    # -- shared --------------------------------------------------------------------------

    def _target(self, e: Edge) -> Agent:
        """An agent ``e``'s delegate could hand work to: not yet on the path (the planner
        puts strays only where there is one)."""
        taken = e.path_agents()
        return self.rng.choice([a for a in self.cast.agents if a.iss not in taken])

    def _lineage(self, e: Edge) -> list[bytes]:
        """The chain a hand-off from ``e``'s delegate carries: every offer down to ``e``."""
        return [x.run.octets for x in e.lineage()]

    def _deliver(
        self,
        e: Edge,
        kind: str,
        variant: str | None,
        *,
        payload: dict[str, Any],
        octets: bytes,
        to: Agent,
        at: int,
        detail: str,
        chain: list[bytes] | None = None,
        record_dialog: bool | None = None,
    ) -> None:
        wire = self.sim.channel().offer(handoff_object(octets, chain or []))
        self.sim.emit(at, to, wire, dialog=record_dialog)
        self.sim.answer(
            kind,
            variant,
            iss=payload["iss"],
            hop=payload["hop"],
            offer=handoff_digest(octets),
            detail=detail,
        )

    def _offer(self, e: Edge, t: int, **fields: Any) -> tuple[dict[str, Any], bytes]:
        src = fields.pop("src", e.dst)
        dst = fields.pop("dst", None) or self._target(e)
        fields.setdefault("prev", e.run.digest)
        lifetime = fields.pop("lifetime", self.rng.choice((120, 180, 240, 300)))
        return self.sim.sign_offer(src, dst, iat=t, lifetime=lifetime, **fields)

    def _maybe_chain(self, e: Edge) -> list[bytes]:
        return self._lineage(e) if self.rng.random() < 0.5 else []

    def _impostor(self, agent: Agent) -> Signer:
        """A key that is not ``agent``'s, under ``agent``'s identifier and kid."""
        kid = agent.signer.kid or "k"
        return Signer(agent.iss, private_key(self.rng, agent.alg, kid), agent.alg)

    # -- one builder per reason ----------------------------------------------------------

    def _bad_signature(self, e: Edge, variant: str | None, t: int) -> None:
        to = self._target(e)
        payload, octets = self._offer(e, t, dst=to)
        if variant == "corrupted":
            octets = corrupt_signature(octets, self.form)
            detail = "one signature octet changed in transit"
        else:
            octets = sign_payload(payload, self._impostor(e.dst), self.form)
            detail = "signed with another key under the issuer's kid"
        chain = self._maybe_chain(e)
        self._deliver(
            e,
            "bad-signature",
            variant,
            payload=payload,
            octets=octets,
            to=to,
            at=t + self.sim.lat(),
            detail=detail,
            chain=chain,
        )

    def _untrusted_key(self, e: Edge, variant: str | None, t: int) -> None:
        if variant == "embedded-key" and self.form is Form.JWS:
            to = self._target(e)
            payload, _ = self._offer(e, t, dst=to)
            octets = embedded_key_offer(payload, self._impostor(e.dst))
            detail = "the JWS header carries its own key (jwk)"
        else:
            variant, to = "unknown-issuer", e.dst
            payload, octets = self._offer(e, t, src=self.cast.rogue, dst=to, prev=None)
            detail = "an issuer the trust file does not list hands work into the dialog"
        self._deliver(
            e,
            "untrusted-key",
            variant,
            payload=payload,
            octets=octets,
            to=to,
            at=t + self.sim.lat(),
            detail=detail,
        )

    def _wrong_audience(self, e: Edge, variant: str | None, t: int) -> None:
        aud = self._target(e)
        payload, octets = self._offer(e, t, dst=aud)
        others = [a for a in self.cast.agents if a is not aud and a is not e.dst]
        to = self.rng.choice(others)
        self._deliver(
            e,
            "wrong-audience",
            variant,
            payload=payload,
            octets=octets,
            to=to,
            at=t + self.sim.lat(),
            detail=f"addressed to {aud.name}, delivered to {to.name}",
            chain=self._maybe_chain(e),
        )

    def _stale(self, e: Edge, variant: str | None, t: int) -> None:
        to = self._target(e)
        if variant == "expired":
            payload, octets = self._offer(e, t, dst=to)
            at = int(payload["exp"]) + 60 + self.rng.randint(5, 120)
            detail = f"delivered {at - int(payload['exp'])} s after it expired"
        else:
            # The sender's clock runs ahead: iat lies beyond the receiver's skew.
            ahead = 60 + self.rng.randint(30, 600)
            at = t + self.sim.lat()
            payload, octets = self._offer(e, at + ahead, dst=to)
            detail = f"issued {ahead} s in the receiver's future"
        self._deliver(
            e, "stale", variant, payload=payload, octets=octets, to=to, at=at, detail=detail
        )

    def _broken_chain(self, e: Edge, variant: str | None, t: int) -> None:
        to = self._target(e)
        payload, octets = self._offer(e, t, dst=to)
        chain = self._lineage(e)
        if variant == "dropped":
            gone = self.rng.randrange(1, len(chain))
            del chain[gone]
            detail = f"chain[{gone}] was dropped from the carried chain"
        else:
            i = self.rng.randrange(0, len(chain) - 1)
            chain[i], chain[i + 1] = chain[i + 1], chain[i]
            detail = f"chain[{i}] and chain[{i + 1}] were swapped"
        self._deliver(
            e,
            "broken-chain",
            variant,
            payload=payload,
            octets=octets,
            to=to,
            at=t + self.sim.lat(),
            detail=detail,
            chain=chain,
        )

    def _cycle(self, e: Edge, variant: str | None, t: int) -> None:
        back = self.rng.choice([x.src for x in e.lineage()])
        payload, octets = self._offer(e, t, dst=back)
        detail = f"hands the work back to {back.name}, an earlier issuer in the chain"
        self._deliver(
            e,
            "cycle",
            variant,
            payload=payload,
            octets=octets,
            to=back,
            at=t + self.sim.lat(),
            detail=detail,
            chain=self._lineage(e),
        )

    def _too_deep(self, e: Edge, variant: str | None, t: int) -> None:
        """A relay that went one hop too far: 16 offers in the chain, 17 with this one."""
        chain = self._lineage(e)
        taken = e.path_agents()
        relays = [a for a in self.cast.agents if a.iss not in taken] or list(self.cast.agents)
        self.rng.shuffle(relays)
        src, prev, iat = e.dst, e.run.digest, t
        for i in range(16 - len(chain)):
            nxt = relays[i % len(relays)]
            _, octets = self.sim.sign_offer(src, nxt, iat=iat, lifetime=120, prev=prev)
            chain.append(octets)
            src, prev, iat = nxt, handoff_digest(octets), iat + 1
        to = next((a for a in relays if a is not src), e.dst)
        payload, octets = self.sim.sign_offer(src, to, iat=iat, lifetime=120, prev=prev)
        self._deliver(
            e,
            "too-deep",
            variant,
            payload=payload,
            octets=octets,
            to=to,
            at=iat + self.sim.lat(),
            detail="relayed through 17 hops; the most is 16",
            chain=chain,
        )

    def _dialog_mismatch(self, e: Edge, variant: str | None, t: int) -> None:
        to = self._target(e)
        other = f"ctx-{self.rng.getrandbits(48):012x}"
        payload, octets = self._offer(e, t, dst=to, dialog=other)
        self._deliver(
            e,
            "policy",
            variant,
            payload=payload,
            octets=octets,
            to=to,
            at=t + self.sim.lat(),
            detail=f"signed for dialog {other}, carried in {self.sim.dialog}",
            chain=self._maybe_chain(e),
            record_dialog=True,
        )

    def _ref_mismatch(self, e: Edge, variant: str | None, t: int) -> None:
        name, old = self.sim.new_object("spec.md")
        new = old + b"edited after the offer was signed\n"
        ref: dict[str, Any] = {"kind": "digest", "digest": hashlib.sha256(old).digest()}
        if variant == "salted-digest":
            salt = self.rng.randbytes(16)
            ref.update(kind="salted-digest", digest=hashlib.sha256(salt + old).digest())
            self.sim.out.objects.append((name + ".salt", salt))
        ref["name"] = name
        self.sim.out.objects.append((name, new))
        to = self._target(e)
        payload, octets = self._offer(e, t, dst=to, refs=[ref])
        self._deliver(
            e,
            "ref-mismatch",
            variant,
            payload=payload,
            octets=octets,
            to=to,
            at=t + self.sim.lat(),
            detail=f"{name} changed after the offer named its digest",
            chain=self._maybe_chain(e),
        )
