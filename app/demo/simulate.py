"""One dialog, simulated: every element signed at its time, wrapped in its host message,
and recorded as its receiver would capture it.

The time model: the delegator signs an offer at ``iat`` and it arrives 0-2 s later; the
delegate answers 1-3 s after that and, once accepted, hands parts on within seconds (always
inside the parent offer's life, so chains are timed consistently). Outcomes come back up
the tree once the children have answered. A canceled hop's subtree is still working when
the cancel arrives, so nothing below it has an outcome to race with.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from handoff_context import (
    Form,
    b64url_encode,
    digest_text,
    handoff_digest,
    handoff_object,
    offer_payload,
    sign_payload,
    status_object,
    status_payload,
)

from app.demo.agents import Agent, Cast
from app.demo.carry import A2A_0_3, A2A_1_0, KIND_WEIGHTS, KINDS, RAW, Channel
from app.demo.elements import high_s_twin
from app.demo.plan import Edge, Fate
from app.demo.strays import Strays

# The receiver parameters the faults are built against: `verify` and ingest defaults.
SKEW = 60
LOST_OUTCOME_AFTER = 3600
CANCEL_GRACE = 60
MAX_CHAIN = 16
LIFETIMES = (120, 180, 240, 300)
GIVE_UP = 300  # a delegator stops waiting for a lost outcome after five minutes

_TOOLS = ("run_tests", "write_patch", "review_change", "search_docs", "build_image")
_ASKS = (
    "Implement the parser change described in the ticket.",
    "Run the integration tests against the patch.",
    "Review the diff and list blocking issues.",
    "Find prior art for the retry policy.",
    "Split the migration into reviewable steps.",
)
# Task states ride in A2A Task results only where the host's last word can agree with the
# hop's final state; a canceled or disputed hop answers in reply Messages instead.
_TASK_STATE_FATES = frozenset({Fate.COMPLETE, Fate.FAIL, Fate.PARTIAL, Fate.REJECT, Fate.LOST})


@dataclass
class Record:
    """One capture record and its place in time (``seq`` keeps emission order on ties)."""

    at: int
    seq: int
    value: dict[str, Any]


@dataclass
class DialogOutput:
    index: int
    dialog: str
    form: Form
    start: int
    records: list[Record] = field(default_factory=list)
    answers: list[dict[str, Any]] = field(default_factory=list)
    objects: list[tuple[str, bytes]] = field(default_factory=list)
    case: bool = False  # an envelope case (app/demo/cases.py), not a signed dialog


@dataclass
class HopRun:
    """What the simulation made of one hop."""

    channel: Channel
    payload: dict[str, Any]
    octets: bytes
    recv: int
    accepted: int = 0
    answered: int = 0  # when the delegator received a rejection

    @property
    def digest(self) -> bytes:
        return handoff_digest(self.octets)


class DialogSim:
    """Signs and emits one planned dialog."""

    def __init__(
        self, rng: random.Random, cast: Cast, *, index: int, dialog: str, start: int, form: Form
    ) -> None:
        self.rng = rng
        self.cast = cast
        self.form = form
        self.out = DialogOutput(index=index, dialog=dialog, form=form, start=start)
        self.dialog = dialog
        self.principal = f"principal:{rng.getrandbits(40):010x}"
        self._rpc = itertools.count(1)
        self._tasks = itertools.count(1)
        self._objects = itertools.count(1)
        self.strays = Strays(self)

    def run(self, root: Edge) -> DialogOutput:
        self.start_hop(root, self.out.start)
        self.finish(root)
        self.out.records.sort(key=lambda r: (r.at, r.seq))
        return self.out

    # -- small helpers -------------------------------------------------------------------

    def lat(self) -> int:
        return self.rng.randint(0, 2)

    def new_hop(self) -> str:
        return b64url_encode(self.rng.randbytes(16))

    def channel(self, fate: Fate | None = None) -> Channel:
        kind = RAW if self.form is Form.COSE else self.rng.choices(KINDS, KIND_WEIGHTS)[0]
        a2a = kind in (A2A_1_0, A2A_0_3)
        return Channel(
            kind=kind,
            dialog=self.dialog,
            task_id=f"task-{self.out.index}-{next(self._tasks)}",
            request_id=next(self._rpc),
            next_id=lambda: next(self._rpc),
            text=self.rng.choice(_ASKS),
            tool=self.rng.choice(_TOOLS),
            task_states=a2a and fate in _TASK_STATE_FATES and self.rng.random() < 0.5,
            streaming=a2a and self.rng.random() < 0.3,
        )

    def emit(
        self, at: int, receiver: Agent, payload: dict[str, Any], *, dialog: bool | None = None
    ) -> None:
        """Record ``payload`` as received by ``receiver`` at ``at``. The capture record names
        the dialog most of the time (always when ``dialog`` is true)."""
        record: dict[str, Any] = {"received_at": at, "received_by": receiver.iss}
        if dialog or (dialog is None and self.rng.random() < 0.85):
            record["dialog"] = self.dialog
        record["payload"] = payload
        self.out.records.append(Record(at, len(self.out.records), record))

    def answer(
        self, fault: str, variant: str | None, *, iss: str, hop: str, offer: bytes, detail: str
    ) -> None:
        """One answer-key line (see the package docstring for what each member means)."""
        self.out.answers.append(
            {
                "fault": fault,
                "variant": variant,
                "iss": iss,
                "hop": hop,
                "offer": digest_text(offer),
                "dialog": self.dialog,
                "case": None,
                "detail": detail,
            }
        )

    def sign_offer(
        self,
        src: Agent,
        dst: Agent,
        *,
        iat: int,
        lifetime: int,
        prev: bytes | None,
        refs: list[dict[str, Any]] | None = None,
        dialog: str | None = None,
        grant: bytes | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        payload = offer_payload(
            iss=src.iss,
            aud=dst.iss,
            dialog=dialog or self.dialog,
            iat=iat,
            lifetime=lifetime,
            hop=self.new_hop(),
            obo=self.principal,
            grant=grant,
            prev=prev,
            refs=refs or (),
        )
        return payload, sign_payload(payload, src.signer, self.form)

    # -- refs and their objects ----------------------------------------------------------

    def new_object(self, label: str) -> tuple[str, bytes]:
        number = next(self._objects)
        name = f"{self.dialog}.{number}.{label}"
        content = f"{label} {number} of {self.dialog}\n{self.rng.randbytes(12).hex()}\n"
        return name, content.encode()

    def clean_refs(self) -> list[dict[str, Any]]:
        """Prior-context refs on about a quarter of the offers. Under ``--ref-policy
        check-available`` each is verified, unverifiable (object absent) or not-checked
        (a kind named by URI); none mismatches."""
        if self.rng.random() >= 0.25:
            return []
        refs: list[dict[str, Any]] = []
        for _ in range(self.rng.choice((1, 1, 2))):
            how = self.rng.choices(
                ("digest", "salted", "absent", "receipt", "uri"), (4, 2, 2, 1, 1)
            )
            name, content = self.new_object(("notes.md", "plan.md", "log.txt")[len(refs) % 3])
            ref: dict[str, Any] = {"kind": "digest", "digest": hashlib.sha256(content).digest()}
            if how[0] == "digest":
                ref.update(name=name, media_type="text/markdown")
                self.out.objects.append((name, content))
            elif how[0] == "salted":
                salt = self.rng.randbytes(16)
                ref.update(kind="salted-digest", name=name)
                ref["digest"] = hashlib.sha256(salt + content).digest()
                self.out.objects += [(name, content), (name + ".salt", salt)]
            elif how[0] == "absent":
                ref.update(name=name, uri=f"https://files.example/{self.dialog}/{name}")
            elif how[0] == "receipt":
                ref["kind"] = "scitt-receipt"
            else:
                ref.update(kind="https://quantumlearningmachines.com/ref-kinds/ticket", name=name)
            refs.append(ref)
        return refs

    # -- a hop's life --------------------------------------------------------------------

    def start_hop(self, e: Edge, t: int) -> None:
        """Offer, receive, accept (or reject, or stay silent), then hand parts on."""
        rng = self.rng
        grant = hashlib.sha256(rng.randbytes(24)).digest() if rng.random() < 0.3 else None
        payload, octets = self.sign_offer(
            e.src,
            e.dst,
            iat=t,
            lifetime=rng.choice(LIFETIMES),
            prev=None if e.parent is None else e.parent.run.digest,
            refs=self.clean_refs(),
            grant=grant,
        )
        e.run = HopRun(self.channel(e.fate), payload, octets, recv=t + self.lat())
        carried = e.parent is not None and rng.random() < 0.75  # else prev without chain
        chain = [x.run.octets for x in e.lineage()[:-1]] if carried else []
        wire = e.run.channel.offer(handoff_object(octets, chain))
        self.emit(e.run.recv, e.dst, wire)
        seen = e.run.recv
        if e.twin:
            self.twin(e, chain)
        if e.fate is Fate.SILENT or rng.random() < 0.08:
            # No status yet: the delegator retransmits the identical octets (profile §6.4).
            seen += rng.randint(10, 20)
            self.emit(seen, e.dst, wire)
        if e.fate is Fate.SILENT:
            return
        t = seen + rng.randint(1, 3)
        if e.fate is Fate.REJECT:
            detail = "the delegate is at capacity"
            e.run.answered = self.status(e, "rejected", t, reason="policy", detail=detail)
            return
        e.run.accepted = t
        self.status(e, "accepted", t)
        at = t
        for child in e.children:
            at += rng.randint(1, 3)
            self.start_hop(child, at)
        for stray in e.strays:
            self.strays.emit(e, stray, t + rng.randint(2, 15))

    def busy(self, e: Edge) -> int:
        """When the last hop of ``e``'s subtree was accepted."""
        return max([int(e.run.accepted), *(self.busy(c) for c in e.children)])

    def finish(self, e: Edge) -> int:
        """Collect the children's outcomes, then answer; returns when the delegator knows."""
        rng = self.rng
        if e.fate is Fate.SILENT:
            return int(e.run.payload["exp"]) + SKEW + rng.randint(1, 30)
        if e.fate is Fate.REJECT:
            return int(e.run.answered)
        ends = [e.run.accepted + rng.randint(5, 90)]
        for child in e.children:
            if child.fate in (Fate.CANCEL, Fate.NOPROP):
                ends.append(self.cancel(child, self.busy(child) + rng.randint(3, 10)))
            else:
                ends.append(self.finish(child))
        t = max(ends) + rng.randint(1, 5)
        hop, offer = e.run.payload["hop"], e.run.digest
        if e.fate is Fate.COMPLETE:
            return self.status(e, "completed", t, retransmit=rng.random() < 0.08)
        if e.fate is Fate.FAIL:
            return self.status(e, "failed", t, detail="the tests did not pass; nothing was merged")
        if e.fate is Fate.PARTIAL:
            name, content = self.new_object("commit.diff")
            refs = [{"kind": "digest", "digest": hashlib.sha256(content).digest(), "name": name}]
            detail = "failed after one commit landed; the ref names it"
            self.answer("partial-failure", None, iss=e.src.iss, hop=hop, offer=offer, detail=detail)
            return self.status(e, "failed", t, detail="one of two commits landed", refs=refs)
        if e.fate is Fate.LOST:
            detail = "accepted, then no completed or failed ever came"
            self.answer("lost-outcome", None, iss=e.src.iss, hop=hop, offer=offer, detail=detail)
            return int(e.run.accepted) + GIVE_UP
        if e.fate is Fate.CONFLICT:
            return self.conflict(e, t)
        assert e.fate is Fate.RACE, f"unexpected fate {e.fate}"
        return self.race(e, t)

    def status(
        self,
        e: Edge,
        state: str,
        iat: int,
        *,
        reason: str | None = None,
        detail: str | None = None,
        refs: list[dict[str, Any]] | None = None,
        retransmit: bool = False,
    ) -> int:
        """The delegate's signed answer, carried back to the delegator; returns its receive
        time. ``retransmit``: the delegate resends the same octets once more."""
        payload = status_payload(
            offer=e.run.payload,
            offer_octets=e.run.octets,
            state=state,
            iat=iat,
            reason=reason,
            detail=detail,
            refs=refs or (),
        )
        octets = sign_payload(payload, e.dst.signer, self.form)
        at = iat + self.lat()
        wire = e.run.channel.status(status_object(octets), state, text=detail or state)
        self.emit(at, e.src, wire)
        if retransmit:
            self.emit(at + self.rng.randint(5, 30), e.src, wire)
        return at

    def cancel_status(self, e: Edge, iat: int) -> int:
        """The delegator's signed ``canceled``, in its cancel request; returns receive time."""
        payload = status_payload(
            offer=e.run.payload, offer_octets=e.run.octets, state="canceled", iat=iat
        )
        octets = sign_payload(payload, e.src.signer, self.form)
        at = iat + self.lat()
        self.emit(at, e.dst, e.run.channel.cancel(status_object(octets)))
        return at

    def cancel(self, e: Edge, t: int) -> int:
        """Cancel ``e`` at ``t`` and let its delegate propagate (profile §8), or not."""
        received = self.cancel_status(e, t)
        late = e.fate is Fate.NOPROP and e.variant == "late"
        if e.fate is Fate.NOPROP:
            detail = (
                f"canceled; the delegate canceled its {len(e.children)} downstream offer(s) "
                f"only after the {CANCEL_GRACE} s grace"
                if late
                else f"canceled; the delegate never canceled its {len(e.children)} "
                "downstream offer(s), which ran to the end"
            )
            self.answer(
                "cancel-not-propagated",
                e.variant,
                iss=e.src.iss,
                hop=e.run.payload["hop"],
                offer=e.run.digest,
                detail=detail,
            )
        if e.fate is Fate.NOPROP and not late:
            for child in e.children:
                self.finish(child)
            return received
        for child in e.children:
            delay = CANCEL_GRACE + self.rng.randint(20, 90) if late else self.rng.randint(1, 5)
            self.cancel(child, received + delay)
        return received

    # -- faults on a hop's own elements --------------------------------------------------

    def twin(self, e: Edge, chain: list[bytes]) -> None:
        """A second offer for the same (iss, hop), received after the first."""
        payload, octets = e.run.payload, e.run.octets
        if e.twin == "content":
            shift = self.rng.randint(1, 5)
            other = sign_payload(dict(payload, iat=payload["iat"] + shift), e.src.signer, self.form)
            detail = f"a second offer for the hop, signed with iat {shift} s later"
        elif self.rng.random() < 0.5:
            other = high_s_twin(octets, self.form)
            detail = "the same offer with the ECDSA signature (r, n-s)"
        else:
            other = sign_payload(payload, e.src.signer, self.form)
            detail = "the same offer signed again instead of retransmitted"
        at = e.run.recv + self.rng.randint(2, 8)
        self.emit(at, e.dst, self.channel().offer(handoff_object(other, chain)))
        hop = payload["hop"]
        self.answer(
            "equivocation", e.twin, iss=e.src.iss, hop=hop, offer=e.run.digest, detail=detail
        )

    def conflict(self, e: Edge, t: int) -> int:
        """Two answers that cannot both be true (profile §8 status conflict)."""
        variant = e.variant
        if variant == "accept-reject":
            after = e.run.accepted + self.rng.randint(1, 3)  # signed strictly after accepted
            self.status(e, "rejected", after, reason="policy", detail="a second worker refused")
            end = self.status(e, "completed", max(t, after + 1))
            detail = "accepted, then rejected, then completed"
        elif variant == "complete-fail":
            self.status(e, "completed", t)
            end = self.status(e, "failed", t + self.rng.randint(1, 5), detail="rollback failed")
            detail = "completed, then failed"
        else:
            self.status(e, "completed", t, detail="done")
            end = self.status(e, "completed", t + self.rng.randint(2, 6), detail="done; see report")
            detail = "two different completed statuses"
        hop, offer = e.run.payload["hop"], e.run.digest
        self.answer("status-conflict", variant, iss=e.src.iss, hop=hop, offer=offer, detail=detail)
        return end

    def race(self, e: Edge, t: int) -> int:
        """A cancel and an outcome signed a second apart, each before seeing the other."""
        if e.variant == "outcome-first":
            self.status(e, "completed", t)
            end = self.cancel_status(e, t + 1)
            detail = "completed, and canceled a second later"
        else:
            self.cancel_status(e, t)
            end = self.status(e, "completed", t + 1)
            detail = "canceled, and completed a second later"
        hop, offer = e.run.payload["hop"], e.run.digest
        self.answer("cancel-race", e.variant, iss=e.src.iss, hop=hop, offer=offer, detail=detail)
        return end
