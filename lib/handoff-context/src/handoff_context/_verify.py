"""The receiver's check pipeline (profile §6, §7, §5), producing profile §11 verdicts.

Each check is one small function named after it, called in the spec's order; the first
failure ends processing and the checks after it are reported ``not-run``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import cast

from handoff_context import _cose as cose
from handoff_context import _jws as jws
from handoff_context._chain import check_chain, check_too_deep
from handoff_context._encoding import MAX_ELEMENT_OCTETS, handoff_digest
from handoff_context._frozen import quick_init
from handoff_context._handoff import HandoffObject, StatusObject, parse_object
from handoff_context._memory import (
    InMemoryState,
    OfferIndex,
    ReplayMemory,
    SeenStatuses,
    SignatureCache,
    replay_result,
)
from handoff_context._model import (
    _JWS,
    Element,
    Form,
    Offer,
    Status,
    form_of,
    is_expired,
    status_parties,
)
from handoff_context._refs import ObjectIndex, RefPolicy, check_refs
from handoff_context._signature import verify_element
from handoff_context._trust import TrustStore
from handoff_context._verdict import (
    _ACCEPT,
    _NOT_CHECKED,
    _PASS,
    OFFER_CHECKS,
    STATUS_CHECKS,
    ChainReport,
    CheckResult,
    Equivocation,
    Outcome,
    Result,
    Verdict,
)
from handoff_context.errors import CheckFailed, EmbeddedKeyError, MalformedError, Reason


@dataclass(frozen=True, slots=True)
class Policy:
    """Receiver policy shared by every element of a run (profile §6, §7, §12)."""

    skew: int = 60
    max_lifetime: int = 300
    max_chain: int = 16
    ref_policy: RefPolicy = RefPolicy.NONE
    # A deployment may refuse elements below the profile's 64 KiB ceiling (profile §1.2).
    max_element: int = MAX_ELEMENT_OCTETS


@quick_init
@dataclass(frozen=True, slots=True)
class Context:
    """Per-item facts: who received it, when, and in which host dialog (profile §10)."""

    now: int
    receiver: str | None = None
    dialog: str | None = None


@functools.lru_cache(maxsize=1024)
def parse_element(octets: bytes, form: Form) -> Element:
    """Parse one element in its form. Raises MalformedError or CheckFailed(untrusted-key).

    Elements are immutable, so the last ones parsed are kept: ingest meets the same octets
    several times in one item (its lock keys, the checks, the chain, the stored offer a
    status names), and a parse costs about as much as a signature check."""
    return jws.parse(octets) if form is _JWS else cose.parse(octets)


class _VerifiedCache:
    """The default signature cache (profile §6.1): the (digest, trust fingerprint) pairs whose
    signature verified, most recent ``size`` of them. Whether a signature verifies under a
    trust store is a fact of the octets alone, so a hit can never change a verdict; it only
    spares the work. Without it a capture of k bundles, each carrying the chain before it,
    cost k(k+1)/2 verifications instead of k."""

    def __init__(self, size: int = 65_536) -> None:
        self.size = size
        self._pairs: OrderedDict[tuple[bytes, str], None] = OrderedDict()

    def verified(self, digest: bytes, trust_fingerprint: str) -> bool:
        pair = (digest, trust_fingerprint)
        if pair in self._pairs:
            self._pairs.move_to_end(pair)
            return True
        return False

    def mark_verified(self, digest: bytes, trust_fingerprint: str) -> None:
        self._pairs[(digest, trust_fingerprint)] = None
        if len(self._pairs) > self.size:
            self._pairs.popitem(last=False)


def _serves(state: object, *methods: str) -> bool:
    return all(callable(getattr(state, m, None)) for m in methods)


class _Stop(Exception):
    """Ends the pipeline after the failing check has been recorded."""


@dataclass
class _Run:
    verdict: Verdict
    names: tuple[str, ...]
    done: int = 0

    def record(self, check: str, result: Result, detail: str | None = None) -> None:
        assert self.names[self.done] == check, "checks must run in the spec's order"
        self.verdict.checks.append(CheckResult(check, result, detail=detail))
        self.done += 1

    def fail(self, check: str, reason: Reason, detail: str) -> _Stop:
        assert self.names[self.done] == check, "checks must run in the spec's order"
        self.verdict.checks.append(CheckResult(check, Result.FAIL, reason, detail))
        self.done += 1
        self.verdict.outcome = Outcome.REJECT
        self.verdict.reason = reason
        self.verdict.detail = detail
        return _Stop()

    def finish(self) -> Verdict:
        for name in self.names[self.done :]:
            self.verdict.checks.append(CheckResult(name, Result.NOT_RUN))
        self.done = len(self.names)
        return self.verdict

    def fork(self) -> _Run:
        """The run so far, apart: what follows in one does not show in the other (taken
        before the replay memory is asked, when no chain or ref report is filled in yet)."""
        verdict = self.verdict
        chain = verdict.chain
        copied = dataclasses.replace(
            verdict,
            checks=list(verdict.checks),
            chain=None if chain is None else dataclasses.replace(chain, elements=[]),
            refs=[],
        )
        return _Run(copied, self.names, self.done)


@quick_init
@dataclass(frozen=True, slots=True)
class Judged:
    """One element judged once, with and without the replay memory (profile §6.4).

    ``verdict`` is what ``verify_object`` reports. ``without_replay`` is the verdict the
    element would get from a receiver that had seen nothing before: the replay check passes
    and the checks after it run. The two are the same object unless the verdict depends on
    the memory (a retransmission, or an equivocation), which is what a store derives hop
    state and flags from, so that they do not depend on the order elements arrived in."""

    verdict: Verdict
    without_replay: Verdict

    @property
    def depends_on_replay(self) -> bool:
        """True when the verdict says more about the memory than about the element."""
        return self.verdict is not self.without_replay


@dataclass
class Verifier:
    """Judges elements one after another against one trust store, policy and memory."""

    trust: TrustStore
    policy: Policy = field(default_factory=Policy)
    objects: ObjectIndex = field(default_factory=ObjectIndex)
    replay: ReplayMemory = field(default_factory=InMemoryState)
    offers: OfferIndex | None = None
    statuses: SeenStatuses | None = None
    signature_cache: SignatureCache | None = None

    def __post_init__(self) -> None:
        # One state object (InMemoryState, FileState) can serve every role; fall back to
        # the replay object when it does, otherwise to fresh in-memory stores.
        if self.offers is None:
            serves = _serves(self.replay, "get_offer", "add_offer")
            self.offers = cast(OfferIndex, self.replay) if serves else InMemoryState()
        if self.statuses is None:
            serves = _serves(self.replay, "has_status", "add_status")
            self.statuses = cast(SeenStatuses, self.replay) if serves else InMemoryState()
        if self.signature_cache is None:
            self.signature_cache = _VerifiedCache()

    def check_signature(self, element: Element) -> None:
        """Profile §6.1, through the cache when one is configured. Raises CheckFailed."""
        cache, fingerprint = self.signature_cache, self.trust.fingerprint
        if cache is not None and cache.verified(element.digest, fingerprint):
            return
        verify_element(element, self.trust, skew=self.policy.skew)
        if cache is not None:
            cache.mark_verified(element.digest, fingerprint)

    # -- entry points --------------------------------------------------------------------

    def remember_offer(self, octets: bytes) -> Element:
        """Make an offer known without judging it: one this party signed itself, so that
        the statuses answering it can be judged (otherwise they stay ``pending``). Raises
        MalformedError when the octets are not an offer (JWS or COSE)."""
        element = parse_element(octets, form_of(octets))
        if not element.is_offer:
            raise MalformedError("remember_offer takes an offer, not a status")
        assert self.offers is not None
        self.offers.add_offer(element)
        return element

    def verify_value(self, value: object, ctx: Context, *, source: str) -> Verdict:
        """Judge a handoff or status object as found in a carrier."""
        try:
            obj = parse_object(value, max_element=self.policy.max_element)
        except MalformedError as exc:
            return Verdict(source=source, element=None, reason=Reason.MALFORMED, detail=exc.detail)
        return self.verify_object(obj, ctx, source=source)

    def verify_object(
        self, obj: HandoffObject | StatusObject, ctx: Context, *, source: str
    ) -> Verdict:
        if isinstance(obj, StatusObject):
            return self.verify_status(obj.status, obj.form, ctx, source=source)
        return self.verify_offer(obj, ctx, source=source)

    def judge_object(
        self, obj: HandoffObject | StatusObject, ctx: Context, *, source: str
    ) -> Judged:
        """``verify_object``'s verdict and, in the same pass, the one the element would get
        without the replay memory (``Judged``): each check runs once. The memories change
        as ``verify_object`` changes them; the checks run past a retransmission or an
        equivocation may also make the carried chain's offers known (``OfferIndex``), as
        they would for a receiver that had not seen the element before."""
        if isinstance(obj, StatusObject):
            return self._status(obj.status, obj.form, ctx, source, apart=True)
        return self._offer(obj, ctx, source, apart=True)

    # -- offers (profile §6) ----------------------------------------------------------------

    def verify_offer(self, obj: HandoffObject, ctx: Context, *, source: str) -> Verdict:
        return self._offer(obj, ctx, source, apart=False).verdict

    def _offer(self, obj: HandoffObject, ctx: Context, source: str, *, apart: bool) -> Judged:
        """The offer checks; ``apart``: past a replay verdict, go on without the memory."""
        verdict = Verdict(source=source, element="offer", form=obj.form._value_)
        verdict.chain = ChainReport(
            carried=obj.chain_carried, length=len(obj.chain) + 1, partial=False
        )
        run = _Run(verdict, OFFER_CHECKS)
        reported: Verdict | None = None  # set when the memory decided the verdict
        try:
            element = self._parse_as(obj.offer, obj.form, Offer, run)
            offer = element.payload
            assert isinstance(offer, Offer)
            self._name(verdict, offer)
            self._too_deep(obj, run)
            self._signature(element, run)
            self._audience(offer, ctx, run)
            self._freshness(offer, ctx, run)
            first, recorded = self.replay.remember(element)
            evidence = replay_result(first, element)
            if evidence is None and recorded:
                run.record("replay", _PASS)
            else:
                apart_run = run.fork() if apart else None
                self._replay(element, evidence, run)
                reported = run.finish()
                if apart_run is None:
                    return Judged(reported, reported)
                # Without the memory the element is seen for the first time (§6.4).
                run = apart_run
                run.record("replay", _PASS)
            self._dialog(offer, ctx, run)
            self._chain(element, obj, ctx, run)
            self._refs(offer, run)
        except _Stop:
            return _judged(reported, run.finish())
        run.verdict.outcome = _ACCEPT
        return _judged(reported, run.finish())

    @staticmethod
    def _name(verdict: Verdict, payload: Offer | Status) -> None:
        """Say which element the verdict is about (profile §11 iss, aud, hop)."""
        verdict.iss, verdict.aud, verdict.hop = payload.iss, payload.aud, payload.hop
        if isinstance(payload, Offer):
            verdict.dialog = payload.dialog
        else:
            verdict.offer, verdict.state = payload.offer, payload.state

    def _parse_as(self, octets: bytes, form: Form, kind: type, run: _Run) -> Element:
        # The digest names the octets even when they do not parse, so a rejected element
        # can still be found and deduplicated; an element that parses carries it (the
        # SHA-256 of the same octets, taken once, by its parser).
        try:
            element = parse_element(octets, form)
        except MalformedError as exc:
            run.verdict.digest = handoff_digest(octets)
            run.verdict.reason, run.verdict.detail = Reason.MALFORMED, exc.detail
            raise _Stop() from exc
        except EmbeddedKeyError as exc:  # a key carried inside the message (profile §2)
            run.verdict.digest = handoff_digest(octets)
            if isinstance(exc.payload, Offer | Status):
                self._name(run.verdict, exc.payload)
            raise run.fail("signature", exc.reason, exc.detail) from exc
        run.verdict.digest = element.digest
        if not isinstance(element.payload, kind):
            found = element.payload.type.value
            run.verdict.reason = Reason.MALFORMED
            run.verdict.detail = f"expected a {kind.__name__.lower()}, found a {found}"
            raise _Stop()
        return element

    def _too_deep(self, obj: HandoffObject, run: _Run) -> None:
        # Profile §7 [profile]: before any signature work; reported under the chain check.
        try:
            check_too_deep(len(obj.chain), self.policy.max_chain)
        except CheckFailed as exc:
            for name in OFFER_CHECKS[: OFFER_CHECKS.index("chain")]:
                run.record(name, Result.NOT_RUN)
            raise run.fail("chain", exc.reason, exc.detail) from exc

    def _signature(self, element: Element, run: _Run) -> None:
        try:
            self.check_signature(element)
        except CheckFailed as exc:
            raise run.fail("signature", exc.reason, exc.detail) from exc
        assert self.offers is not None
        if element.is_offer:
            self.offers.add_offer(element)
        run.record("signature", _PASS)

    def _audience(self, offer: Offer, ctx: Context, run: _Run) -> None:
        if ctx.receiver is None:
            run.record("audience", _NOT_CHECKED, "no receiver identifier known")
        elif offer.aud != ctx.receiver:
            raise run.fail(
                "audience",
                Reason.WRONG_AUDIENCE,
                f"aud {offer.aud!r} is not the receiver {ctx.receiver!r}",
            )
        else:
            run.record("audience", _PASS)

    def _freshness(self, offer: Offer, ctx: Context, run: _Run) -> None:
        skew = self.policy.skew
        if offer.iat > ctx.now + skew:
            raise run.fail(
                "freshness",
                Reason.STALE,
                f"iat {offer.iat} is in the future at {ctx.now} (skew {skew} s)",
            )
        if is_expired(offer.exp, now=ctx.now, skew=skew):
            raise run.fail(
                "freshness",
                Reason.STALE,
                f"expired at {offer.exp}, received at {ctx.now} (skew {skew} s)",
            )
        lifetime = offer.exp - offer.iat
        if lifetime > self.policy.max_lifetime:
            raise run.fail(
                "freshness",
                Reason.POLICY,
                f"lifetime {lifetime} s exceeds the maximum {self.policy.max_lifetime} s",
            )
        run.record("freshness", _PASS)

    @staticmethod
    def _replay(element: Element, evidence: Equivocation | None, run: _Run) -> None:
        """The verdict the replay memory decides (profile §6.4): a retransmission (the
        pipeline stops without a rejection) or an equivocation."""
        if evidence is None:
            run.record("replay", _PASS)
            run.verdict.outcome = Outcome.DUPLICATE
            run.verdict.detail = "retransmission: the same octets were seen before"
            return
        run.verdict.equivocation = evidence
        run.fail(
            "replay",
            Reason.EQUIVOCATION,
            f"({element.payload.iss}, {element.payload.hop}) was first seen with another "
            f"element ({evidence.variant.value} differs)",
        )

    def _dialog(self, offer: Offer, ctx: Context, run: _Run) -> None:
        if ctx.dialog is None:
            run.record("dialog", _NOT_CHECKED, "the carrier's dialog is not known")
        elif offer.dialog != ctx.dialog:
            raise run.fail(
                "dialog",
                Reason.POLICY,
                f"dialog {offer.dialog!r} is not the carrier's {ctx.dialog!r}",
            )
        else:
            run.record("dialog", _PASS)

    def _chain(self, element: Element, obj: HandoffObject, ctx: Context, run: _Run) -> None:
        offer = element.payload
        assert isinstance(offer, Offer) and run.verdict.chain is not None
        if not obj.chain:
            if offer.prev is not None:
                run.verdict.chain.partial = True
                run.record("chain", _NOT_CHECKED, "prev is set but no chain is carried")
            else:
                run.record("chain", _PASS)
            return
        assert self.offers is not None
        try:
            check_chain(
                element,
                obj.chain,
                parse=lambda octets: parse_element(octets, obj.form),
                verify_signature=self.check_signature,
                receiver=ctx.receiver,
                skew=self.policy.skew,
                report=run.verdict.chain,
                on_verified=self.offers.add_offer,
            )
        except CheckFailed as exc:
            raise run.fail("chain", exc.reason, exc.detail) from exc
        run.record("chain", _PASS)

    def _refs(self, offer: Offer, run: _Run) -> None:
        reports, reason, detail = check_refs(offer.refs, self.policy.ref_policy, self.objects)
        run.verdict.refs = reports
        if reason is not None:
            raise run.fail("refs", reason, detail or "")
        if not offer.refs or self.policy.ref_policy is RefPolicy.NONE:
            run.record("refs", _NOT_CHECKED)
        else:
            run.record("refs", _PASS)

    # -- statuses (profile §6.8) ----------------------------------------------

    def verify_status(self, octets: bytes, form: Form, ctx: Context, *, source: str) -> Verdict:
        return self._status(octets, form, ctx, source, apart=False).verdict

    def _status(
        self, octets: bytes, form: Form, ctx: Context, source: str, *, apart: bool
    ) -> Judged:
        """The status checks; ``apart``: past a retransmission, go on without the memory."""
        verdict = Verdict(source=source, element="status", form=form._value_)
        run = _Run(verdict, STATUS_CHECKS)
        reported: Verdict | None = None  # set when the memory decided the verdict
        try:
            element = self._parse_as(octets, form, Status, run)
            status = element.payload
            assert isinstance(status, Status)
            self._name(verdict, status)
            self._signature(element, run)
            assert self.statuses is not None
            if self.statuses.has_status(element.digest):
                apart_run = run.fork() if apart else None
                verdict.outcome = Outcome.DUPLICATE
                verdict.detail = "retransmission: the same status octets were seen before"
                reported = run.finish()
                if apart_run is None:
                    return Judged(reported, reported)
                run = apart_run
            offer = self._status_offer(status, run)
            if offer is None:
                run.verdict.outcome = Outcome.PENDING
                run.verdict.detail = "the offer this status names is not known (yet)"
                return _judged(reported, run.finish())
            if reported is None:
                # Remembered only once judged: a pending status is judged again later.
                self.statuses.add_status(element.digest)
            self._status_parties(status, offer, run)
        except _Stop:
            return _judged(reported, run.finish())
        run.verdict.outcome = _ACCEPT
        return _judged(reported, run.finish())

    def _status_offer(self, status: Status, run: _Run) -> Offer | None:
        assert self.offers is not None
        known = self.offers.get_offer(status.offer)
        if known is None:
            run.record("offer", _NOT_CHECKED, "offer not known")
            return None
        offer = known.payload
        assert isinstance(offer, Offer)
        if offer.hop != status.hop:
            raise run.fail(
                "offer",
                Reason.POLICY,
                f"hop {status.hop!r} is not the named offer's hop {offer.hop!r}",
            )
        run.verdict.dialog = offer.dialog
        run.record("offer", _PASS)
        return offer

    def _status_parties(self, status: Status, offer: Offer, run: _Run) -> None:
        # Profile §1.2: the delegate answers, except that the delegator cancels.
        want_iss, want_aud = status_parties(status.state, delegator=offer.iss, delegate=offer.aud)
        who = "the delegator (canceled)" if status.state.from_delegator else "the delegate"
        if status.iss != want_iss or status.aud != want_aud:
            raise run.fail(
                "parties",
                Reason.POLICY,
                f"a {status.state.value} status must come from {who} {want_iss!r} "
                f"to {want_aud!r}, not from {status.iss!r} to {status.aud!r}",
            )
        run.record("parties", _PASS)


def _judged(reported: Verdict | None, verdict: Verdict) -> Judged:
    return Judged(verdict if reported is None else reported, verdict)


@dataclass
class Session:
    """One run over many items (a ``verify`` call, one ingest request): verdicts come out in
    input order, and a status whose offer appears later in the same run is judged once the
    offer is known, so ``pending`` is left only for offers that never appear (profile §11)."""

    verifier: Verifier
    verdicts: list[Verdict] = field(default_factory=list)
    _pending: dict[bytes, list[tuple[int, object, Context]]] = field(default_factory=dict)

    def add_verdict(self, verdict: Verdict) -> None:
        self.verdicts.append(verdict)

    def add(self, value: object, ctx: Context, *, source: str) -> Verdict:
        verdict = self.verifier.verify_value(value, ctx, source=source)
        index = len(self.verdicts)
        self.verdicts.append(verdict)
        if verdict.outcome is Outcome.PENDING and verdict.offer is not None:
            self._pending.setdefault(verdict.offer, []).append((index, value, ctx))
        elif verdict.element == "offer" and self._pending:
            self._resolve()
        return verdict

    def _resolve(self) -> None:
        offers = self.verifier.offers
        assert offers is not None
        for digest in [d for d in self._pending if offers.get_offer(d) is not None]:
            for index, value, ctx in self._pending.pop(digest):
                source = self.verdicts[index].source
                self.verdicts[index] = self.verifier.verify_value(value, ctx, source=source)
