"""The ownership ledger of one case, derived from its envelope items (docs/envelopes.md).

Pure: the items of a case in, epochs, owner and flags out. Items are first put in one
canonical order (receive or event time, then the item's key, a digest of its content and
receipt), so the same *set* of items gives the same ledger and flags whatever order they
were ingested in; a hypothesis test shows it.

The rules, where the contract leaves room:

- The sender of a case's first handoff owns the case at that handoff's epoch from the
  moment it was received (an implied band with no handoff id), so a rejected handoff keeps
  its sender the owner. Each acceptance starts a band at its epoch, owned by the receiver
  of the handoff it answers; the first acceptance of an epoch wins, a second one naming
  another owner is ``two-owners``.
- A write or act carrying an epoch older than the band in force (one begun by an
  acceptance) is ``two-owners`` when the system of record applied it (or did not say). When
  it says ``rejected``, the epoch fence worked: nobody acted twice, so it is no flag, and
  the timeline shows the refused write.
- ``release-before-accept``: a sender's ``handed-off`` mark at a time when it still owns the
  case by the ledger, or when no band is known at all; the flag names the sender's latest
  handoff at or before the mark (or its first, for a mark made before sending).
- ``lost-acceptance`` / ``no-owner``: no acceptance or rejection within the window after a
  handoff, judged at ``now`` (the sweep re-derives a case at its ``deadline``). It is
  ``no-owner`` when the sender also stopped acting: it marked the case handed off between
  the handoff and the end of its window (a mark from an earlier time it owned the case, or
  one after the flag was due, says nothing of this handoff), or it wrote or acted on it no
  more after the handoff.
- ``context-id-reuse``: a handoff presents a context id that was first seen (in canonical
  order, over every case) with another receiver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from handoff_context import Flag
from handoff_context._frozen import quick_init

from app.envelope.extract import COUNT_ERROR, ItemKind
from app.envelope.flags import ENVELOPE_SEVERITY, EnvelopeFlagKind

HOP_CHARS = 64  # the flag table's hop column
UNKNOWN_AGENT = "(unknown)"


@dataclass(frozen=True)
class CaseRules:
    """The deployment's case rules (``HANDOFF_TRACE_ACCEPT_WINDOW``,
    ``HANDOFF_TRACE_TRANSCRIPT_BYTES``)."""

    accept_window: int = 3600
    transcript_bytes: int = 8192


@quick_init
@dataclass(frozen=True)
class Item:
    """A stored envelope item, as the ledger needs it."""

    key: str  # the stored row's key: unique per receipt, a function of its content
    digest: bytes  # SHA-256 of the payload octets: the evidence flags name
    kind: str  # an ItemKind value
    source: str
    at: int
    case_id: str | None = None
    handoff_id: str | None = None
    agent: str | None = None
    to_agent: str | None = None
    epoch: int | None = None
    media_type: str | None = None
    context_id: str | None = None
    task_id: str | None = None
    action: str | None = None
    outcome: str | None = None
    detail: str | None = None
    envelope: Mapping[str, Any] | None = None
    errors: tuple[str, ...] = ()
    drift: tuple[str, ...] = ()
    references: tuple[Mapping[str, Any], ...] = ()
    text_bytes: int = 0

    @property
    def order(self) -> tuple[int, str]:
        return (self.at, self.key)


@dataclass(frozen=True)
class Epoch:
    """One band of the ownership timeline."""

    epoch: int
    owner: str
    start: int
    end: int | None  # None: still current
    handoff_id: str | None  # the handoff whose acceptance began it


@dataclass(frozen=True)
class CaseEvent:
    """One marker of the timeline, in time order."""

    at: int
    kind: str  # handoff | accepted | rejected | write | handed-off | act | invalid
    agent: str | None
    epoch: int | None
    handoff_id: str | None
    outcome: str | None  # write/act: applied | rejected; else None
    detail: str | None
    source: str


@dataclass(frozen=True)
class CaseFlag:
    """A flag of a case: the agent at fault (the flag's ``iss``) and the handoff (``hop``)."""

    flag: Flag
    agent: str
    handoff_id: str


@dataclass(frozen=True)
class Ledger:
    case_id: str | None
    owner: str | None
    epoch: int | None
    epochs: tuple[Epoch, ...]
    events: tuple[CaseEvent, ...]
    responses: Mapping[str, tuple[str, str | None]]  # handoff id -> (accepted|rejected, why)
    flags: tuple[CaseFlag, ...]
    handoffs: int
    last_at: int
    deadline: int | None  # when the flags change with no new item


@dataclass
class _Handoff:
    handoff_id: str
    first: Item
    items: list[Item] = field(default_factory=list)

    @property
    def to_agent(self) -> str | None:
        return next((i.to_agent for i in self.items if i.to_agent), None)

    @property
    def digests(self) -> set[bytes]:
        return {i.digest for i in self.items}


@dataclass
class _Band:
    epoch: int
    owner: str
    start: int
    handoff_id: str | None
    evidence: set[bytes]


# A band of the ownership timeline: the ledger's own while it works, or an ``Epoch`` of its
# result (both have ``start``, ``epoch`` and ``handoff_id``).
_B = TypeVar("_B", "_Band", Epoch)


class _Flags:
    """Flags by (kind, agent, handoff, variant), evidence merged: a retransmitted message
    adds evidence to its flag rather than a second flag."""

    def __init__(self) -> None:
        self.found: dict[tuple[str, str, str, str | None], tuple[set[bytes], int, str]] = {}

    def add(
        self,
        kind: EnvelopeFlagKind,
        *,
        agent: str | None,
        handoff_id: str,
        evidence: Iterable[bytes],
        at: int,
        detail: str,
        variant: str | None = None,
    ) -> None:
        key = (kind.value, agent or UNKNOWN_AGENT, handoff_id, variant)
        digests, opened, first_detail = self.found.get(key, (set(), at, detail))
        digests.update(evidence)
        self.found[key] = (digests, min(opened, at), first_detail if opened <= at else detail)

    def of_message(
        self, kind: EnvelopeFlagKind, item: Item, *, detail: str, variant: str | None = None
    ) -> None:
        """A flag of one message on its own: its sender, its handoff, itself as evidence."""
        self.add(
            kind,
            agent=item.agent,
            handoff_id=_handoff_of(item),
            evidence={item.digest},
            at=item.at,
            detail=detail,
            variant=variant,
        )

    def result(self) -> tuple[CaseFlag, ...]:
        flags = []
        for (kind, agent, handoff_id, variant), (evidence, opened, detail) in sorted(
            self.found.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3] or "")
        ):
            k = EnvelopeFlagKind(kind)
            flag = Flag(k, ENVELOPE_SEVERITY[k], tuple(sorted(evidence)), opened, variant, detail)
            flags.append(CaseFlag(flag, agent, handoff_id))
        return tuple(flags)


def first_receivers(items: Iterable[Item]) -> dict[str, tuple[str, bytes]]:
    """Each context id's first receiver (canonical order) and the evidence of it, over
    handoff messages with a known receiver."""
    first: dict[str, tuple[tuple[int, str], str, bytes]] = {}
    for item in items:
        if item.context_id and item.to_agent and item.kind in _MESSAGES:
            seen = first.get(item.context_id)
            if seen is None or item.order < seen[0]:
                first[item.context_id] = (item.order, item.to_agent, item.digest)
    return {context: (receiver, digest) for context, (_, receiver, digest) in first.items()}


_MESSAGES = (ItemKind.HANDOFF.value, ItemKind.INVALID.value)
# An item's kind is its text: compared with these, read once, not with ``ItemKind.X``, which
# Python 3.11 reads through the enum metaclass's ``__getattr__`` hook (~900 instructions a
# read, a few reads an item for each of the ledger's passes).
_HANDOFF = ItemKind.HANDOFF.value
_ACCEPTED = ItemKind.ACCEPTED.value
_REJECTED = ItemKind.REJECTED.value
_EVENT = ItemKind.EVENT.value
_INVALID = ItemKind.INVALID.value


def derive_ledger(
    case_id: str | None,
    items: Iterable[Item],
    *,
    now: int,
    rules: CaseRules,
    contexts: Mapping[str, tuple[str, bytes]] | None = None,
    events: bool = True,
) -> Ledger:
    """The ledger of one case (``case_id`` None: items whose case could not be read) at
    clock ``now``. ``contexts``: ``first_receivers`` over every case's items. ``events``
    False: without the case page's ``events`` and ``responses`` (left empty), which
    nothing stored is derived from (ingest derives each case again at every batch)."""
    ordered = sorted({i.key: i for i in items}.values(), key=lambda i: i.order)
    handoffs = _handoffs(ordered)
    links = _links(ordered, handoffs)
    flags = _Flags()
    bands = _bands(ordered, handoffs, links, flags)
    _message_flags(ordered, rules, flags)
    _stale_epochs(handoffs, bands, flags)
    _fenced_writes(ordered, bands, flags)
    _releases(ordered, handoffs, bands, case_id, flags)
    deadline = _lost(ordered, handoffs, links, now, rules, flags)
    _context_reuse(ordered, contexts or {}, flags)
    epochs = tuple(
        Epoch(b.epoch, b.owner, b.start, bands[n].start if n < len(bands) else None, b.handoff_id)
        for n, b in enumerate(bands, 1)
    )
    current = bands[-1] if bands else None
    return Ledger(
        case_id=case_id,
        owner=current.owner if current else None,
        epoch=current.epoch if current else None,
        epochs=epochs,
        events=tuple(_event(i, links, handoffs) for i in ordered) if events else (),
        responses=_responses(ordered, links) if events else {},
        flags=flags.result(),
        handoffs=len(handoffs),
        last_at=max((i.at for i in ordered), default=0),
        deadline=deadline,
    )


# --- handoffs, responses and bands ------------------------------------------------------


def _handoffs(ordered: Sequence[Item]) -> dict[str, _Handoff]:
    """Valid handoffs by id, each with its receipts (a resend carries the same id)."""
    found: dict[str, _Handoff] = {}
    for item in ordered:
        if item.kind == _HANDOFF and item.handoff_id:
            found.setdefault(item.handoff_id, _Handoff(item.handoff_id, item)).items.append(item)
    return found


def _links(ordered: Sequence[Item], handoffs: Mapping[str, _Handoff]) -> dict[str, _Handoff]:
    """Each response's handoff (by item key): by handoff id, else the handoff message's
    task id, else (for an acceptance) the earliest handoff of the epoch before its own."""
    by_task: dict[str, _Handoff] = {}
    by_epoch: dict[int, _Handoff] = {}
    for h in handoffs.values():
        for i in h.items:
            if i.task_id:
                by_task.setdefault(i.task_id, h)
        if h.first.epoch is not None:
            by_epoch.setdefault(h.first.epoch, h)
    links: dict[str, _Handoff] = {}
    for item in ordered:
        if item.kind not in (_ACCEPTED, _REJECTED):
            continue
        linked = handoffs.get(item.handoff_id or "") or by_task.get(item.task_id or "")
        if linked is None and item.kind == _ACCEPTED and item.epoch:
            linked = by_epoch.get(item.epoch - 1)
        if linked is not None:
            links[item.key] = linked
    return links


def _bands(
    ordered: Sequence[Item],
    handoffs: Mapping[str, _Handoff],
    links: Mapping[str, _Handoff],
    flags: _Flags,
) -> list[_Band]:
    bands: dict[int, _Band] = {}
    for item in ordered:
        if item.kind != _ACCEPTED or item.epoch is None:
            continue
        linked = links.get(item.key)
        owner = (linked.to_agent if linked else None) or UNKNOWN_AGENT
        handoff_id = linked.handoff_id if linked else item.handoff_id
        band = bands.get(item.epoch)
        if band is None:
            bands[item.epoch] = _Band(item.epoch, owner, item.at, handoff_id, {item.digest})
        elif band.owner != owner:
            flags.add(
                EnvelopeFlagKind.TWO_OWNERS,
                agent=owner,
                handoff_id=_hop(handoff_id or item.key),
                evidence=band.evidence | {item.digest},
                at=item.at,
                detail=f"two acceptances of epoch {item.epoch}: {band.owner} and {owner}",
                variant="acceptance",
            )
    ordered_bands = sorted(bands.values(), key=lambda b: (b.start, b.epoch))
    if handoffs:
        first = min(handoffs.values(), key=lambda h: h.first.order).first
        if first.epoch is not None and not any(b.start <= first.at for b in ordered_bands):
            implied = _Band(first.epoch, first.agent or UNKNOWN_AGENT, first.at, None, set())
            ordered_bands.insert(0, implied)
    return ordered_bands


def _responses(
    ordered: Sequence[Item], links: Mapping[str, _Handoff]
) -> dict[str, tuple[str, str | None]]:
    # The first response to each handoff is its answer.
    answers: dict[str, tuple[str, str | None]] = {}
    for item in ordered:
        linked = links.get(item.key)
        if linked is not None and linked.handoff_id not in answers:
            answers[linked.handoff_id] = (item.kind, item.detail)
    return answers


def _event(
    item: Item, links: Mapping[str, _Handoff], handoffs: Mapping[str, _Handoff]
) -> CaseEvent:
    kind, agent, handoff_id, detail = item.kind, item.agent, item.handoff_id, item.detail
    if item.kind == _EVENT:
        kind = item.action or "act"
    elif item.kind in (_ACCEPTED, _REJECTED):
        linked = links.get(item.key)
        agent = linked.to_agent if linked else None
        handoff_id = linked.handoff_id if linked else item.handoff_id
    elif item.kind == _INVALID:
        detail = "; ".join(item.errors + tuple(f"version drift: {m}" for m in item.drift))
    outcome = item.outcome if item.kind == _EVENT else None
    return CaseEvent(item.at, kind, agent, item.epoch, handoff_id, outcome, detail, item.source)


def _hop(handoff_id: str) -> str:
    return handoff_id[:HOP_CHARS]


def _handoff_of(item: Item) -> str:
    return _hop(item.handoff_id or item.key)


# --- flags -------------------------------------------------------------------------------


def _message_flags(ordered: Sequence[Item], rules: CaseRules, flags: _Flags) -> None:
    """What one message shows on its own: its envelope, references, text and facts."""
    for item in ordered:
        if item.kind == _INVALID and item.errors:
            detail = "; ".join(item.errors)
            flags.of_message(
                EnvelopeFlagKind.INVALID_ENVELOPE, item, variant=_invalid(item), detail=detail
            )
        for media in item.drift:
            detail = f"{media} is not an accepted envelope type; not read"
            flags.of_message(EnvelopeFlagKind.VERSION_DRIFT, item, variant=media, detail=detail)
        _reference_flags(item, flags)
        if item.text_bytes > rules.transcript_bytes:
            detail = f"{item.text_bytes} bytes of inline text (limit {rules.transcript_bytes})"
            flags.of_message(EnvelopeFlagKind.TRANSCRIPT_DUMP, item, detail=detail)
        unsourced = _unsourced(item)
        if unsourced:
            detail = "facts without a source: " + ", ".join(unsourced)
            flags.of_message(EnvelopeFlagKind.UNSOURCED_FACT, item, detail=detail)


def _invalid(item: Item) -> str:
    """What was invalid: a case event, an acceptance or rejection, the envelope count, or
    the envelope's schema."""
    if item.errors[0].startswith("case_event"):
        return "event"
    if item.envelope is not None and "accepted" in item.envelope:
        return "response"
    return "count" if item.errors[0].startswith(COUNT_ERROR) else "schema"


def _reference_flags(item: Item, flags: _Flags) -> None:
    for ref in item.references:
        url = str(ref.get("url"))[:200]
        if ref.get("hash") == "missing-hash":
            flags.of_message(
                EnvelopeFlagKind.MISSING_HASH, item, detail=f"{url}: {ref.get('detail')}"
            )
        elif ref.get("hash") == "mismatch":
            detail = f"{url}: {ref.get('detail')}"
            flags.of_message(EnvelopeFlagKind.REFERENCE_MISMATCH, item, detail=detail)
        if ref.get("expired"):
            detail = f"{url}: expired at {ref.get('expires')}, before it was received"
            flags.of_message(EnvelopeFlagKind.EXPIRED_REFERENCE, item, detail=detail)


def _unsourced(item: Item) -> list[str]:
    if item.kind != _HANDOFF or item.envelope is None:
        return []
    facts = item.envelope.get("facts")
    return [
        str(f.get("key"))
        for f in (facts if isinstance(facts, list) else [])
        if isinstance(f, Mapping) and not f.get("source")
    ]


def _stale_epochs(handoffs: Mapping[str, _Handoff], bands: Sequence[_Band], flags: _Flags) -> None:
    for h in handoffs.values():
        band = band_at(bands, h.first.at)
        if band is not None and h.first.epoch is not None and band.epoch != h.first.epoch:
            flags.add(
                EnvelopeFlagKind.STALE_EPOCH,
                agent=h.first.agent,
                handoff_id=_hop(h.handoff_id),
                evidence=h.digests | band.evidence,
                at=h.first.at,
                detail=f"handoff at epoch {h.first.epoch}; the ledger's epoch is {band.epoch}",
            )


def fenced(epoch: int | None, band: _Band | Epoch | None) -> bool:
    """Whether a write or act carrying ``epoch`` is one the epoch fence should have stopped,
    given the band in force when it happened (``band_at``): its epoch is older than that
    band's, and the band was begun by an acceptance. The implied band of a case's first
    handoff (no handoff id) fences nothing: no acceptance has set an epoch to fence by yet.
    The one statement of this rule: the ledger flags by it and the timeline draws by it."""
    if band is None or band.handoff_id is None or epoch is None:
        return False
    return epoch < band.epoch


def band_at(bands: Sequence[_B], at: int) -> _B | None:
    """The band in force at ``at``: the last to start at or before it (bands in order)."""
    current = None
    for band in bands:
        if band.start > at:
            break
        current = band
    return current


def _fenced_writes(ordered: Sequence[Item], bands: Sequence[_Band], flags: _Flags) -> None:
    for item in ordered:
        if item.kind != _EVENT or item.action not in ("write", "act"):
            continue
        band = band_at(bands, item.at)
        if band is None or not fenced(item.epoch, band):
            continue
        if item.outcome != "rejected":
            flags.add(
                EnvelopeFlagKind.TWO_OWNERS,
                agent=item.agent,
                handoff_id=_hop(band.handoff_id),
                evidence=band.evidence | {item.digest},
                at=item.at,
                detail=(
                    f"{item.agent} {item.action} at epoch {item.epoch} after epoch {band.epoch} "
                    f"was accepted by {band.owner}"
                    + (" (applied)" if item.outcome == "applied" else "")
                ),
                variant="stale-write",
            )


def _releases(
    ordered: Sequence[Item],
    handoffs: Mapping[str, _Handoff],
    bands: Sequence[_Band],
    case_id: str | None,
    flags: _Flags,
) -> None:
    for mark in ordered:
        if mark.kind != _EVENT or mark.action != "handed-off":
            continue
        band = band_at(bands, mark.at)
        if band is not None and band.owner != mark.agent:
            continue  # released after someone else accepted
        latest = _released_handoff(mark, handoffs)
        why = "before any acceptance" if band is None else f"while it still owns epoch {band.epoch}"
        flags.add(
            EnvelopeFlagKind.RELEASE_BEFORE_ACCEPT,
            agent=mark.agent,
            handoff_id=_hop(latest.handoff_id if latest else case_id or mark.key),
            evidence={mark.digest} | (latest.digests if latest else set()),
            at=mark.at,
            detail=f"{mark.agent} marked the case handed off {why}",
        )


def _released_handoff(mark: Item, handoffs: Mapping[str, _Handoff]) -> _Handoff | None:
    """The handoff a mark releases: its agent's latest at or before it, else (a mark made
    before sending) its agent's first after it. An agent that owned the case twice is
    judged on the ownership the mark falls in."""
    sent = sorted(
        (h for h in handoffs.values() if h.first.agent == mark.agent), key=lambda h: h.first.order
    )
    before = [h for h in sent if h.first.at <= mark.at]
    return before[-1] if before else next(iter(sent), None)


def _lost(
    ordered: Sequence[Item],
    handoffs: Mapping[str, _Handoff],
    links: Mapping[str, _Handoff],
    now: int,
    rules: CaseRules,
    flags: _Flags,
) -> int | None:
    """Flag handoffs left unanswered past the window; return the next window to run out."""
    answered: dict[str, int] = {}
    for item in ordered:
        linked = links.get(item.key)
        if linked is not None:
            answered.setdefault(linked.handoff_id, item.at)
    deadline = None
    for h in handoffs.values():
        due = h.first.at + rules.accept_window
        if answered.get(h.handoff_id, due + 1) <= due:
            continue
        if now < due:
            deadline = due if deadline is None else min(deadline, due)
            continue
        sender = h.first.agent
        released = any(
            i.kind == _EVENT
            and i.agent == sender
            and i.action == "handed-off"
            and h.first.at <= i.at <= due
            for i in ordered
        )
        active = any(
            i.kind == _EVENT
            and i.agent == sender
            and i.action in ("write", "act")
            and i.at > h.first.at
            for i in ordered
        )
        stopped = released or not active
        kind = EnvelopeFlagKind.NO_OWNER if stopped else EnvelopeFlagKind.LOST_ACCEPTANCE
        why = "and the sender stopped acting" if stopped else "while the sender still acts"
        flags.add(
            kind,
            agent=sender,
            handoff_id=_hop(h.handoff_id),
            evidence=h.digests,
            at=due,
            detail=f"no acceptance or rejection within {rules.accept_window} s {why}",
        )
    return deadline


def _context_reuse(
    ordered: Sequence[Item], contexts: Mapping[str, tuple[str, bytes]], flags: _Flags
) -> None:
    for item in ordered:
        if item.kind not in _MESSAGES or not item.context_id or not item.to_agent:
            continue
        first = contexts.get(item.context_id)
        if first is None or first[0] == item.to_agent:
            continue
        flags.add(
            EnvelopeFlagKind.CONTEXT_ID_REUSE,
            agent=item.agent,
            handoff_id=_handoff_of(item),
            evidence={item.digest, first[1]},
            at=item.at,
            detail=(
                f"context id {item.context_id[:200]!r} was first presented to {first[0]}, "
                f"now to {item.to_agent}"
            ),
        )
