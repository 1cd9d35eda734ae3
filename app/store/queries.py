"""The reads the CLI and the HTTP API need, and the one write operators make (flag actions).

Every function takes the session first and keyword-only arguments after it. Listings use
keyset pagination (``after`` = the last item of the previous page, ``limit``). Callers
should ``sweep`` first (``app.store.derive.sweep``) so time-based states are current.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from handoff_context import digest_text
from sqlalchemy import and_, func, or_, select, tuple_, update
from sqlmodel import Session

from app.errors import HandoffTraceError
from app.store.db import pair_params, pairs_in
from app.store.models import (
    ActionRow,
    ElementRow,
    FlagRow,
    HopRow,
    LinkRow,
    ObservationRow,
    VerdictRow,
)


class FlagStatus(StrEnum):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    SNOOZED = "snoozed"
    RESOLVED = "resolved"


class FlagAction(StrEnum):
    ACKNOWLEDGE = "acknowledge"
    RESOLVE = "resolve"
    REOPEN = "reopen"
    ASSIGN = "assign"
    SNOOZE = "snooze"
    NOTE = "note"


class FlagActionError(HandoffTraceError):
    """An operator action that cannot apply (unknown flag, snooze without a time...)."""

    reason = "invalid-action"


# --- hops -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HopListing:
    hop: HopRow
    flags: tuple[str, ...]  # kinds of the hop's flags that are not resolved

    def to_json(self) -> dict[str, Any]:
        """The ``hops --json`` shape (issue 3, section 5)."""
        h = self.hop
        return {
            "offer": digest_text(h.offer),
            "iss": h.iss,
            "aud": h.aud,
            "hop": h.hop,
            "dialog": h.dialog,
            "task": h.task,
            "state": h.state,
            "a2a_state": h.a2a_state,
            "flags": list(self.flags),
        }


def list_hops(
    session: Session,
    *,
    state: str | None = None,
    flag: str | None = None,
    dialog: str | None = None,
    agent: str | None = None,
    since: int | None = None,
    until: int | None = None,
    after: tuple[int, str, str] | None = None,
    limit: int | None = None,
) -> list[HopListing]:
    """Hops in (iat, iss, hop) order. ``flag``: only hops with an unresolved flag of that
    kind; ``agent``: the offer's iss or aud; ``since``/``until``: the offer's iat range;
    ``after``: the (iat, iss, hop) of the previous page's last hop."""
    query = select(HopRow)
    if state is not None:
        query = query.where(HopRow.state == state)
    if flag is not None:
        # Joined to the (few) flagged hops, not EXISTS per hop: PostgreSQL would walk the
        # hops in order and probe the flags of each (~50,000 probes for a page among a
        # million hops, bench/query_scale.py).
        flagged = (
            select(FlagRow.iss, FlagRow.hop)
            .where(FlagRow.kind == flag, FlagRow.status != "resolved")
            .distinct()
            .subquery()
        )
        query = query.join(flagged, and_(flagged.c.iss == HopRow.iss, flagged.c.hop == HopRow.hop))
    if dialog is not None:
        query = query.where(HopRow.dialog == dialog)
    if agent is not None:
        query = query.where(or_(HopRow.iss == agent, HopRow.aud == agent))
    if since is not None:
        query = query.where(HopRow.iat >= since)
    if until is not None:
        query = query.where(HopRow.iat <= until)
    if after is not None:
        query = query.where(tuple_(HopRow.iat, HopRow.iss, HopRow.hop) > tuple_(*after))
    query = query.order_by(HopRow.iat, HopRow.iss, HopRow.hop)
    if limit is not None:
        query = query.limit(limit)
    hops = list(session.execute(query).scalars())
    kinds = flag_kinds(session, [(h.iss, h.hop) for h in hops])
    return [HopListing(h, kinds.get((h.iss, h.hop), ())) for h in hops]


def get_hop(session: Session, *, offer: bytes) -> HopListing | None:
    """The hop whose offer (by the canonical rule) has this digest."""
    hop = session.execute(select(HopRow).where(HopRow.offer == offer)).scalars().first()
    if hop is None:
        return None
    kinds = flag_kinds(session, [(hop.iss, hop.hop)])
    return HopListing(hop, kinds.get((hop.iss, hop.hop), ()))


def flag_kinds(
    session: Session, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], tuple[str, ...]]:
    """The kinds of the unresolved flags on each hop ``(iss, hop)`` of ``keys``, sorted."""
    found: dict[tuple[str, str], set[str]] = {}
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        rows = session.execute(
            select(FlagRow.iss, FlagRow.hop, FlagRow.kind).where(
                pairs_in(FlagRow.iss, FlagRow.hop), FlagRow.status != "resolved"
            ),
            pair_params(chunk),
        )
        for iss, hop, kind in rows:
            found.setdefault((iss, hop), set()).add(kind)
    return {key: tuple(sorted(kinds)) for key, kinds in found.items()}


# --- dialogs and agents -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DialogSummary:
    dialog: str
    hops: int
    first_iat: int
    last_iat: int


def list_dialogs(
    session: Session, *, after: str | None = None, limit: int | None = None
) -> list[DialogSummary]:
    """Dialogs with hops, in dialog order; ``after``: the previous page's last dialog."""
    query = select(HopRow.dialog, func.count(), func.min(HopRow.iat), func.max(HopRow.iat))
    if after is not None:
        query = query.where(HopRow.dialog > after)
    query = query.group_by(HopRow.dialog).order_by(HopRow.dialog)
    if limit is not None:
        query = query.limit(limit)
    return [DialogSummary(*row) for row in session.execute(query)]


@dataclass(frozen=True, slots=True)
class TreeNode:
    hop: HopListing
    parent: bytes | None  # the offer this hop's offer names as ``prev`` (may be unknown)


def dialog_tree(session: Session, *, dialog: str) -> list[TreeNode]:
    """The hops of one dialog with their chain links (profile §7), in (iat, iss, hop) order:
    a node whose ``parent`` is the offer of another node hangs below it; a parent outside
    the dialog, or not stored, makes the node a root of this dialog's tree."""
    query = select(HopRow).where(HopRow.dialog == dialog)
    hops = list(session.execute(query.order_by(HopRow.iat, HopRow.iss, HopRow.hop)).scalars())
    # By dialog, not by lists of the hops' keys: one indexed query each however large the
    # dialog (a 2,000-hop dialog took 4 chunks of 500 keys each, bench/query_scale.py).
    flagged = session.execute(
        select(FlagRow.iss, FlagRow.hop, FlagRow.kind)
        .join(HopRow, and_(HopRow.iss == FlagRow.iss, HopRow.hop == FlagRow.hop))
        .where(HopRow.dialog == dialog, FlagRow.status != "resolved")
    )
    kinds: dict[tuple[str, str], set[str]] = {}
    for iss, hop, kind in flagged:
        kinds.setdefault((iss, hop), set()).add(kind)
    links = session.execute(select(LinkRow.offer, LinkRow.prev).where(LinkRow.dialog == dialog))
    parents = {offer: prev for offer, prev in links}
    return [
        TreeNode(HopListing(h, tuple(sorted(kinds.get((h.iss, h.hop), ())))), parents.get(h.offer))
        for h in hops
    ]


@dataclass(frozen=True, slots=True)
class AgentSummary:
    agent: str
    issued: int  # hops it delegated (offer iss)
    received: int  # hops delegated to it (offer aud)


def list_agents(session: Session) -> list[AgentSummary]:
    """Every identifier that issued or received a hop, in identifier order."""
    issued = dict(session.execute(select(HopRow.iss, func.count()).group_by(HopRow.iss)).all())
    received = dict(session.execute(select(HopRow.aud, func.count()).group_by(HopRow.aud)).all())
    return [
        AgentSummary(agent, issued.get(agent, 0), received.get(agent, 0))
        for agent in sorted(set(issued) | set(received))
    ]


# --- flags ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FlagListing:
    flag: FlagRow
    status: str  # effective: a snooze that has run out reads as open

    def to_json(self) -> dict[str, Any]:
        """The ``flags --json`` shape (issue 3, section 5)."""
        f = self.flag
        return {
            "id": f.id,
            "kind": f.kind,
            "variant": f.variant,
            "severity": f.severity,
            "status": self.status,
            "iss": f.iss,
            "hop": f.hop,
            "offer": None if f.offer is None else digest_text(f.offer),
            "evidence": list(f.evidence),
            "opened_at": f.opened_at,
            "case_id": f.case_id,
        }


def effective_status(status: str, now: int) -> Any:
    """A WHERE clause: flags whose status at ``now`` is ``status`` (a snooze that has run
    out counts as open)."""
    snoozed = and_(FlagRow.status == "snoozed", FlagRow.snoozed_until > now)
    woken = and_(FlagRow.status == "snoozed", FlagRow.snoozed_until <= now)
    if status == FlagStatus.SNOOZED:
        return snoozed
    if status == FlagStatus.OPEN:
        return or_(FlagRow.status == "open", woken)
    return FlagRow.status == status


def list_flags(
    session: Session,
    *,
    now: int,
    kind: str | None = None,
    status: str | None = None,
    iss: str | None = None,
    hop: str | None = None,
    case_id: str | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> list[FlagListing]:
    """Flags in id order; ``status`` is judged at ``now`` (a snooze runs out);
    ``case_id`` keeps the flags of one envelope case."""
    query = select(FlagRow)
    if case_id is not None:
        query = query.where(FlagRow.case_id == case_id)
    if kind is not None:
        query = query.where(FlagRow.kind == kind)
    if status is not None:
        query = query.where(effective_status(status, now))
    if iss is not None:
        query = query.where(FlagRow.iss == iss)
    if hop is not None:
        query = query.where(FlagRow.hop == hop)
    if after is not None:
        query = query.where(FlagRow.id > after)
    query = query.order_by(FlagRow.id)
    if limit is not None:
        query = query.limit(limit)
    return [FlagListing(f, status_at(f, now)) for f in session.execute(query).scalars()]


def status_at(flag: FlagRow, now: int) -> str:
    """The flag's status at ``now`` (a snooze that has run out is open again)."""
    if flag.status == "snoozed" and (flag.snoozed_until is None or flag.snoozed_until <= now):
        return FlagStatus.OPEN.value
    return flag.status


def act_on_flag(
    session: Session,
    *,
    flag_id: int,
    actor: str,
    action: FlagAction,
    now: int,
    note: str | None = None,
    assignee: str | None = None,
    snoozed_until: int | None = None,
) -> FlagListing:
    """Apply one operator action and write it to the audit log.

    ``assign`` needs ``assignee`` (None unassigns); ``snooze`` needs ``snoozed_until`` after
    ``now``; ``note`` replaces the flag's note. Raises FlagActionError.
    """
    flag = session.get(FlagRow, flag_id)
    if flag is None:
        raise FlagActionError(f"no flag {flag_id}")
    changes: dict[str, Any] = {"updated_at": now}
    if action is FlagAction.ACKNOWLEDGE:
        changes["status"] = FlagStatus.ACKNOWLEDGED.value
    elif action is FlagAction.RESOLVE:
        changes["status"] = FlagStatus.RESOLVED.value
    elif action is FlagAction.REOPEN:
        changes["status"] = FlagStatus.OPEN.value
    elif action is FlagAction.ASSIGN:
        changes["assignee"] = assignee
    elif action is FlagAction.SNOOZE:
        if snoozed_until is None or snoozed_until <= now:
            raise FlagActionError("snooze needs a time after now")
        changes.update(status=FlagStatus.SNOOZED.value, snoozed_until=snoozed_until)
    if note is not None:
        changes["note"] = note
    session.execute(update(FlagRow).where(FlagRow.id == flag_id).values(**changes))
    session.execute(
        ActionRow.__table__.insert().values(
            flag_id=flag_id,
            actor=actor,
            at=now,
            action=action.value,
            note=note,
            until=snoozed_until if action is FlagAction.SNOOZE else None,
            assignee=assignee if action is FlagAction.ASSIGN else None,
        )
    )
    session.refresh(flag)
    return FlagListing(flag, status_at(flag, now))


def flag_actions(session: Session, *, flag_id: int) -> list[ActionRow]:
    """The audit log of one flag, oldest first."""
    query = select(ActionRow).where(ActionRow.flag_id == flag_id).order_by(ActionRow.id)
    return list(session.execute(query).scalars())


# --- elements ---------------------------------------------------------------------------


def get_element(session: Session, *, digest: bytes) -> ElementRow | None:
    """A stored element; ``octets`` exactly as received, ``form`` jws or cose."""
    return session.get(ElementRow, digest)


# --- for the HTTP API -------------------------------------------------------------------


def hop_for_offer(session: Session, *, offer: bytes) -> HopListing | None:
    """The hop of any offer stored for it: the canonical one (``get_hop``) or another offer
    signed for the same (iss, hop), such as the second offer of an equivocation."""
    found = get_hop(session, offer=offer)
    if found is not None:
        return found
    element = session.get(ElementRow, offer)
    if element is None or element.type != "offer":
        return None
    hop = session.get(HopRow, (element.iss, element.hop))
    if hop is None:
        return None
    kinds = flag_kinds(session, [(hop.iss, hop.hop)])
    return HopListing(hop, kinds.get((hop.iss, hop.hop), ()))


def hop_elements(session: Session, *, iss: str, hop: str) -> list[ElementRow]:
    """The stored offers and statuses of one hop, in (iat, digest) order."""
    query = (
        select(ElementRow)
        .where(ElementRow.hop_iss == iss, ElementRow.hop == hop)
        .order_by(ElementRow.iat, ElementRow.digest)
    )
    return list(session.execute(query).scalars())


def get_flag(session: Session, *, flag_id: int, now: int) -> FlagListing | None:
    """One flag, its status judged at ``now``."""
    flag = session.get(FlagRow, flag_id)
    return None if flag is None else FlagListing(flag, status_at(flag, now))


@dataclass(frozen=True, slots=True)
class StoreCounts:
    """What the store holds, for the service's metrics."""

    elements: dict[str, int]  # by type: offer, status
    observations: int
    verdicts: dict[str, int]  # by outcome
    hops: dict[str, int]  # by state
    flags: dict[tuple[str, str], int]  # by (kind, status as of now)
    open_flags: dict[tuple[str, str], int]  # open as of now, by (kind, severity)


def hop_count(session: Session) -> int:
    """How many hops the store holds."""
    return int(session.execute(select(func.count()).select_from(HopRow)).scalar_one())


def store_counts(session: Session, *, now: int) -> StoreCounts:
    """Counts of elements, observations, verdicts, hops and flags (grouped queries only)."""

    def grouped(*columns: Any) -> dict[Any, int]:
        rows = session.execute(select(*columns, func.count()).group_by(*columns))
        return {(row[0] if len(columns) == 1 else tuple(row[:-1])): row[-1] for row in rows}

    flags: dict[tuple[str, str], int] = {}
    open_flags: dict[tuple[str, str], int] = {}
    snoozed = func.coalesce(FlagRow.snoozed_until, 0) > now
    rows = grouped(FlagRow.kind, FlagRow.status, snoozed, FlagRow.severity)
    for (kind, status, still, severity), n in rows.items():
        # A snooze that has run out reads as open, as in ``list_flags``.
        effective = "open" if status == "snoozed" and not still else status
        flags[(kind, effective)] = flags.get((kind, effective), 0) + n
        if effective == "open":
            open_flags[(kind, severity)] = open_flags.get((kind, severity), 0) + n
    observations = session.execute(select(func.count()).select_from(ObservationRow))
    return StoreCounts(
        elements=grouped(ElementRow.type),
        observations=int(observations.scalar_one()),
        verdicts=grouped(VerdictRow.outcome),
        hops=grouped(HopRow.state),
        flags=flags,
        open_flags=open_flags,
    )


def observations_of(session: Session, *, digests: Sequence[bytes]) -> list[ObservationRow]:
    """Every receipt of the elements ``digests``, in the order they were received."""
    query = (
        select(ObservationRow)
        .where(ObservationRow.digest.in_(list(digests)))
        .order_by(ObservationRow.received_at, ObservationRow.id)
    )
    return list(session.execute(query).scalars())
