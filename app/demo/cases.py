"""Envelope handoffs in the demo (docs/envelopes.md, issue 7): cases that pass through several
agents by accept-then-release, with the ownership epoch going up at every acceptance.

A case is planned as a list of ownership moves; each move may carry one fault, dealt from
its own shuffled deck so that every envelope fault kind appears once a run has
``len(ENVELOPE_FAULTS)`` of them. Clean traffic follows the pattern exactly: the sender
logs its intent (a write at its epoch), sends one message with the envelope and its
references, the receiver answers within minutes (now and then with a rejection, after
which the sender tries another agent at the same epoch), the sender marks the case handed
off after the acceptance, and only the new owner writes and acts from then on (a case
may come back to an agent that owned it before). Clean
references verify (their object is in X.objects/) or are unverifiable (no object); none is
expired, mismatched or without a hash; every fact names its source.

Faults, each made so that nothing else is wrong with the case:

- ``two-owners``: the old owner writes (``stale-write``, applied: nothing fenced it) or
  acts (``stale-act``) with its old epoch after the acceptance, or the sender offers the
  case to two agents at once and both accept the same epoch (``double-accept``);
- ``release-before-accept``: the sender's handed-off mark comes before the acceptance;
- ``lost-acceptance``: nobody answers, the sender keeps acting; ``no-owner``: nobody
  answers and the sender goes quiet (both end the case);
- ``stale-epoch``: a handoff with an epoch one ``behind`` or ``ahead`` of the ledger's,
  which the receiver rejects before the sender retries correctly;
- ``version-drift`` (a v3 envelope) and ``invalid-envelope`` (``missing-goal``,
  ``long-summary``, ``two-envelopes``): rejected, then retried as a valid v2 handoff;
- ``expired-reference`` (``amz``, ``expires``, ``sas``), ``reference-mismatch``
  (``sha256``, ``bytes``), ``missing-hash``: one bad url part in an accepted handoff;
- ``context-id-reuse``: the sender presents the context id its own predecessor used with it;
- ``transcript-dump``: the whole conversation inline as text; ``unsourced-fact``: one fact
  with a ``null`` or ``missing`` source.

The answer key line of each: ``{"fault", "variant", "iss", "hop", "offer": null,
"dialog", "case", "detail"}`` with ``iss`` the sending agent of the handoff concerned,
``hop`` its handoff id (for ``double-accept``: the second acceptor and the handoff it
accepted) and ``dialog`` the case id (the reused context id for
``context-id-reuse``).
"""

from __future__ import annotations

import hashlib
import itertools
import random
import time
from dataclasses import dataclass
from typing import Any

from handoff_context import Form

from app.demo import envelope_wire as wire
from app.demo.agents import Agent, Cast
from app.demo.carry import A2A_0_3, A2A_1_0
from app.demo.simulate import DialogOutput, Record

ENVELOPE_FAULTS = (
    "two-owners",
    "release-before-accept",
    "lost-acceptance",
    "no-owner",
    "stale-epoch",
    "expired-reference",
    "reference-mismatch",
    "missing-hash",
    "version-drift",
    "invalid-envelope",
    "context-id-reuse",
    "transcript-dump",
    "unsourced-fact",
)
VARIANTS: dict[str, tuple[str | None, ...]] = {
    "two-owners": ("stale-write", "stale-act", "double-accept"),
    "stale-epoch": ("behind", "ahead"),
    "expired-reference": ("amz", "expires", "sas"),
    "reference-mismatch": ("sha256", "bytes"),
    "invalid-envelope": ("missing-goal", "long-summary", "two-envelopes"),
    "unsourced-fact": ("null", "missing"),
}
NEEDS_LEDGER = frozenset({"stale-epoch", "context-id-reuse"})  # an earlier acceptance
ENDS_CASE = frozenset({"lost-acceptance", "no-owner"})
RETRIED = frozenset({"stale-epoch", "version-drift", "invalid-envelope"})  # rejected first
# The receiver parameters the faults are built against (docs/envelopes.md defaults).
ACCEPT_WINDOW = 3600
TRANSCRIPT_BYTES = 8192
URL_LIFETIME = 86400  # a day, as the seed suggests for queued handoffs

_REFERENCE_DETAIL = {
    "expired-reference": "a signed URL that expired before the receiver got it",
    "reference-mismatch": "the object differs from the reference's sha256 or size",
    "missing-hash": "a url reference without sha256",
}
_FACTS = (
    ("account_id", "auth-system", True),
    ("invoice_id", "billing-db", True),
    ("payment_ids", "payments-api", True),
    ("plan", "crm", True),
    ("disputed_amount", "customer", False),
    ("preferred_contact", "customer", False),
)
_GOALS = (
    "Refund the duplicate card payment",
    "Resolve the disputed invoice",
    "Restore access to the customer's workspace",
    "Correct the billing address on the account",
)
_STEPS = ("verified the account", "found the payments", "confirmed the customer's identity")
_NEXT = ("issue the refund", "confirm with the customer", "close the case")


class EnvelopeDeck:
    """Envelope fault kinds from a shuffled deck (every kind once per round)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.cards: list[str] = []

    def deal(self) -> str:
        if not self.cards:
            self.cards = list(ENVELOPE_FAULTS)
            self.rng.shuffle(self.cards)
        return self.cards.pop()


def plan_case(rng: random.Random, deck: EnvelopeDeck, fault_rate: float) -> list[str | None]:
    """The ownership moves of one case, each with its fault or None. A fault that needs an
    earlier acceptance gets a clean move before it; a lost handoff is the case's last."""
    plan: list[str | None] = []
    for _ in range(rng.choice((2, 3, 3, 4, 5))):
        fault = deck.deal() if rng.random() < fault_rate else None
        if fault in NEEDS_LEDGER and not plan:
            plan.append(None)
        plan.append(fault)
        if fault in ENDS_CASE:
            break
    return plan


@dataclass
class Sent:
    """One handoff message as sent: what the answer and the answer key need."""

    handoff_id: str
    receiver: Agent
    kind: str
    context_id: str
    request_id: int
    task_id: str
    at: int  # when the receiver got it


class CaseSim:
    """Simulates one case through its planned moves."""

    def __init__(
        self, rng: random.Random, cast: Cast, *, index: int, number: int, start: int
    ) -> None:
        self.rng = rng
        self.cast = cast
        self.case_id = f"case-{number:05d}-{rng.getrandbits(24):06x}"
        self.out = DialogOutput(index, self.case_id, Form.JWS, start, case=True)
        self.owner = rng.choice(cast.agents)
        self.epoch = rng.randint(0, 3)
        self.used: set[str] = set()
        self.context: str | None = None  # the context id the owner got the case under
        self._seq = itertools.count(1)
        self.goal = rng.choice(_GOALS)

    def run(self, plan: list[str | None]) -> DialogOutput:
        t = self.out.start
        for fault in plan:
            variant = self.rng.choice(VARIANTS.get(fault or "", (None,))) if fault else None
            t = self.move(t, fault, variant)
            if t < 0:
                break
            t += self.rng.randint(60, 900)
        self.out.records.sort(key=lambda r: (r.at, r.seq))
        return self.out

    # -- emitting ------------------------------------------------------------------------

    def emit(self, at: int, payload: dict[str, Any], receiver: Agent | None = None) -> None:
        record: dict[str, Any] = {"received_at": at}
        if receiver is not None:
            record["received_by"] = receiver.iss
        record["payload"] = payload
        self.out.records.append(Record(at, len(self.out.records), record))

    def event(self, agent: Agent, action: str, at: int, **fields: Any) -> None:
        self.emit(at, wire.case_event(self.case_id, agent.iss, action, at=at, **fields))

    def answer_key(
        self, fault: str, variant: str | None, *, sent: Sent, detail: str, iss: Agent | None = None
    ) -> None:
        self.out.answers.append(
            {
                "fault": fault,
                "variant": variant,
                "iss": (iss or self.owner).iss,
                "hop": sent.handoff_id,
                "offer": None,
                "dialog": sent.context_id if fault == "context-id-reuse" else self.case_id,
                "case": self.case_id,
                "detail": detail,
            }
        )

    # -- one ownership move --------------------------------------------------------------

    def _other(self, *not_these: Agent) -> Agent:
        """An agent other than the owner and ``not_these`` (a cast has at least four)."""
        return self.rng.choice(
            [a for a in self.cast.agents if a.iss != self.owner.iss and a not in not_these]
        )

    def move(self, t: int, fault: str | None, variant: str | None) -> int:
        """Hand the case from its owner to another agent; returns when the move is over, or
        -1 when it ends the case (a lost handoff)."""
        rng = self.rng
        receiver = self._other()
        if rng.random() < 0.6:
            self.event(
                self.owner,
                "write",
                t,
                epoch=self.epoch,
                outcome="applied",
                detail="handoff intent recorded",
            )
        t += rng.randint(1, 20)
        if fault in RETRIED:
            t = self.refused(t, receiver, fault, variant) + rng.randint(5, 120)
        elif fault is None and rng.random() < 0.12:
            # Clean: the first choice refuses the case; the owner keeps it and asks another.
            t = self.refused(t, self._other(receiver), None, None) + rng.randint(5, 120)
        message_fault = None if fault in RETRIED else fault
        sent = self.send(t, receiver, fault=message_fault, variant=variant)
        if fault == "lost-acceptance":
            act = sent.at + rng.randint(120, 900)
            self.event(
                self.owner,
                "act",
                act,
                epoch=self.epoch,
                outcome="applied",
                detail="answered the customer while waiting",
            )
            detail = (
                f"no answer from {receiver.name} within {ACCEPT_WINDOW} s; the sender kept acting"
            )
            self.answer_key(fault, variant, sent=sent, detail=detail)
            return -1
        if fault == "no-owner":
            detail = f"no answer from {receiver.name}, and the sender stopped acting"
            self.answer_key(fault, variant, sent=sent, detail=detail)
            return -1
        if fault == "two-owners" and variant == "double-accept":
            return self.double_accept(sent, variant)
        return self.accepted(sent, fault, variant)

    def accepted(self, sent: Sent, fault: str | None, variant: str | None) -> int:
        rng = self.rng
        new_epoch = self.epoch + 1
        at = sent.at + rng.randint(2, 300)
        if fault == "release-before-accept":
            mark = sent.at + rng.randint(0, 1)
            at = max(at, mark + 5)
            detail = f"handed-off mark {at - mark} s before the acceptance arrived"
            self.answer_key(fault, variant, sent=sent, detail=detail)
        else:
            mark = at + rng.randint(1, 30)
        data = {
            "accepted": True,
            "case_id": self.case_id,
            "epoch": new_epoch,
            "handoff_id": sent.handoff_id,
        }
        self.emit(at, self.reply(sent, data), self.owner)
        self.event(self.owner, "handed-off", mark, epoch=self.epoch, detail="status pointer only")
        end = max(at, mark)
        for _ in range(rng.choice((1, 1, 2))):
            end += rng.randint(30, 300)
            action = rng.choice(("write", "act"))
            self.event(
                sent.receiver,
                action,
                end,
                epoch=new_epoch,
                outcome="applied",
                detail="worked on the case",
            )
        if fault == "two-owners":
            # Nothing fences it: the system of record applies the write, or does not say.
            stale = at + rng.randint(600, 3600)
            action = "write" if variant == "stale-write" else "act"
            outcome = "applied" if action == "write" else None
            self.event(
                self.owner,
                action,
                stale,
                epoch=self.epoch,
                outcome=outcome,
                detail="retry job with a stale cache",
            )
            accepted = f"{sent.receiver.name} accepted epoch {new_epoch}"
            detail = f"{action} at epoch {self.epoch} after {accepted}"
            self.answer_key(fault, variant, sent=sent, detail=detail)
            end = max(end, stale)
        self.owner, self.epoch = sent.receiver, new_epoch
        return end

    def double_accept(self, sent: Sent, variant: str | None) -> int:
        """The sender offers the case to a second agent before the first answers, and both
        accept the same epoch: the first acceptance wins, the second owner is a second."""
        other = self._other(sent.receiver)
        second = self.send(sent.at + self.rng.randint(1, 5), other, fault=None, variant=None)
        self.context = sent.context_id  # the case goes on with the first receiver
        first_at = second.at + self.rng.randint(2, 60)
        second_at = first_at + self.rng.randint(1, 60)
        for s, at in ((sent, first_at), (second, second_at)):
            data = {
                "accepted": True,
                "case_id": self.case_id,
                "epoch": self.epoch + 1,
                "handoff_id": s.handoff_id,
            }
            self.emit(at, self.reply(s, data), self.owner)
        detail = f"{other.name} also accepted epoch {self.epoch + 1}, after {sent.receiver.name}"
        self.answer_key("two-owners", variant, sent=second, detail=detail, iss=other)
        mark = second_at + self.rng.randint(1, 30)
        self.event(self.owner, "handed-off", mark, epoch=self.epoch, detail="status pointer only")
        self.owner, self.epoch = sent.receiver, self.epoch + 1
        return mark

    def reply(self, sent: Sent, data: dict[str, Any]) -> dict[str, Any]:
        return wire.answer(
            sent.kind,
            request_id=sent.request_id,
            task_id=sent.task_id,
            context_id=sent.context_id,
            data=data,
        )

    def refused(self, t: int, receiver: Agent, fault: str | None, variant: str | None) -> int:
        """A handoff the receiver rejects (a fault's, or a clean refusal); returns when the
        sender has the rejection."""
        epoch = self.epoch
        if fault == "stale-epoch":
            epoch += -1 if variant == "behind" else 1
        sent = self.send(t, receiver, fault=fault, variant=variant, epoch=epoch, refs=False)
        reasons = {
            "stale-epoch": f"stale epoch {epoch}, current {self.epoch}",
            "version-drift": f"unsupported envelope type {wire.DRIFT_TYPE}",
            "invalid-envelope": "expected exactly one supported handoff envelope"
            if variant == "two-envelopes"
            else "schema: the envelope does not validate",
        }
        reason = reasons.get(fault or "", "second payment id not found in our system")
        data = {
            "accepted": False,
            "case_id": self.case_id,
            "handoff_id": sent.handoff_id,
            "reason": reason,
        }
        at = sent.at + self.rng.randint(2, 120)
        self.emit(at, self.reply(sent, data), self.owner)
        if fault is not None:
            self.answer_key(fault, variant, sent=sent, detail=reason)
        return at

    # -- the handoff message -------------------------------------------------------------

    def handoff_id(self, epoch: int) -> str:
        base = f"{self.case_id}:{epoch + 1}"
        for n in itertools.count(1):
            candidate = base if n == 1 else f"{base}.{n}"
            if candidate not in self.used:
                self.used.add(candidate)
                return candidate
        raise AssertionError("unreachable")

    def send(
        self,
        t: int,
        receiver: Agent,
        *,
        fault: str | None,
        variant: str | None,
        epoch: int | None = None,
        refs: bool = True,
    ) -> Sent:
        rng = self.rng
        kind = rng.choices((A2A_1_0, A2A_0_3), (60, 40))[0]
        epoch = self.epoch if epoch is None else epoch
        handoff_id = self.handoff_id(epoch)
        seq = next(self._seq)
        context = f"ctx-{self.case_id}-{seq}"
        if fault == "context-id-reuse" and self.context is not None:
            context = self.context
        sent = Sent(
            handoff_id=handoff_id,
            receiver=receiver,
            kind=kind,
            context_id=context,
            request_id=seq,
            task_id=f"task-{self.case_id}-{seq}",
            at=t + rng.randint(0, 2),
        )
        envelope = self.envelope(
            handoff_id, epoch, t, unsourced=variant if fault == "unsourced-fact" else None
        )
        parts = [wire.text_part(f"Handoff of case {self.case_id}. Accept or reject.", kind=kind)]
        parts += self.envelope_parts(envelope, fault, variant, kind=kind)
        if refs:
            parts += self.references(t, fault, variant, kind=kind)
        if fault == "transcript-dump":
            parts.append(wire.text_part(self.transcript(), kind=kind))
        message = wire.send(
            kind,
            request_id=sent.request_id,
            message_id=handoff_id,
            context_id=context,
            parts=parts,
            related=[],
        )
        self.emit(sent.at, message, receiver)
        if fault == "context-id-reuse":
            detail = f"context id {context} was minted for the sender, presented to {receiver.name}"
            self.answer_key(fault, variant, sent=sent, detail=detail)
        elif fault == "transcript-dump":
            self.answer_key(fault, variant, sent=sent, detail="the whole conversation inline")
        elif fault == "unsourced-fact":
            self.answer_key(fault, variant, sent=sent, detail="a fact without a source")
        elif fault in _REFERENCE_DETAIL:
            self.answer_key(fault, variant, sent=sent, detail=_REFERENCE_DETAIL[fault])
        if fault is None or fault not in RETRIED:
            self.context = context
        return sent

    def envelope(
        self, handoff_id: str, epoch: int, t: int, *, unsourced: str | None
    ) -> dict[str, Any]:
        rng = self.rng
        facts = []
        for key, source, verified in rng.sample(_FACTS, rng.randint(2, 4)):
            fact: dict[str, Any] = {"key": key, "value": self.value(key), "verified": verified}
            fact["source"] = source
            facts.append(fact)
        if unsourced == "null":
            facts[-1]["source"] = None
        elif unsourced == "missing":
            del facts[-1]["source"]
        deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t + 48 * 3600))
        return {
            "version": 2,
            "case_id": self.case_id,
            "handoff_id": handoff_id,
            "from_agent": self.owner.iss,
            "epoch": epoch,
            "goal": self.goal,
            "done": rng.sample(_STEPS, rng.randint(1, 2)),
            "remaining": rng.sample(_NEXT, rng.randint(1, 2)),
            "facts": facts,
            "open_questions": ["Was the second charge captured or only authorised?"][
                : rng.randint(0, 1)
            ],
            "constraints": {"deadline": deadline, "refund_cap": rng.choice((50, 100, 250))},
            "summary": f"Summary: {self.goal.lower()}; the customer is waiting for an answer.",
        }

    def value(self, key: str) -> Any:
        rng = self.rng
        if key == "payment_ids":
            return [f"pay_{rng.getrandbits(32):08x}" for _ in range(2)]
        if key == "disputed_amount":
            return {"amount": rng.randint(500, 20000), "currency": "EUR"}
        return f"{key.split('_')[0]}-{rng.getrandbits(24):06x}"

    def envelope_parts(
        self, envelope: dict[str, Any], fault: str | None, variant: str | None, *, kind: str
    ) -> list[dict[str, Any]]:
        if fault == "version-drift":
            drifted = dict(envelope, version=3, priority="high")
            return [wire.data_part(drifted, wire.DRIFT_TYPE, kind=kind)]
        if fault == "invalid-envelope" and variant == "missing-goal":
            envelope = {k: v for k, v in envelope.items() if k != "goal"}
        elif fault == "invalid-envelope" and variant == "long-summary":
            envelope = dict(envelope, summary="The customer said: " + "so " * 800)
        parts = [wire.data_part(envelope, wire.ENVELOPE_TYPE, kind=kind)]
        if fault == "invalid-envelope" and variant == "two-envelopes":
            second = dict(envelope, summary="A second copy of the envelope, edited.")
            parts.append(wire.data_part(second, wire.ENVELOPE_TYPE, kind=kind))
        return parts

    def transcript(self) -> str:
        lines = []
        while sum(len(line) + 1 for line in lines) <= TRANSCRIPT_BYTES + 1024:
            who = self.rng.choice(("customer", "agent"))
            lines.append(f"{who}: message {len(lines) + 1} about the charge on my card")
        return "\n".join(lines)

    # -- references ----------------------------------------------------------------------

    def references(
        self, t: int, fault: str | None, variant: str | None, *, kind: str
    ) -> list[dict[str, Any]]:
        rng = self.rng
        count = rng.choice((0, 1, 1, 2))
        if fault in ("expired-reference", "reference-mismatch", "missing-hash"):
            count = max(count, 1)
        parts = []
        for i in range(count):
            bad = fault if i == 0 else None
            parts.append(self.reference(t, bad, variant, kind=kind))
        return parts

    def reference(
        self, t: int, fault: str | None, variant: str | None, *, kind: str
    ) -> dict[str, Any]:
        rng = self.rng
        label, media = rng.choice(
            (("transcript.txt", "text/plain"), ("invoice.pdf", "application/pdf"))
        )
        name = f"{self.case_id}.{next(self._seq)}.{label}"
        content = f"{label} of {self.case_id}\n{rng.randbytes(24).hex()}\n".encode()
        metadata: dict[str, Any] = {
            "sha256": hashlib.sha256(content).hexdigest(),
            "bytes": len(content),
        }
        style = rng.choice(("amz", "expires", "sas"))
        signed_at, held = t - rng.randint(0, 300), content
        if fault == "expired-reference":
            style = variant or style
            signed_at = t - URL_LIFETIME - rng.randint(600, 7200)
        elif fault == "reference-mismatch" and variant == "sha256":
            held = content[:-2] + b"!\n"  # same size, other octets
        elif fault == "reference-mismatch":
            metadata["bytes"] = len(content) + rng.randint(1, 64)
        elif fault == "missing-hash":
            del metadata["sha256"]
        if fault is not None or rng.random() < 0.7:
            self.out.objects.append((name, held))  # else: unverifiable (the receiver has none)
        token = rng.randbytes(16).hex()
        url = wire.signed_url(
            name, style=style, signed_at=signed_at, lifetime=URL_LIFETIME, token=token
        )
        return wire.url_part(url, media, name, metadata, kind=kind)
