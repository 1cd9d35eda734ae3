"""The reads the operator dashboard needs beyond ``app.store.queries``: grouped counts for
the overview, the triage queue's filters, a hop's verdicts and neighbours, and search.

Like ``queries``, every function takes the session first and keyword-only arguments after
it, and callers sweep first so time-based states are current. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from handoff_context import digest_text, parse_digest_text
from handoff_context.errors import MalformedError
from sqlalchemy import and_, case, func, or_, select
from sqlmodel import Session

from app.store.models import (
    ElementRow,
    FlagRow,
    HopRow,
    LinkRow,
    ObservationRow,
    RefOutcomeRow,
    RejectedObservationRow,
    RejectedOctetsRow,
    VerdictRow,
)
from app.store.queries import (
    FlagListing,
    FlagStatus,
    HopListing,
    effective_status,
    flag_kinds,
    status_at,
)

# --- overview ---------------------------------------------------------------------------


def hop_states(session: Session) -> dict[str, int]:
    rows = session.execute(select(HopRow.state, func.count()).group_by(HopRow.state))
    return {state: n for state, n in rows}


# Severities worst first; anything unknown sorts last rather than first.
SEVERITY_ORDER = ("critical", "high", "medium", "low")
SEVERITY_RANK = case(
    {name: rank for rank, name in enumerate(SEVERITY_ORDER)},
    value=FlagRow.severity,
    else_=len(SEVERITY_ORDER),
)


def severity_rank(name: str) -> int:
    return SEVERITY_ORDER.index(name) if name in SEVERITY_ORDER else len(SEVERITY_ORDER)


def open_flag_counts(session: Session, *, now: int) -> list[tuple[str, str, int]]:
    """(kind, severity, count) of the flags open at ``now`` (a run-out snooze is open),
    worst severity first, then the most numerous."""
    query = (
        select(FlagRow.kind, FlagRow.severity, func.count())
        .where(effective_status(FlagStatus.OPEN, now))
        .group_by(FlagRow.kind, FlagRow.severity)
    )
    rows = [(k, s, int(n)) for k, s, n in session.execute(query)]
    return sorted(rows, key=lambda r: (severity_rank(r[1]), -r[2], r[0]))


def urgent_count(session: Session, *, now: int) -> int:
    """Open critical and high flags: the number beside the header's triage link."""
    query = (
        select(func.count())
        .select_from(FlagRow)
        .where(effective_status(FlagStatus.OPEN, now), FlagRow.severity.in_(URGENT))
    )
    return int(session.execute(query).scalar_one())


URGENT = ("critical", "high")


@dataclass(frozen=True, slots=True)
class Activity:
    """Hops offered (by offer ``iat``) and flags opened, per time bucket of ``width`` s."""

    width: int
    hops: dict[int, dict[str, int]]  # bucket start -> state -> count
    flags: dict[int, int]  # bucket start -> flags opened


def activity(session: Session, *, buckets: int = 48) -> Activity:
    low, high = session.execute(select(func.min(HopRow.iat), func.max(HopRow.iat))).one()
    if low is None:
        return Activity(60, {}, {})
    span = max(int(high) - int(low), 60)
    width = max(60, -(-span // buckets))
    start = (int(low) // width) * width
    bucket = (HopRow.iat - start) // width
    hops: dict[int, dict[str, int]] = {}
    for b, state, n in session.execute(
        select(bucket, HopRow.state, func.count()).group_by(bucket, HopRow.state)
    ):
        hops.setdefault(start + int(b) * width, {})[state] = n
    flag_bucket = (FlagRow.opened_at - start) // width
    flags = {
        start + int(b) * width: n
        for b, n in session.execute(
            select(flag_bucket, func.count())
            .where(FlagRow.opened_at >= start)
            .group_by(flag_bucket)
        )
    }
    return Activity(width, hops, flags)


@dataclass(frozen=True, slots=True)
class Rejection:
    verdict_id: int
    digest: bytes
    element: str
    reason: str | None
    detail: str | None
    judged_at: int
    source: str
    iss: str | None
    hop: str | None


def latest_rejections(session: Session, *, limit: int = 10) -> list[Rejection]:
    """The most recently judged rejected observations, newest first."""
    query = (
        select(VerdictRow, ObservationRow.source, ElementRow.iss, ElementRow.hop)
        .join(ObservationRow, ObservationRow.id == VerdictRow.observation_id)
        .outerjoin(ElementRow, ElementRow.digest == VerdictRow.digest)
        .where(VerdictRow.outcome == "reject")
        .order_by(VerdictRow.judged_at.desc(), VerdictRow.id.desc())
        .limit(limit)
    )
    out = []
    for v, source, iss, hop in session.execute(query):
        out.append(
            Rejection(v.id, v.digest, v.element, v.reason, v.detail, v.judged_at, source, iss, hop)
        )
    return out


@dataclass(frozen=True, slots=True)
class Refusal:
    """An element refused in a dialog or hop: ``page`` says whether it parsed (its hop page
    shows the element decoded) or not (the same page shows the octets as received).
    ``dialog`` is the dialog its payload names, or for octets that never parsed the dialog
    of the capture record that carried them."""

    digest: bytes
    element: str
    reason: str | None
    iss: str | None
    hop: str | None
    judged_at: int
    page: bool
    dialog: str | None = None


def refused_in_dialog(session: Session, *, dialog: str, limit: int = 50) -> list[Refusal]:
    """The elements refused in ``dialog``, newest first, one row per element: a refused
    offer makes no hop, so the dialog's tree never shows it. Parsed elements are found by
    the dialog their payload names (``ix_element_dialog``), refused octets by the dialog of
    the capture record that carried them. That column holds host text (an A2A contextId)
    of any length, too long for a B-tree entry on PostgreSQL, so it has no index: refused
    receipts are read through, as few as refusals are."""
    return _refusals(
        session,
        parsed=ElementRow.dialog == dialog,
        octets=RejectedObservationRow.dialog == dialog,
        limit=limit,
    )


def refused_matching(session: Session, *, text: str, limit: int = 20) -> list[Refusal]:
    """Refused elements that name ``text`` exactly as their dialog or hop id, and refused
    octets whose digest starts with it (4 characters at least): what search shows for a
    dialog or hop that a refusal never let become a hop. A hop id is looked up per issuer
    through the (hop_iss, hop) indexes, walking the few distinct issuers."""
    by_hop = and_(ElementRow.hop_iss.in_(_distinct(ElementRow.hop_iss)), ElementRow.hop == text)
    octets_by_hop = and_(
        RejectedOctetsRow.hop_iss.in_(_distinct(RejectedOctetsRow.hop_iss)),
        RejectedOctetsRow.hop == text,
    )
    # One query per index (an OR of them could read the whole table instead).
    wanted = [
        (ElementRow.dialog == text, RejectedObservationRow.dialog == text),
        (by_hop, octets_by_hop),
    ]
    span = _digest_range(text)
    if span is not None:
        low, high = span
        prefix = RejectedOctetsRow.digest >= low
        if high is not None:
            prefix = and_(prefix, RejectedOctetsRow.digest < high)
        wanted.append((None, prefix))
    found: dict[bytes, Refusal] = {}
    for parsed, octets in wanted:
        for r in _refusals(session, parsed=parsed, octets=octets, limit=limit * 2):
            if r.dialog == text or r.hop == text or digest_text(r.digest).startswith(text):
                found.setdefault(r.digest, r)
    return sorted(found.values(), key=lambda r: r.judged_at, reverse=True)[:limit]


def _distinct(column: Any) -> Any:
    """The distinct non-null values of an indexed column, one index probe each (a recursive
    "loose index scan"; see ``_distinct_like``)."""
    walk = select(func.min(column).label("value")).cte(f"walk_{column.key}", recursive=True)
    following = select(func.min(column)).where(column > walk.c.value).scalar_subquery()
    walk = walk.union_all(select(following).where(walk.c.value.is_not(None)))
    return select(walk.c.value).where(walk.c.value.is_not(None))


def _refusals(session: Session, *, parsed: Any, octets: Any, limit: int) -> list[Refusal]:
    """Refused elements (a ``reject`` verdict) whose element row matches ``parsed`` (None:
    none), and refused octets whose receipt or octets row matches ``octets``; newest
    first."""
    judged = func.max(VerdictRow.judged_at)
    columns = (
        VerdictRow.digest,
        VerdictRow.element,
        VerdictRow.reason,
        ElementRow.iss,
        ElementRow.hop,
        ElementRow.dialog,
    )
    parsed_rows = (
        select(*columns, judged)
        .join(ElementRow, ElementRow.digest == VerdictRow.digest)
        .where(parsed, VerdictRow.outcome == "reject")
        .group_by(*columns)
        .order_by(judged.desc())
        .limit(limit)
    )
    ingested = func.max(RejectedObservationRow.ingested_at)
    octets_rows = (
        select(
            RejectedObservationRow.digest,
            RejectedOctetsRow.type,
            RejectedObservationRow.reason,
            RejectedOctetsRow.iss,
            RejectedOctetsRow.hop,
            func.max(RejectedObservationRow.dialog),
            ingested,
        )
        .join(RejectedOctetsRow, RejectedOctetsRow.digest == RejectedObservationRow.digest)
        .where(octets)
        .group_by(
            RejectedObservationRow.digest,
            RejectedOctetsRow.type,
            RejectedObservationRow.reason,
            RejectedOctetsRow.iss,
            RejectedOctetsRow.hop,
        )
        .order_by(ingested.desc())
        .limit(limit)
    )
    found: dict[bytes, Refusal] = {}
    queries = [(parsed_rows, True)] if parsed is not None else []
    for query, page in (*queries, (octets_rows, False)):
        for digest, element, reason, iss, hop, dialog, at in session.execute(query):
            if digest not in found:
                found[digest] = Refusal(
                    digest, element or "element", reason, iss, hop, int(at), page, dialog
                )
    return sorted(found.values(), key=lambda r: r.judged_at, reverse=True)[:limit]


# --- triage -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TriageRow:
    flag: FlagListing
    dialog: str | None
    aud: str | None
    state: str | None  # the hop's state, when the hop is known
    count: int = 1  # flags in its group (same kind, issuer and variant); 1 when ungrouped


# The queue's default status: open or acknowledged. An acknowledged flag is still open
# until it is resolved (someone is on it, nobody has fixed it): PagerDuty's "Open" tab and
# Grafana OnCall's default alert-group list show triggered/firing and acknowledged together.
# Snoozed flags stay out until their snooze runs out; resolved ones are done.
OPEN_OR_ACKNOWLEDGED = "open-or-acknowledged"


@dataclass(frozen=True, slots=True)
class TriageFilter:
    """What the queue shows. ``agent`` is the hop's issuer or delegate; ``assignee`` "-"
    means unassigned; ``severities`` any of them (empty: every severity); ``status`` a
    flag status at ``now`` or ``OPEN_OR_ACKNOWLEDGED``."""

    kind: str | None = None
    severities: tuple[str, ...] = ()
    status: str | None = None
    agent: str | None = None
    dialog: str | None = None
    assignee: str | None = None
    variant: str | None = None
    issuer: str | None = None  # the flag's own iss exactly (a group's members)


class Order(StrEnum):
    """Severity first, then age (the default, oldest first, so nothing waits forever);
    ``severity-newest`` for an incident's "what just broke"; plain age either way."""

    SEVERITY = "severity"
    SEVERITY_NEWEST = "severity-newest"
    OLDEST = "oldest"
    NEWEST = "newest"


_JOINED = and_(HopRow.iss == FlagRow.iss, HopRow.hop == FlagRow.hop, FlagRow.case_id.is_(None))


def _where(f: TriageFilter, now: int) -> list[Any]:
    where: list[Any] = []
    if f.kind:
        where.append(FlagRow.kind == f.kind)
    if f.severities:
        where.append(FlagRow.severity.in_(list(f.severities)))
    if f.status == OPEN_OR_ACKNOWLEDGED:
        where.append(
            or_(
                effective_status(FlagStatus.OPEN, now),
                effective_status(FlagStatus.ACKNOWLEDGED, now),
            )
        )
    elif f.status:
        where.append(effective_status(f.status, now))
    if f.agent:
        where.append(or_(FlagRow.iss == f.agent, HopRow.aud == f.agent))
    if f.issuer:
        where.append(FlagRow.iss == f.issuer)
    if f.dialog:
        where.append(HopRow.dialog == f.dialog)
    if f.variant == "-":
        where.append(FlagRow.variant.is_(None))
    elif f.variant:
        where.append(FlagRow.variant == f.variant)
    if f.assignee == "-":
        where.append(FlagRow.assignee.is_(None))
    elif f.assignee:
        where.append(FlagRow.assignee == f.assignee)
    return where


def _order(order: Order, opened: Any, ident: Any) -> tuple[Any, ...]:
    newest = order in (Order.NEWEST, Order.SEVERITY_NEWEST)
    age = (opened.desc(), ident.desc()) if newest else (opened, ident)
    if order in (Order.SEVERITY, Order.SEVERITY_NEWEST):
        return (SEVERITY_RANK, *age)
    return age


def triage(
    session: Session,
    *,
    now: int,
    filters: TriageFilter = TriageFilter(),  # frozen, so one shared default is safe
    order: Order = Order.SEVERITY,
    offset: int = 0,
    limit: int = 50,
) -> tuple[list[TriageRow], int]:
    """Flags matching every filter in ``order``, and how many match in all."""
    where = _where(filters, now)
    base = select(FlagRow, HopRow.dialog, HopRow.aud, HopRow.state).outerjoin(HopRow, _JOINED)
    query = base.where(*where).order_by(*_order(order, FlagRow.opened_at, FlagRow.id))
    rows = session.execute(query.offset(offset).limit(limit))
    found = [TriageRow(FlagListing(f, status_at(f, now)), d, a, s) for f, d, a, s in rows]
    found = _refused_dialogs(session, found)
    total = session.execute(
        select(func.count()).select_from(FlagRow).outerjoin(HopRow, _JOINED).where(*where)
    ).scalar_one()
    return found, int(total)


def triage_groups(
    session: Session,
    *,
    now: int,
    filters: TriageFilter = TriageFilter(),  # frozen, so one shared default is safe
    order: Order = Order.SEVERITY,
    offset: int = 0,
    limit: int = 50,
) -> tuple[list[TriageRow], int]:
    """The queue with similar flags folded together, as Sentry folds similar issues: one
    row per (kind, issuer, variant) (for a rejected element the variant is the reason), shown
    by its newest member, with the group's size; and how many groups match in all."""
    where = _where(filters, now)
    key = (FlagRow.kind, FlagRow.iss, func.coalesce(FlagRow.variant, ""))
    grouped = (
        select(
            func.max(FlagRow.id).label("newest"),
            func.count().label("n"),
            func.max(FlagRow.opened_at).label("opened"),
            func.min(SEVERITY_RANK).label("rank"),
        )
        .select_from(FlagRow)
        .outerjoin(HopRow, _JOINED)
        .where(*where)
        .group_by(*key)
        .subquery()
    )
    age = _order(order, grouped.c.opened, grouped.c.newest)
    if order in (Order.SEVERITY, Order.SEVERITY_NEWEST):
        age = (grouped.c.rank, *age[1:])
    page = session.execute(
        select(grouped.c.newest, grouped.c.n).order_by(*age).offset(offset).limit(limit)
    ).all()
    total = session.execute(select(func.count()).select_from(grouped)).scalar_one()
    counts = {int(i): int(n) for i, n in page}
    base = select(FlagRow, HopRow.dialog, HopRow.aud, HopRow.state).outerjoin(HopRow, _JOINED)
    rows = {
        f.id: TriageRow(FlagListing(f, status_at(f, now)), d, a, s, counts[int(f.id or 0)])
        for f, d, a, s in session.execute(base.where(FlagRow.id.in_(list(counts))))
    }
    return _refused_dialogs(session, [rows[i] for i in counts if i in rows]), int(total)


def _refused_dialogs(session: Session, rows: list[TriageRow]) -> list[TriageRow]:
    """Rows whose flag has no stored hop (a rejected-element flag on an offer refused
    before it made one) get the dialog their evidence names: the refused element's own
    dialog, or for octets that never parsed the dialog of the record that carried them."""
    wanted: dict[bytes, list[int]] = {}
    for i, r in enumerate(rows):
        f = r.flag.flag
        if r.dialog is None and f.case_id is None and f.evidence:
            try:
                wanted.setdefault(parse_digest_text(f.evidence[0], what="evidence"), []).append(i)
            except MalformedError:
                continue
    if not wanted:
        return rows
    digests = list(wanted)
    named = dict(
        session.execute(
            select(ElementRow.digest, ElementRow.dialog).where(ElementRow.digest.in_(digests))
        ).all()
    )
    carried = session.execute(
        select(RejectedObservationRow.digest, func.max(RejectedObservationRow.dialog))
        .where(RejectedObservationRow.digest.in_(digests))
        .group_by(RejectedObservationRow.digest)
    ).all()
    for digest, dialog in carried:
        named.setdefault(digest, dialog)
    out = list(rows)
    for digest, places in wanted.items():
        for i in places:
            if named.get(digest):
                out[i] = replace(rows[i], dialog=named[digest])
    return out


def group_ids(session: Session, *, now: int, filters: TriageFilter, limit: int) -> list[int]:
    """The ids of the flags matching ``filters`` (a group's members, for a bulk action),
    at most ``limit``."""
    query = (
        select(FlagRow.id)
        .select_from(FlagRow)
        .outerjoin(HopRow, _JOINED)
        .where(*_where(filters, now))
        .order_by(FlagRow.id)
        .limit(limit)
    )
    return [int(i) for (i,) in session.execute(query)]


def assignees(session: Session) -> list[str]:
    rows = session.execute(select(FlagRow.assignee).where(FlagRow.assignee.is_not(None)).distinct())
    return sorted(a for (a,) in rows)


# --- hops -------------------------------------------------------------------------------

UNRESOLVED = ("offered", "accepted", "expired")
# The hop list counts its matches up to here and says "more than" past it: an exact count
# of most of a million hops reads most of the table (~0.3 s, bench/query_scale.py).
COUNT_CAP = 10_000


def find_hops(
    session: Session,
    *,
    states: Sequence[str] = (),
    agent: str | None = None,
    dialog: str | None = None,
    offset: int = 0,
    limit: int = 50,
) -> tuple[list[HopListing], int]:
    """Hops in any of ``states`` (all when empty), oldest offer first, and the total, counted
    up to ``COUNT_CAP + 1`` (a total above ``COUNT_CAP`` means "more than that")."""
    where: list[Any] = []
    if states:
        where.append(HopRow.state.in_(list(states)))
    if agent:
        where.append(or_(HopRow.iss == agent, HopRow.aud == agent))
    if dialog:
        where.append(HopRow.dialog == dialog)
    query = select(HopRow).where(*where).order_by(HopRow.iat, HopRow.iss, HopRow.hop)
    hops = list(session.execute(query.offset(offset).limit(limit)).scalars())
    capped = select(HopRow.iss).where(*where).limit(COUNT_CAP + 1).subquery()
    total = session.execute(select(func.count()).select_from(capped)).scalar_one()
    kinds = flag_kinds(session, [(h.iss, h.hop) for h in hops])
    return [HopListing(h, kinds.get((h.iss, h.hop), ())) for h in hops], int(total)


@dataclass(frozen=True, slots=True)
class Judged:
    """One receipt of an element and the verdict it got, with its refs' outcomes."""

    verdict: VerdictRow
    observation: ObservationRow
    refs: tuple[RefOutcomeRow, ...]


def verdicts_of(session: Session, *, digest: bytes) -> list[Judged]:
    """Every observation of an element with its verdict, first received first."""
    rows = list(
        session.execute(
            select(VerdictRow, ObservationRow)
            .join(ObservationRow, ObservationRow.id == VerdictRow.observation_id)
            .where(VerdictRow.digest == digest)
            .order_by(ObservationRow.received_at, ObservationRow.id)
        )
    )
    ids = [v.id for v, _ in rows]
    refs: dict[int, list[RefOutcomeRow]] = {}
    if ids:
        for ref in session.execute(
            select(RefOutcomeRow)
            .where(RefOutcomeRow.verdict_id.in_(ids))
            .order_by(RefOutcomeRow.verdict_id, RefOutcomeRow.index)
        ).scalars():
            refs.setdefault(ref.verdict_id, []).append(ref)
    return [Judged(v, o, tuple(refs.get(v.id or 0, ()))) for v, o in rows]


def hop_neighbours(session: Session, *, offer: bytes) -> tuple[bytes | None, list[HopRow]]:
    """The offer this one names as ``prev`` (stored or not), and the hops below it."""
    parent = session.execute(select(LinkRow.prev).where(LinkRow.offer == offer)).scalar()
    below = select(LinkRow.offer).where(LinkRow.prev == offer)
    hops = session.execute(select(HopRow).where(HopRow.offer.in_(below)).order_by(HopRow.iat))
    return parent, list(hops.scalars())


def statuses_of(session: Session, *, offers: Sequence[bytes]) -> dict[bytes, list[ElementRow]]:
    """The stored statuses naming each offer, in (iat, digest) order."""
    found: dict[bytes, list[ElementRow]] = {}
    for start in range(0, len(offers), 500):
        query = (
            select(ElementRow)
            .where(ElementRow.type == "status", ElementRow.offer.in_(offers[start : start + 500]))
            .order_by(ElementRow.iat, ElementRow.digest)
        )
        for row in session.execute(query).scalars():
            assert row.offer is not None
            found.setdefault(row.offer, []).append(row)
    return found


def elements(session: Session, *, digests: Sequence[bytes]) -> dict[bytes, ElementRow]:
    rows = session.execute(select(ElementRow).where(ElementRow.digest.in_(list(digests))))
    return {row.digest: row for row in rows.scalars()}


# --- dialogs and agents -----------------------------------------------------------------


def dialog_states(session: Session, *, dialogs: Sequence[str]) -> dict[str, dict[str, int]]:
    """Hop counts per state for each dialog."""
    out: dict[str, dict[str, int]] = {}
    if dialogs:
        rows = session.execute(
            select(HopRow.dialog, HopRow.state, func.count())
            .where(HopRow.dialog.in_(list(dialogs)))
            .group_by(HopRow.dialog, HopRow.state)
        )
        for dialog, state, n in rows:
            out.setdefault(dialog, {})[state] = n
    return out


def agent_counts(session: Session, *, now: int) -> tuple[dict[str, int], dict[str, int]]:
    """Elements signed per issuer, and open flags per hop issuer."""
    signed = dict(
        session.execute(select(ElementRow.iss, func.count()).group_by(ElementRow.iss)).all()
    )
    flags = dict(
        session.execute(
            select(FlagRow.iss, func.count())
            .where(effective_status(FlagStatus.OPEN, now))
            .group_by(FlagRow.iss)
        ).all()
    )
    return {k: int(v) for k, v in signed.items()}, {k: int(v) for k, v in flags.items()}


# --- search -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Found:
    hops: list[HopRow]
    dialogs: list[str]
    agents: list[str]
    elements: list[ElementRow]
    refused: list[Refusal]


def _digest_range(prefix: str) -> tuple[bytes, bytes | None] | None:
    """The raw-octet range of digests whose base64url text starts with ``prefix``."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    if len(prefix) < 4 or any(c not in alphabet for c in prefix):
        return None
    bits = "".join(f"{alphabet.index(c):06b}" for c in prefix)
    whole = len(bits) // 8
    low = int(bits[: whole * 8], 2).to_bytes(whole, "big")
    value = int.from_bytes(low, "big") + 1
    high = None if value >> (8 * whole) else value.to_bytes(whole, "big")
    return low, high


def _distinct_like(session: Session, column: Any, like: str, *, limit: int) -> list[str]:
    """Distinct values of an indexed column matching ``like`` (escaped with ``\\``).

    A ``LIKE '%text%'`` can use no index, so ``SELECT DISTINCT .. WHERE LIKE`` reads every
    hop (a million rows: ~0.5 s). There are few agents, so walk the column's index from one
    distinct value to the next instead (a recursive "loose index scan": one index probe per
    agent) and match only those values."""
    walk = select(func.min(column).label("value")).cte("walk", recursive=True)
    following = select(func.min(column)).where(column > walk.c.value).scalar_subquery()
    walk = walk.union_all(select(following).where(walk.c.value.is_not(None)))
    query = select(walk.c.value).where(walk.c.value.like(like, escape="\\")).limit(limit)
    return [value for (value,) in session.execute(query)]


def search(session: Session, *, text: str, limit: int = 20) -> Found:
    """Hops by hop id or task id, dialogs and agents by exact or leading text, elements by
    digest prefix (4 characters at least), and refused elements by the dialog or hop id
    they name or their digest's prefix (``refused_matching``): a refused offer makes no
    hop, and a dialog whose offers were all refused is still found by its id."""
    like = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    hops = list(
        session.execute(
            select(HopRow)
            .where(or_(HopRow.hop == text, HopRow.task == text, HopRow.dialog == text))
            .order_by(HopRow.iat)
            .limit(limit)
        ).scalars()
    )
    dialogs = [
        d
        for (d,) in session.execute(
            select(HopRow.dialog)
            .where(HopRow.dialog.like(like, escape="\\"))
            .distinct()
            .order_by(HopRow.dialog)
            .limit(limit)
        )
    ]
    agents = sorted(
        {
            a
            for column in (HopRow.iss, HopRow.aud)
            for a in _distinct_like(session, column, "%" + like, limit=limit)
        }
    )[:limit]
    found: list[ElementRow] = []
    span = _digest_range(text)
    if span is not None:
        low, high = span
        query = select(ElementRow).where(ElementRow.digest >= low)
        if high is not None:
            query = query.where(ElementRow.digest < high)
        rows = session.execute(query.order_by(ElementRow.digest).limit(limit * 4)).scalars()
        found = [r for r in rows if digest_text(r.digest).startswith(text)][:limit]
    refused = refused_matching(session, text=text, limit=limit)
    if text not in dialogs and any(r.dialog == text for r in refused):
        dialogs.insert(0, text)
    return Found(hops, dialogs, agents, found, refused)


def filed_elsewhere(session: Session, *, offer: bytes, iss: str, hop: str) -> list[ElementRow]:
    """Statuses that name ``offer`` but are filed under another (iss, hop): a cancel signed
    by someone other than the hop's issuer is filed under its signer (profile §1.2's swap
    reads the hop's owner from the status itself), yet it attacks this hop."""
    query = (
        select(ElementRow)
        .where(ElementRow.offer == offer, ElementRow.type == "status")
        .where(or_(ElementRow.hop_iss != iss, ElementRow.hop != hop))
        .order_by(ElementRow.iat, ElementRow.digest)
        .limit(50)
    )
    return list(session.execute(query).scalars())
