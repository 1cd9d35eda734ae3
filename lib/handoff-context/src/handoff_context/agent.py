"""What an agent does with handoffs, whatever SDK carries them: the part of the a2a-sdk and
mcp integrations (``handoff_context.a2a``, ``handoff_context.mcp``) that knows no SDK.

```python
agent = Agent(Signer.load("keys/coder.jwk"), TrustStore.load("trust.json"), reporter=reporter)
```

An ``Agent`` is one process's signer, trust configuration, replay memory, mode and
(optional) reporter. The integrations call it to:

- check an offer that arrived (profile §6, §7, §5, this agent as the receiver) and decide:
  run the work, refuse it (with a signed ``rejected`` where the profile allows one), or
  answer a retransmission with the last status's identical octets (profile §6.4);
- sign the statuses of the work it took on (``accepted``, ``completed``, ``failed``),
  remembering the last one per offer so that a retransmission gets the same octets;
- sign the offer of each new delegation, continuing the handoff the current task arrived
  with (a context variable the server side sets), and check the statuses that come back;
- check a delegator's signed ``canceled`` and cancel what this task delegated in turn
  (profile §8 propagation).

``Mode.ENFORCE`` (the default) refuses what fails its checks before the work runs;
``Mode.AUDIT`` lets everything through and only reports the verdicts (``on_verdict``, the
log and the reporter), for rolling the protocol out on a live system.
"""

from __future__ import annotations

import contextvars
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from handoff_context._handoff import HandoffObject, parse_object
from handoff_context._model import Element, Offer, Status, StatusState
from handoff_context._sign import (
    Signer,
    continue_handoff,
    handoff_object,
    make_offer,
    make_status,
    status_object,
)
from handoff_context._trust import TrustStore
from handoff_context._verdict import Outcome, Verdict
from handoff_context._verify import Context, Policy, Verifier, parse_element
from handoff_context.carry import A2A_EXTENSION_URI, MCP_META_KEY
from handoff_context.errors import HandoffError, MalformedError, Reason

if TYPE_CHECKING:
    from handoff_context.reporter import Reporter

__all__ = [
    "Agent",
    "Decision",
    "Delegation",
    "Mode",
    "Received",
    "current",
]

log = logging.getLogger("handoff_context.agent")

# Profile §1.2 / §6 [profile]: no status answers a malformed element or an equivocation
# (the second offer for a hop gets none); a wrong-audience offer was not sent to us, so
# we are not its delegate and cannot sign for it (the parties check would fail).
_NO_STATUS = frozenset({Reason.MALFORMED, Reason.EQUIVOCATION, Reason.WRONG_AUDIENCE})


class Mode(StrEnum):
    """``enforce``: refuse what fails the checks; ``audit``: let it run, report the verdict."""

    ENFORCE = "enforce"
    AUDIT = "audit"


@dataclass
class Received:
    """An offer this agent took on: what the current task's delegations continue."""

    handoff: HandoffObject
    offer: Element
    carrier: str = "a2a"
    task_id: str | None = None
    canceled: bytes | None = None  # the delegator's verified canceled, when one came
    delegations: list[Delegation] = field(default_factory=list)
    signed: set[StatusState] = field(default_factory=set)

    @property
    def payload(self) -> Offer:
        assert isinstance(self.offer.payload, Offer)
        return self.offer.payload


@dataclass
class Delegation:
    """One delegation this agent made: its offer and what came back, as typed values.

    ``state`` is the latest verified status's state (None until one came); ``verdicts``
    holds the verdict of every status element that came back, accepted or not;
    ``refusal`` the reason a delegate refused with (its SDK error), when it did."""

    to: str
    offer: bytes
    handoff: dict[str, Any]
    hop: str
    dialog: str
    carrier: str = "a2a"
    task_id: str | None = None
    state: StatusState | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    statuses: list[bytes] = field(default_factory=list)
    refusal: str | None = None
    # Set by the integration that sent it: cancels the delegation with a signed canceled.
    cancel: Callable[[bytes], Awaitable[None]] | None = None

    @property
    def verdict(self) -> Verdict | None:
        return self.verdicts[-1] if self.verdicts else None


@dataclass(frozen=True)
class Decision:
    """What to do with an arrived offer.

    ``run``: hand the work to the executor or tool (``received`` is what it took on);
    otherwise ``answer`` is the status octets to send back to a retransmission (None while
    nothing was signed), or ``refusal`` says why it is refused (``status``: the signed
    ``rejected``, where the profile allows one)."""

    verdict: Verdict
    run: bool
    received: Received | None = None
    retransmission: bool = False
    answer: bytes | None = None
    reason: str | None = None
    detail: str | None = None
    status: bytes | None = None


# The offer the current task arrived with; delegations made inside it continue it.
_current: contextvars.ContextVar[Received | None] = contextvars.ContextVar(
    "handoff_context_current", default=None
)


def current() -> Received | None:
    """The offer the task running in this context took on, or None."""
    return _current.get()


def enter(received: Received | None) -> contextvars.Token[Received | None]:
    return _current.set(received)


def leave(token: contextvars.Token[Received | None]) -> None:
    _current.reset(token)


_refs: contextvars.ContextVar[tuple[Mapping[str, Any], ...]] = contextvars.ContextVar(
    "handoff_context_took_effect", default=()
)


def took_effect(refs: Sequence[Mapping[str, Any]]) -> None:
    """Name what took effect before the work failed (profile §1.2: a ``failed`` whose work
    partly took effect MUST list it in ``refs``). Call it in the executor or tool before it
    fails; the integration puts the refs into the signed ``failed``."""
    _refs.set(tuple(refs))


class Agent:
    """One agent process's handoff side (see the module docstring).

    ``state``: the replay memory, known offers, seen statuses and last answers; by default
    a ``FileState`` next to the agent (``.handoff-state/``), so answered hops survive a
    restart (profile §6.4); pass ``InMemoryState()`` for a throwaway agent. ``clock``
    gives NumericDate seconds (tests inject one). ``lifetime``: of the offers it signs.
    ``on_verdict`` is called with the verdict of every element the agent checks.
    ``signer`` None (with ``iss``, the agent's identifier): an agent that checks offers
    but signs nothing, neither statuses nor a ``rejected`` (``handoff-trace tap --enforce``
    without the agent's key); it cannot delegate.
    Raises nothing at construction beyond what opening ``state`` raises (OSError), and
    ValueError when neither ``signer`` nor ``iss`` names the agent.
    """

    def __init__(
        self,
        signer: Signer | None,
        trust: TrustStore,
        *,
        iss: str | None = None,
        state: Any = None,
        mode: Mode | str = Mode.ENFORCE,
        reporter: Reporter | None = None,
        policy: Policy | None = None,
        clock: Callable[[], int] | None = None,
        lifetime: int = 120,
        on_verdict: Callable[[Verdict], None] | None = None,
    ) -> None:
        if signer is None and not iss:
            raise ValueError("an agent without a signing key needs its identifier (iss)")
        if signer is not None and iss is not None and iss != signer.iss:
            raise ValueError(f"the signing key names {signer.iss!r}, not {iss!r}")
        self._signer = signer
        self._iss = signer.iss if signer is not None else str(iss)
        self.trust = trust
        self.mode = Mode(mode)
        self.reporter = reporter
        self.policy = policy or Policy()
        self.clock = clock or (lambda: int(time.time()))
        self.lifetime = lifetime
        self.on_verdict = on_verdict
        if state is None:
            from handoff_context._filestate import FileState

            state = FileState.for_agent(self._iss, skew=self.policy.skew)
        self.state = state
        self.verifier = Verifier(trust, self.policy, replay=state, offers=state, statuses=state)

    @property
    def iss(self) -> str:
        return self._iss

    @property
    def signer(self) -> Signer:
        """The agent's signer; raises RuntimeError for an agent that signs nothing."""
        if self._signer is None:
            raise RuntimeError(f"the agent {self._iss} holds no signing key")
        return self._signer

    @property
    def signs(self) -> bool:
        return self._signer is not None

    # -- receiving an offer (profile §6) --------------------------------------------------

    def check_offer(self, value: object, *, dialog: str | None, carrier: str = "a2a") -> Decision:
        """Judge a carried handoff object (a map as found in the ``carrier``, ``a2a`` or
        ``mcp``) and decide."""
        verdict = self.verifier.verify_value(
            value, Context(now=self.clock(), receiver=self.iss, dialog=dialog), source=carrier
        )
        self._seen(verdict, value, dialog=dialog, carrier=carrier, role="offer")
        received = _received_of(value, carrier)
        if verdict.outcome is Outcome.ACCEPT:
            return Decision(verdict, run=True, received=received)
        if self.mode is Mode.AUDIT:
            log.warning(
                "handoff audit: letting through an offer judged %s (%s: %s)",
                verdict.outcome.value,
                verdict.reason,
                verdict.detail,
            )
            # The work runs, but nothing is signed for an offer that did not pass: a status
            # would answer what the checks refused (and repeat a slot already answered).
            return Decision(verdict, run=True, received=_audited(received))
        if verdict.outcome is Outcome.DUPLICATE:
            assert verdict.digest is not None
            answer = self.state.last_answer(verdict.digest)
            return Decision(verdict, run=False, retransmission=True, answer=answer)
        reason = verdict.reason.value if verdict.reason is not None else Reason.POLICY.value
        status = self._rejected(value, verdict)
        if status is not None:
            where = verdict.dialog or dialog
            self._sent(status, to=verdict.iss, dialog=where, carrier=carrier, role="status")
        return Decision(
            verdict, run=False, reason=reason, detail=verdict.detail or "", status=status
        )

    def refuse_missing(self, *, dialog: str | None) -> Decision:
        """A request without a handoff offer, to an agent that requires one."""
        verdict = Verdict(source="offer", element=None, reason=Reason.POLICY)
        verdict.detail = "the request carries no signed handoff offer"
        verdict.dialog = dialog
        if self.mode is Mode.AUDIT:
            return Decision(verdict, run=True)
        return Decision(verdict, run=False, reason=Reason.POLICY.value, detail=verdict.detail)

    def _rejected(self, value: object, verdict: Verdict) -> bytes | None:
        """The signed ``rejected`` answering a refused offer, where the profile allows one."""
        if verdict.reason is None or verdict.reason in _NO_STATUS or verdict.digest is None:
            return None
        if not self.signs:
            return None
        # The same refused octets again get the same rejected, never a second one (two
        # rejected octets for one hop would read as a status conflict, profile §8).
        known = self.state.last_answer(verdict.digest)
        if known is not None and _state_of(status_object(known)) is StatusState.REJECTED:
            return bytes(known)
        try:
            octets = parse_object(value).offer  # type: ignore[union-attr]
            status = make_status(
                self.signer,
                offer_octets=octets,
                state=StatusState.REJECTED,
                iat=self.clock(),
                reason=verdict.reason.value,
            )
        except (HandoffError, AttributeError, ValueError) as exc:
            log.info("handoff: no signed rejected for this offer (%s)", exc)
            return None
        # Profile §8: a rejected for stale or replay does not end the hop; it is still the
        # last answer to a retransmission of the same octets.
        self.state.record_answer(verdict.digest, status)
        return status

    # -- answering the work it took on (profile §1.2, §8) ---------------------------------

    def answer(
        self,
        received: Received,
        state: StatusState,
        *,
        reason: str | None = None,
        detail: str | None = None,
    ) -> bytes | None:
        """Sign ``state`` for the offer ``received`` (once per state), remember it as the
        last answer and report it. Returns None when this state was signed already, the
        offer did not pass its checks (audit mode) or the profile forbids it here."""
        if state in received.signed or _audit_only(received) or not self.signs:
            return None
        if state is StatusState.CANCELED:  # the delegator signs canceled, never the delegate
            return None
        fields: dict[str, Any] = {}
        if reason is not None:
            fields["reason"] = reason
        if detail is not None:
            fields["detail"] = detail
        refs = _refs.get()
        if state is StatusState.FAILED and refs:
            fields["refs"] = [dict(r) for r in refs]
        try:
            status = make_status(
                self.signer,
                offer_octets=received.handoff.offer,
                state=state,
                iat=self.clock(),
                **fields,
            )
        except HandoffError as exc:
            log.warning("handoff: did not sign %s: %s", state.value, exc)
            return None
        received.signed.add(state)
        self.state.record_answer(received.offer.digest, status)
        self._sent(
            status,
            to=received.payload.iss,
            dialog=received.payload.dialog,
            carrier=received.carrier,
            role="status",
            task_id=received.task_id,
        )
        return status

    # -- a delegator's cancel (profile §8) ------------------------------------------------

    def check_cancel(self, received: Received, value: object) -> Verdict:
        """Judge a ``canceled`` for ``received``: it must verify, be a canceled and come
        from the offer's delegator (the status parties check) for this very offer."""
        verdict = self.verifier.verify_value(
            value, Context(now=self.clock(), receiver=self.iss), source="cancel"
        )
        self._seen(
            verdict,
            value,
            dialog=received.payload.dialog,
            carrier=received.carrier,
            role="cancel",
            task_id=received.task_id,
        )
        if verdict.outcome in (Outcome.ACCEPT, Outcome.DUPLICATE):
            if verdict.offer != received.offer.digest:
                verdict.outcome, verdict.reason = Outcome.REJECT, Reason.POLICY
                verdict.detail = "the canceled names another offer than this task's"
            elif _state_of(value) is not StatusState.CANCELED:
                verdict.outcome, verdict.reason = Outcome.REJECT, Reason.POLICY
                verdict.detail = "a cancel request must carry a canceled status"
            else:
                received.canceled = _status_octets(value)
        return verdict

    async def propagate_cancel(self, received: Received) -> None:
        """Cancel every delegation ``received``'s task made, each with a signed canceled
        (profile §8: propagation downward). Failures are logged, never raised."""
        for delegation in received.delegations:
            if delegation.cancel is None or delegation.state in _FINAL:
                continue
            status = self.sign_cancel(delegation)
            try:
                await delegation.cancel(status)
            except Exception:  # one delegate that cannot be reached must not stop the rest
                log.warning(
                    "handoff: could not cancel the delegation to %s", delegation.to, exc_info=True
                )
            else:
                delegation.state = StatusState.CANCELED

    def sign_cancel(self, delegation: Delegation) -> bytes:
        """The delegator's signed ``canceled`` for ``delegation`` (profile §1.2: iss and aud
        as in the offer), reported as sent in a cancel; the caller carries it."""
        status = make_status(
            self.signer,
            offer_octets=delegation.offer,
            state=StatusState.CANCELED,
            iat=self.clock(),
        )
        self._sent(
            status,
            to=delegation.to,
            dialog=delegation.dialog,
            carrier=delegation.carrier,
            role="cancel",
            task_id=delegation.task_id,
        )
        return status

    # -- delegating (profile §1.1, §7) ----------------------------------------------------

    def delegate(
        self, to: str, *, dialog: str | None, task: str | None = None, carrier: str = "a2a"
    ) -> Delegation:
        """Sign the offer of a new delegation to ``to``. Inside a task that arrived with an
        offer, the new offer continues that handoff (prev and chain; profile §7), and the
        delegation is remembered for cancel propagation.

        Raises ChainWindowError when the received offer is no longer live (profile §7
        timing): delegate within the window, or continue with ``partial`` yourself."""
        received = current()
        now = self.clock()
        extra: dict[str, Any] = {"task": task} if task else {}
        if received is not None:
            carried = continue_handoff(
                self.signer,
                received.handoff,
                aud=to,
                iat=now,
                lifetime=self.lifetime,
                **extra,
            )
            offer = carried["offer"].encode("ascii")
        else:
            if dialog is None:
                raise ValueError("a delegation outside a task needs a dialog identifier")
            offer = make_offer(
                self.signer, aud=to, dialog=dialog, iat=now, lifetime=self.lifetime, **extra
            )
            carried = handoff_object(offer)
        self.verifier.remember_offer(offer)
        payload = parse_element(offer, _form(offer)).payload
        delegation = Delegation(
            to=to,
            offer=offer,
            handoff=carried,
            hop=payload.hop,
            dialog=_dialog(payload),
            carrier=carrier,
        )
        if received is not None:
            received.delegations.append(delegation)
        self._sent(carried, to=to, dialog=delegation.dialog, carrier=carrier, role="offer")
        return delegation

    def check_reply(self, delegation: Delegation, value: object) -> Verdict:
        """Judge a status object that came back for ``delegation``; a verified one moves
        ``delegation.state``. A status for another offer is rejected (policy)."""
        verdict = self.verifier.verify_value(
            value, Context(now=self.clock(), receiver=self.iss), source="status"
        )
        self._seen(
            verdict,
            value,
            dialog=delegation.dialog,
            carrier=delegation.carrier,
            role="status",
            task_id=delegation.task_id,
        )
        if verdict.element == "status" and verdict.offer not in (None, _digest(delegation)):
            verdict.outcome, verdict.reason = Outcome.REJECT, Reason.POLICY
            verdict.detail = "the status answers another offer than this delegation's"
        delegation.verdicts.append(verdict)
        if verdict.outcome in (Outcome.ACCEPT, Outcome.DUPLICATE):
            state = _state_of(value)
            octets = _status_octets(value)
            if octets is not None and octets not in delegation.statuses:
                delegation.statuses.append(octets)
            if state is not None and _moves(delegation.state, state):
                delegation.state = state
        return verdict

    # -- reporting ------------------------------------------------------------------------

    def _seen(
        self,
        verdict: Verdict,
        value: object,
        *,
        dialog: str | None,
        carrier: str,
        role: str,
        task_id: str | None = None,
    ) -> None:
        """Every element the agent judged: to ``on_verdict`` and, as received, to the
        reporter (the service judges it again and shows it under its dialog)."""
        if self.on_verdict is not None:
            self.on_verdict(verdict)
        if self.reporter is not None and isinstance(value, Mapping):
            message = carrier_message(
                dict(value), carrier=carrier, role=role, dialog=dialog, task_id=task_id
            )
            self.reporter.observe_received(message, dialog=dialog)

    def _sent(
        self,
        value: bytes | Mapping[str, Any],
        *,
        to: str | None,
        dialog: str | None,
        carrier: str,
        role: str,
        task_id: str | None = None,
    ) -> None:
        if self.reporter is None:
            return
        obj = status_object(value) if isinstance(value, bytes) else dict(value)
        message = carrier_message(obj, carrier=carrier, role=role, dialog=dialog, task_id=task_id)
        self.reporter.observe_sent(message, to=to, dialog=dialog)


def carrier_message(
    obj: dict[str, Any], *, carrier: str, role: str, dialog: str | None, task_id: str | None
) -> dict[str, Any]:
    """``obj`` in the host message that carried it (profile §9), as the reporter reports
    it: ``role`` is ``offer``, ``status`` or ``cancel``; ``carrier`` ``a2a`` or ``mcp``.
    The integrations report what they judged and signed themselves, so an agent needs no
    tap besides them."""
    if carrier == "mcp":
        meta = {"_meta": {MCP_META_KEY: obj}}
        if role == "offer":
            return {"jsonrpc": "2.0", "id": 0, "method": "tools/call", "params": meta}
        if role == "cancel":
            method = "notifications/cancelled"
            return {"jsonrpc": "2.0", "method": method, "params": {"requestId": 0, **meta}}
        return {"jsonrpc": "2.0", "id": 0, "result": {"content": [], **meta}}
    if role == "cancel":
        params = {"id": task_id or "", "metadata": {A2A_EXTENSION_URI: obj}}
        return {"jsonrpc": "2.0", "id": 0, "method": "CancelTask", "params": params}
    message: dict[str, Any] = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER" if role == "offer" else "ROLE_AGENT",
        "parts": [],
        "metadata": {A2A_EXTENSION_URI: obj},
    }
    if dialog is not None:
        message["contextId"] = dialog
    if task_id:
        message["taskId"] = task_id
    return message


_FINAL = frozenset(
    {StatusState.COMPLETED, StatusState.FAILED, StatusState.REJECTED, StatusState.CANCELED}
)
_RANK = {
    StatusState.ACCEPTED: 1,
    StatusState.REJECTED: 2,
    StatusState.COMPLETED: 2,
    StatusState.FAILED: 2,
    StatusState.CANCELED: 2,
}


def _moves(before: StatusState | None, after: StatusState) -> bool:
    """A later status never moves a hop back (profile §8: accepted after completed stays
    completed)."""
    return before is None or (_RANK[after] >= _RANK[before] and before not in _FINAL)


def _received_of(value: object, carrier: str) -> Received | None:
    try:
        obj = parse_object(value)
    except MalformedError:
        return None
    if not isinstance(obj, HandoffObject):
        return None
    try:
        element = parse_element(obj.offer, obj.form)
    except HandoffError:
        return None
    return Received(obj, element, carrier) if isinstance(element.payload, Offer) else None


def _audited(received: Received | None) -> Received | None:
    if received is not None:
        received.signed.update(StatusState)  # nothing is ever signed for it
    return received


def _audit_only(received: Received) -> bool:
    return len(received.signed) == len(StatusState)


def _state_of(value: object) -> StatusState | None:
    octets = _status_octets(value)
    if octets is None:
        return None
    try:
        payload = parse_element(octets, _form(octets)).payload
    except HandoffError:
        return None
    return payload.state if isinstance(payload, Status) else None


def _status_octets(value: object) -> bytes | None:
    try:
        obj = parse_object(value)
    except MalformedError:
        return None
    return obj.status if not isinstance(obj, HandoffObject) else None


def _form(octets: bytes) -> Any:
    from handoff_context._model import form_of

    return form_of(octets)


def _dialog(payload: Any) -> str:
    return str(payload.dialog)


def _digest(delegation: Delegation) -> bytes:
    from handoff_context._encoding import handoff_digest

    return handoff_digest(delegation.offer)
