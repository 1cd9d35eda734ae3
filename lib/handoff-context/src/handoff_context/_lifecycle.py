"""Hop state and flags (profile §8), re-derived from stored elements by one pure function.

``derive_hop`` reads no database and no clock; ``now`` is a parameter. Its answer depends
only on the *set* of facts and ``now``: facts are de-duplicated by digest and every choice
is a min or max over a total key, so input order never matters.

Decisions of this profile where profile §8 is silent **[profile]**:
- A ``rejected`` with reason ``stale``/``replay`` is dropped first: it sets no state, joins
  no conflict, stops no expiry and is evidence for no flag.
- Between contradictory statuses the first signed wins: the least ``(iat, digest)``.
  ``received_at`` never decides a state (holders of the same elements agree on it); it
  only times ``accepted_at``, ``terminal_at``, flags and deadlines.
- Accept or reject: the first signed of accepted, hard rejected, completed and failed (the
  last two imply accepted). After an accept, the first signed of completed/failed.
- ``canceled`` always replaces offered, accepted and expired. Against the delegate's final
  answer (rejected, completed, failed) the first signed wins. A cancel and an outcome is a
  ``cancel-race`` either way; a cancel and a rejection is not flagged (nothing ran).
- Two different ``canceled`` are no conflict: one per slot binds the delegate only.
- ``expired``: no status and ``now > exp + skew`` (``exp + skew`` itself is fresh, profile §6.3);
  it has no ``terminal_at`` and no ``deadline``.
- ``accepted_at``: the earliest ``received_at`` among statuses showing acceptance (explicit
  or implied), None unless the hop was accepted; ``terminal_at``: the earliest among those
  in the final state. ``received_at`` is never missing, so no ``iat`` fallback is needed.
- At most one flag per (kind, variant); ``opened_at`` is when the condition first held in
  the stored facts (a conflict: when its second side was received). Evidence always holds
  the hop's own offer digest, plus every status on each side of the condition.
- ``partial-failure``: any ``failed`` with refs, even one that lost precedence.
- ``cancel-not-propagated``: only while the state is ``canceled``, only for downstream
  offers the delegate issued (``iss == offer.aud``, "each offer it issued"). Due at the
  first cancel received + grace; a downstream cancel received after that is late and keeps
  the flag, so the flag never closes itself. Evidence adds each late or missing offer.
- ``host-divergence``: the latest observation among those that map to a hop state, by
  receive time (with its fraction), then ``order`` (the position within a stream, then
  arrival), never by the state's name; INPUT_REQUIRED, AUTH_REQUIRED and unknown names are
  skipped. Opened at the
  later of that observation and the start of the hop's state; never while expired.
  Evidence: the offer and the status that set the hop's state.
- ``deadline``: the first instant after ``now`` at which the answer changes with no new
  element, so a sweep run at ``deadline`` always sees the change.
- Facts received after ``now`` still count; ``now`` only drives the time rules.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from handoff_context._frozen import quick_init
from handoff_context._model import StatusState, is_expired


class HopState(StrEnum):
    OFFERED = "offered"
    ACCEPTED = "accepted"
    COMPLETED = "completed"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELED = "canceled"
    EXPIRED = "expired"


# Profile §8 mapping table; expiry is local and has no A2A counterpart.
A2A_STATE: dict[HopState, str | None] = {
    HopState.OFFERED: "TASK_STATE_SUBMITTED",
    HopState.ACCEPTED: "TASK_STATE_WORKING",
    HopState.COMPLETED: "TASK_STATE_COMPLETED",
    HopState.FAILED: "TASK_STATE_FAILED",
    HopState.REJECTED: "TASK_STATE_REJECTED",
    HopState.CANCELED: "TASK_STATE_CANCELED",
    HopState.EXPIRED: None,
}
_HOP_STATE_OF_A2A = {name: state for state, name in A2A_STATE.items() if name is not None}
# The A2A 0.3 protobuf spelled it TASK_STATE_CANCELLED; 0.3 JSON uses lower-case kebab names.
_A2A_ALIASES = {"TASK_STATE_CANCELLED": "TASK_STATE_CANCELED"}


class FlagKind(StrEnum):
    """The hop flags of signed handoffs (profile §8). A service may keep flags of its own kinds
    in the same ``Flag`` shape (handoff-trace's envelope cases do)."""

    EQUIVOCATION = "equivocation"
    LOST_OUTCOME = "lost-outcome"
    STATUS_CONFLICT = "status-conflict"
    CANCEL_NOT_PROPAGATED = "cancel-not-propagated"
    PARTIAL_FAILURE = "partial-failure"
    CANCEL_RACE = "cancel-race"
    HOST_DIVERGENCE = "host-divergence"
    REJECTED_ELEMENT = "rejected-element"


class Severity(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


# Critical: a signer contradicted itself about one hop, so nothing it signed can be trusted.
# High: the outcome of work is unknown or self-contradictory; someone must find out what ran.
# Medium: work may have taken effect against intent (races, partial failure, unstopped
# downstream work) or an element was refused; worth a look, usually explainable.
# Low: the host's bookkeeping disagrees with the signed record; the signed record wins.
SEVERITY: dict[FlagKind, Severity] = {
    FlagKind.EQUIVOCATION: Severity.CRITICAL,
    FlagKind.LOST_OUTCOME: Severity.HIGH,
    FlagKind.STATUS_CONFLICT: Severity.HIGH,
    FlagKind.CANCEL_NOT_PROPAGATED: Severity.MEDIUM,
    FlagKind.CANCEL_RACE: Severity.MEDIUM,
    FlagKind.PARTIAL_FAILURE: Severity.MEDIUM,
    FlagKind.HOST_DIVERGENCE: Severity.LOW,
    FlagKind.REJECTED_ELEMENT: Severity.MEDIUM,
}


@quick_init
@dataclass(frozen=True, slots=True)
class OfferFact:
    """The hop's offer as stored (the first verified offer for (iss, hop))."""

    digest: bytes
    iss: str
    aud: str
    hop: str
    dialog: str
    task: str | None
    iat: int
    exp: int
    prev: bytes | None


@quick_init
@dataclass(frozen=True, slots=True)
class StatusFact:
    """A verified status linked to the hop's offer; ``refs`` is the number of its refs."""

    digest: bytes
    state: StatusState
    iss: str
    iat: int
    received_at: int
    reason: str | None
    refs: int


@dataclass(frozen=True, slots=True)
class DownstreamFact:
    """An offer whose ``prev`` is the hop's offer, and when its ``canceled`` was received."""

    digest: bytes
    iss: str
    hop: str
    canceled_at: int | None


@dataclass(frozen=True, slots=True)
class HostObservation:
    """A captured A2A task state for the hop's task, and when it was received: seconds
    with their fraction, and ``order`` among those received at the same time (the
    position in one stream, then arrival order)."""

    task_state: str
    received_at: float
    order: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Flag:
    """A flag on a hop. ``kind`` is a ``FlagKind`` for every flag this library raises; it is
    typed as any StrEnum so that a service can keep flags of its own kinds alike."""

    kind: StrEnum
    severity: Severity
    evidence: tuple[bytes, ...]
    opened_at: int
    variant: str | None = None
    detail: str = ""


@quick_init
@dataclass(frozen=True, slots=True)
class HopView:
    state: HopState
    a2a_state: str | None
    flags: tuple[Flag, ...]
    accepted_at: int | None
    terminal_at: int | None
    deadline: int | None


@dataclass(frozen=True, slots=True)
class Timing:
    """Seconds for profile §6.3 skew and this profile's flag timers. Raises ValueError if < 0."""

    skew: int = 60
    lost_outcome_after: int = 3600
    cancel_grace: int = 60

    def __post_init__(self) -> None:
        if min(self.skew, self.lost_outcome_after, self.cancel_grace) < 0:
            raise ValueError("timing values must not be negative")


def normalise_task_state(task_state: str) -> str:
    """``"input-required"`` (A2A 0.3) -> ``"TASK_STATE_INPUT_REQUIRED"`` (A2A 1.0)."""
    name = task_state.strip().upper().replace("-", "_")
    if not name.startswith("TASK_STATE_"):
        name = "TASK_STATE_" + name
    return _A2A_ALIASES.get(name, name)


def hop_state_of_a2a(task_state: str) -> HopState | None:
    """The hop state an A2A task state maps to (profile §8), or None when it maps to none."""
    return _HOP_STATE_OF_A2A.get(normalise_task_state(task_state))


_ACCEPTING = (StatusState.ACCEPTED, StatusState.COMPLETED, StatusState.FAILED)
_OUTCOMES = (StatusState.COMPLETED, StatusState.FAILED)
_NOT_TERMINAL_REASONS = ("stale", "replay")
# The states with one slot each, listed once (iterating the enum, and reading its members,
# costs a call through its metaclass each time).
_SLOTTED = tuple(state for state in StatusState if state is not StatusState.CANCELED)
_REJECTED = StatusState.REJECTED
# The hop state a status sets, by its state (the same text): a lookup, not an enum call.
_HOP_STATE = {state: HopState(state.value) for state in StatusState}


def _signed_order(status: StatusFact) -> tuple[int, bytes]:
    return (status.iat, status.digest)


def _first_received(statuses: Iterable[StatusFact]) -> int:
    return min(s.received_at for s in statuses)


def _unique_statuses(statuses: Sequence[StatusFact]) -> tuple[StatusFact, ...]:
    """One fact per digest, stale/replay rejections dropped (profile §8), in signed order."""
    kept: dict[bytes, StatusFact] = {}
    for s in sorted(statuses, key=_total_key, reverse=True):  # the smallest duplicate stays
        if not (s.state is _REJECTED and s.reason in _NOT_TERMINAL_REASONS):
            kept[s.digest] = s
    return tuple(sorted(kept.values(), key=_signed_order))


def _total_key(s: StatusFact) -> tuple[int, int, str, str, bool, str, int, bytes]:
    reason = (s.reason is None, s.reason or "")
    return (s.received_at, s.iat, s.state._value_, s.iss, *reason, s.refs, s.digest)


@quick_init
@dataclass(frozen=True, slots=True)
class _Hop:
    """The facts of one hop and its derived state; each rule below reads only this."""

    offer: OfferFact
    sts: tuple[StatusFact, ...]
    now: int
    timing: Timing
    state: HopState = HopState.OFFERED
    setter: StatusFact | None = None  # the status that set the state
    accepted_at: int | None = None
    terminal_at: int | None = None

    def of(self, *states: StatusState) -> list[StatusFact]:
        return [s for s in self.sts if s.state in states]

    @property
    def since(self) -> int:
        """When the hop entered its state (the offer's iat while offered)."""
        started = self.terminal_at if self.terminal_at is not None else self.accepted_at
        return self.offer.iat if started is None else started

    def flag(
        self,
        kind: FlagKind,
        evidence: Iterable[StatusFact],
        opened_at: int,
        detail: str,
        *,
        variant: str | None = None,
        also: Iterable[bytes] = (),
    ) -> Flag:
        digests = tuple(sorted({self.offer.digest, *also, *(e.digest for e in evidence)}))
        return Flag(kind, SEVERITY[kind], digests, opened_at, variant, detail)


def _derive_state(offer: OfferFact, sts: tuple[StatusFact, ...], now: int, timing: Timing) -> _Hop:
    """The state machine of profile §8 over a set of statuses: the first signed wins."""
    hop = _Hop(offer, sts, now, timing)
    if not sts:
        expired = is_expired(offer.exp, now=now, skew=timing.skew)
        return _Hop(offer, sts, now, timing, HopState.EXPIRED) if expired else hop
    first = min(hop.of(*_ACCEPTING, StatusState.REJECTED), key=_signed_order, default=None)
    accepted = first is not None and first.state is not StatusState.REJECTED
    outcome = min(hop.of(*_OUTCOMES), key=_signed_order, default=None)
    setter = outcome if accepted and outcome is not None else first
    cancel = min(hop.of(StatusState.CANCELED), key=_signed_order, default=None)
    if cancel is not None and (
        setter is None
        or setter.state is StatusState.ACCEPTED
        or _signed_order(cancel) < _signed_order(setter)
    ):
        setter = cancel
    assert setter is not None  # sts is not empty, so one of the slots above is filled
    state = _HOP_STATE[setter.state]
    terminal = None if state is HopState.ACCEPTED else _first_received(hop.of(setter.state))
    accepted_at = _first_received(hop.of(*_ACCEPTING)) if accepted else None
    return _Hop(offer, sts, now, timing, state, setter, accepted_at, terminal)


def _status_conflicts(h: _Hop) -> Iterator[Flag]:
    """Profile §8: both members of a pair, or two different octets for one slot."""
    pairs = (
        ("accept-reject", h.of(*_ACCEPTING), h.of(StatusState.REJECTED), "accepted or implied"),
        ("complete-fail", h.of(StatusState.COMPLETED), h.of(StatusState.FAILED), "both"),
    )
    for variant, left, right, how in pairs:
        if left and right:
            opened = max(_first_received(left), _first_received(right))
            detail = f"{variant} ({how}); the hop is {h.state}"
            yield h.flag(FlagKind.STATUS_CONFLICT, left + right, opened, detail, variant=variant)
    slots = [h.of(state) for state in _SLOTTED]
    if doubled := [group for group in slots if len(group) > 1]:
        # The condition holds from the second element of the first slot to be doubled.
        opened = min(sorted(s.received_at for s in group)[1] for group in doubled)
        detail = "two different " + ", ".join(group[0].state for group in doubled)
        evidence = [s for group in doubled for s in group]
        yield h.flag(FlagKind.STATUS_CONFLICT, evidence, opened, detail, variant="duplicate-slot")


def _cancel_race(h: _Hop) -> Iterator[Flag]:
    """A cancel does not prove the work had no effect (profile §8): show both sides."""
    cancels, outcomes = h.of(StatusState.CANCELED), h.of(*_OUTCOMES)
    if cancels and outcomes:
        opened = max(_first_received(cancels), _first_received(outcomes))
        detail = f"canceled, and the delegate reported an outcome; the hop is {h.state}"
        yield h.flag(FlagKind.CANCEL_RACE, cancels + outcomes, opened, detail)


def _lost_outcome(h: _Hop) -> Iterator[Flag]:
    """An accepted hop with no terminal status is a possibly lost outcome (profile §8)."""
    if h.state is HopState.ACCEPTED and h.accepted_at is not None:
        opened = h.accepted_at + h.timing.lost_outcome_after
        if h.now >= opened:
            detail = f"accepted, and no outcome after {h.timing.lost_outcome_after} s"
            yield h.flag(FlagKind.LOST_OUTCOME, h.of(StatusState.ACCEPTED), opened, detail)


def _partial_failure(h: _Hop) -> Iterator[Flag]:
    """Profile §1.2: a failed status whose work partly took effect lists it in refs."""
    if partial := [s for s in h.of(StatusState.FAILED) if s.refs > 0]:
        detail = "failed, but lists work that took effect"
        yield h.flag(FlagKind.PARTIAL_FAILURE, partial, _first_received(partial), detail)


def _unpropagated(h: _Hop, downstream: Sequence[DownstreamFact]) -> tuple[int, list[bytes]]:
    """The propagation deadline, and the delegate's downstream offers not canceled by it."""
    if h.state is not HopState.CANCELED or h.terminal_at is None:
        return 0, []
    due = h.terminal_at + h.timing.cancel_grace
    in_time = {d.digest for d in downstream if d.canceled_at is not None and d.canceled_at <= due}
    # Profile §8: the delegate propagates to "each offer it issued" below this hop.
    issued = {d.digest for d in downstream if d.iss == h.offer.aud}
    return due, sorted(issued - in_time)


def _cancel_not_propagated(h: _Hop, due: int, late: list[bytes]) -> Iterator[Flag]:
    """Profile §8: a delegate that receives a valid cancel SHOULD cancel what it issued below."""
    if late and h.now >= due:
        detail = f"{len(late)} downstream offer(s) not canceled within the grace period"
        cancels = h.of(StatusState.CANCELED)
        yield h.flag(FlagKind.CANCEL_NOT_PROPAGATED, cancels, due, detail, also=late)


def _host_divergence(h: _Hop, host: Sequence[HostObservation]) -> Iterator[Flag]:
    """The host keeps its own task state beside the hop's (profile §8); show when they differ."""
    seen = [(o.received_at, o.order, normalise_task_state(o.task_state)) for o in host]
    # INPUT_REQUIRED / AUTH_REQUIRED stay in the host protocol (profile §8): they are skipped.
    seen = [s for s in seen if s[2] in _HOP_STATE_OF_A2A]
    # Expiry is local, so the host cannot know it: no divergence while expired.
    if not seen or h.state is HopState.EXPIRED:
        return
    # The latest by time and then order; the name only breaks a tie of both, so that the
    # answer still does not depend on the order the facts are given in.
    at, _, name = max(seen)
    if _HOP_STATE_OF_A2A[name] is not h.state:
        setter = () if h.setter is None else (h.setter,)
        detail = f"host says {name}, hop is {h.state}"
        opened = max(math.floor(at), h.since)
        yield h.flag(FlagKind.HOST_DIVERGENCE, setter, opened, detail)


def _deadline(h: _Hop, due: int, late: list[bytes]) -> int | None:
    """The first instant after ``now`` at which the answer changes with no new element."""
    times = [due] if late else []
    if h.state is HopState.OFFERED:
        times.append(h.offer.exp + h.timing.skew + 1)  # the first second is_expired holds
    if h.state is HopState.ACCEPTED and h.accepted_at is not None:
        times.append(h.accepted_at + h.timing.lost_outcome_after)
    return min((t for t in times if t > h.now), default=None)


def derive_hop(
    offer: OfferFact,
    statuses: Sequence[StatusFact],
    *,
    now: int,
    timing: Timing = Timing(),
    downstream: Sequence[DownstreamFact] = (),
    host: Sequence[HostObservation] = (),
) -> HopView:
    """Re-derive a hop's state and flags from its stored facts (profile §8). Raises nothing.

    The result depends only on the set of facts and ``now``; the module docstring lists
    every decision the profile makes where profile §8 is silent.
    """
    h = _derive_state(offer, _unique_statuses(statuses), now, timing)
    due, late = _unpropagated(h, downstream)
    flags = [
        *_status_conflicts(h),
        *_cancel_race(h),
        *_lost_outcome(h),
        *_cancel_not_propagated(h, due, late),
        *_partial_failure(h),
        *_host_divergence(h, host),
    ]
    flags.sort(key=lambda f: (f.kind.value, f.variant or "", f.opened_at, f.evidence))
    return HopView(
        state=h.state,
        a2a_state=A2A_STATE[h.state],
        flags=tuple(flags),
        accepted_at=h.accepted_at,
        terminal_at=h.terminal_at,
        deadline=_deadline(h, due, late),
    )
