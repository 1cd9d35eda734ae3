"""Writing what ingest learned: observations, verdicts, ref outcomes; and finding the stored
observations that a newly known offer lets us judge again.

A verdict row keeps two judgements of its observation (see ``VerdictRow``): the profile §11
verdict as reported, and ``Judgement``, the same observation judged against an empty replay
memory, which is what hop states and flags are derived from.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from handoff_context import CheckResult, Context, Form, Outcome, Result, Verdict
from sqlalchemy import bindparam, delete, insert, select, update
from sqlmodel import Session

from app.store.db import Locks, SharedJson, digest_lock, execute, select_named, select_rows
from app.store.host import add_host_states
from app.store.models import ElementRow, LinkRow, ObservationRow, RefOutcomeRow, VerdictRow

# Profile §6.4: the replay memory holds what passed checks 1-3.
_REMEMBERED_AFTER = ("signature", "audience", "freshness")
# Read once: Python 3.11 reads ``Enum.X`` through the enum metaclass's ``__getattr__`` hook
# (~900 instructions a read), and this runs for every verdict.
_REMEMBERED_RESULTS = (Result.PASS, Result.NOT_CHECKED)
_ACCEPT = Outcome.ACCEPT


@dataclass(frozen=True, slots=True)
class Judgement:
    """An observation judged as if it were the first ever seen (replay aside)."""

    remembered: bool  # an offer that passed checks 1-3 (profile §6.4)
    valid: bool  # every check passed
    fault: str | None  # the reason it failed; None when valid or still pending

    @classmethod
    def of(cls, verdict: Verdict) -> Judgement:
        """Read a judgement off a verdict made with an empty replay memory."""
        results = {c.check: c.result for c in verdict.checks}
        remembered = verdict.element == "offer" and all(
            results.get(name) in _REMEMBERED_RESULTS for name in _REMEMBERED_AFTER
        )
        valid = verdict.outcome is _ACCEPT
        fault = verdict.reason.value if verdict.reason is not None else None
        return cls(remembered=remembered, valid=valid, fault=None if valid else fault)


# Built once: see app.store.db, "dialect-specific statements".
_ADD_OBSERVATION = insert(ObservationRow).returning(ObservationRow.id)
_ADD_REFS = insert(RefOutcomeRow)
_UPDATE_VERDICT = update(VerdictRow).where(VerdictRow.id == bindparam("b_id"))
_DELETE_REFS = delete(RefOutcomeRow).where(RefOutcomeRow.verdict_id == bindparam("b_id"))


def add_observation(
    session: Session,
    *,
    digest: bytes,
    ctx: Context,
    source: str,
    now: int,
    carried: Mapping[str, Any] | None = None,
    host: dict[str, Any] | None = None,
    via: bytes | None = None,
    writes: RowBuffer | None = None,
) -> int:
    """Record one receipt of a stored element; ``ctx`` is what it was judged against,
    ``carried`` the receipt's carrier columns (``observation_values``), ``host`` the row
    of the host task state it rode in, which counts like any other (app.store.host).
    With ``writes`` the rows are buffered there (``app.store.writebehind``), not written."""
    values = observation_values(
        digest=digest, ctx=ctx, source=source, now=now, carried=carried, via=via
    )
    if host is not None:
        if writes is not None:
            writes.add_host_state(host)
        else:
            add_host_states(session, [host])
    if writes is not None:
        return writes.add_observation(values)
    return int(execute(session, _ADD_OBSERVATION, values).scalar_one())


class RowBuffer(Protocol):
    """Where ``add_observation`` buffers its rows (``app.store.writebehind.BatchWrites``)."""

    def add_observation(self, row: dict[str, Any]) -> int: ...

    def add_host_state(self, row: dict[str, Any]) -> None: ...


def observation_values(
    *,
    digest: bytes,
    ctx: Context,
    source: str,
    now: int,
    carried: Mapping[str, Any] | None = None,
    via: bytes | None = None,
) -> dict[str, Any]:
    """The observation table's row for one receipt (without its id); ``carried``: the
    columns of an item's receipt (carrier, role, task_id, task_state, received_exact,
    observation_key), none for a chain element's."""
    values: dict[str, Any] = {
        "digest": digest,
        "received_at": ctx.now,
        "received_by": ctx.receiver,
        "dialog": ctx.dialog,
        "source": source,
        "via": via,
        "ingested_at": now,
    }
    if carried is not None:
        values.update(carried)
    return values


# A verdict's checks are one of a few dozen lists: each built once and shared by every row
# that has it (``SharedJson``: written as JSON text once per batch statement).
_CHECK_LISTS: dict[tuple[tuple[object, ...], ...], SharedJson] = {}


def _check_list(checks: Sequence[CheckResult]) -> SharedJson:
    key = tuple((c.check, c.result, c.reason, c.detail) for c in checks)
    found = _CHECK_LISTS.get(key)
    if found is None:
        found = SharedJson(c.to_json() for c in checks)
        if len(_CHECK_LISTS) < 4096:  # details vary only with a few inputs
            _CHECK_LISTS[key] = found
    return found


def verdict_values(verdict: Verdict, judgement: Judgement, trust: str, now: int) -> dict[str, Any]:
    """The verdict table's row for ``verdict`` (without its id and observation)."""
    assert verdict.digest is not None and verdict.element is not None
    equivocation = verdict.equivocation
    return {
        "digest": verdict.digest,
        "element": verdict.element,
        "outcome": verdict.outcome._value_,
        "reason": None if verdict.reason is None else verdict.reason.value,
        "detail": verdict.detail,
        "checks": _check_list(verdict.checks),
        "chain": None if verdict.chain is None else verdict.chain.to_json(),
        "equivocation_first": None if equivocation is None else equivocation.first,
        "equivocation_variant": None if equivocation is None else equivocation.variant.value,
        "trust": trust,
        "remembered": judgement.remembered,
        "valid": judgement.valid,
        "fault": judgement.fault,
        "judged_at": now,
    }


def update_verdict(
    session: Session,
    verdict_id: int,
    *,
    verdict: Verdict,
    judgement: Judgement,
    trust: str,
    now: int,
) -> None:
    """Replace a verdict judged again (a pending status, a chain completed later)."""
    values = verdict_values(verdict, judgement, trust, now)
    execute(session, _UPDATE_VERDICT, {**values, "b_id": verdict_id})
    execute(session, _DELETE_REFS, {"b_id": verdict_id})
    _write_refs(session, verdict_id, verdict)


def update_judgement(
    session: Session, verdict_id: int, *, judgement: Judgement, trust: str, now: int
) -> None:
    """Keep the reported verdict (a duplicate stays a duplicate); refresh the judgement."""
    values = {**judgement_values(judgement, trust, now), "b_id": verdict_id}
    execute(session, _UPDATE_VERDICT, values)


def ref_rows(verdict_id: int, verdict: Verdict) -> list[dict[str, Any]]:
    """The ref outcome rows of ``verdict`` (profile §5)."""
    return [
        {
            "verdict_id": verdict_id,
            "index": r.index,
            "kind": r.kind,
            "outcome": r.outcome.value,
            "detail": r.detail,
        }
        for r in verdict.refs
    ]


def judgement_values(judgement: Judgement, trust: str, now: int) -> dict[str, Any]:
    """The columns ``update_judgement`` changes."""
    return {
        "remembered": judgement.remembered,
        "valid": judgement.valid,
        "fault": judgement.fault,
        "trust": trust,
        "judged_at": now,
    }


def _write_refs(session: Session, verdict_id: int, verdict: Verdict) -> None:
    rows = ref_rows(verdict_id, verdict)
    if rows:
        session.connection().execute(_ADD_REFS, rows)


# --- judging again ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Observed:
    """A stored observation with what it takes to judge it again."""

    verdict_id: int
    observation_id: int
    source: str
    ctx: Context
    octets: bytes
    form: Form
    outcome: str  # as reported
    reason: str | None


def _observed(rows: Iterable[Any]) -> list[Observed]:
    return [
        Observed(
            verdict_id=r.verdict_id,
            observation_id=r.observation_id,
            source=r.source,
            ctx=Context(now=r.received_at, receiver=r.received_by, dialog=r.dialog),
            octets=r.octets,
            form=Form(r.form),
            outcome=r.outcome,
            reason=r.reason,
        )
        for r in rows
    ]


_OBSERVED = (
    select(
        VerdictRow.id.label("verdict_id"),
        ObservationRow.id.label("observation_id"),
        ObservationRow.source,
        ObservationRow.received_at,
        ObservationRow.received_by,
        ObservationRow.dialog,
        ElementRow.octets,
        ElementRow.form,
        VerdictRow.outcome,
        VerdictRow.reason,
    )
    .join(ObservationRow, ObservationRow.id == VerdictRow.observation_id)
    .join(ElementRow, ElementRow.digest == VerdictRow.digest)
    .order_by(ObservationRow.id)
)
_PENDING_STATUSES = _OBSERVED.where(
    VerdictRow.outcome == Outcome.PENDING.value,
    ElementRow.type == "status",
    ElementRow.offer.in_(bindparam("b_offers", expanding=True)),
)
_CHILDREN = (
    select(LinkRow.offer)
    .where(LinkRow.prev.in_(bindparam("b_offers", expanding=True)))
    .order_by(LinkRow.offer)
)
_OBSERVED_OFFERS = _OBSERVED.add_columns(VerdictRow.chain).where(
    VerdictRow.digest.in_(bindparam("b_offers", expanding=True))
)
_ANCESTOR = (
    select(ElementRow.octets, ElementRow.form, LinkRow.prev)
    .outerjoin(LinkRow, LinkRow.offer == ElementRow.digest)
    .where(ElementRow.digest == bindparam("b_digest"), ElementRow.type == "offer")
)


_NAMED_BY_PENDING = (
    select(ElementRow.offer)
    .join(VerdictRow, VerdictRow.digest == ElementRow.digest)
    .where(
        VerdictRow.outcome == Outcome.PENDING.value,
        ElementRow.type == "status",
        ElementRow.offer.in_(bindparam("b_offers", expanding=True)),
    )
    .distinct()
)
_CHILDREN_OF = select(LinkRow.prev, LinkRow.offer).where(
    LinkRow.prev.in_(bindparam("b_offers", expanding=True))
)


def named_by_pending(session: Session, *, offers: Collection[bytes]) -> set[bytes]:
    """Which of ``offers`` a pending status names: one query for a whole batch."""
    if not offers:
        return set()
    # ``select_rows``: once per batch with every digest of the batch in the ``IN`` list.
    return {
        offer for (offer,) in select_rows(session, _NAMED_BY_PENDING, {"b_offers": sorted(offers)})
    }


def children_of(session: Session, *, offers: Collection[bytes]) -> dict[bytes, set[bytes]]:
    """The stored offers naming each of ``offers`` as their ``prev`` (those with none are
    left out): one query for a batch."""
    found: dict[bytes, set[bytes]] = {}
    if offers:
        for prev, offer in select_rows(session, _CHILDREN_OF, {"b_offers": sorted(offers)}):
            found.setdefault(prev, set()).add(offer)
    return found


def pending_statuses(session: Session, offers: Collection[bytes]) -> list[Observed]:
    """Observations of statuses naming one of ``offers`` that are still pending."""
    if not offers:
        return []
    return _observed(select_named(session, _PENDING_STATUSES, {"b_offers": list(offers)}))


def children(session: Session, offers: Collection[bytes]) -> list[bytes]:
    """Stored offers whose ``prev`` names one of ``offers``."""
    if not offers:
        return []
    return [offer for (offer,) in select_rows(session, _CHILDREN, {"b_offers": list(offers)})]


def offers_judged_without_chain(session: Session, offers: Collection[bytes]) -> list[Observed]:
    """Observations of ``offers`` that carried no chain (or an empty one): their chain was
    built from stored elements, and can be completed now that more of them are known."""
    if not offers:
        return []
    rows = select_named(session, _OBSERVED_OFFERS, {"b_offers": list(offers)})
    return _observed(row for row in rows if without_chain(row.chain, row.outcome, row.reason))


def without_chain(chain: dict[str, Any] | None, outcome: str, reason: str | None) -> bool:
    """A verdict's chain that was not carried whole (none, built from stored elements, or
    the offer alone) and may still be completed: judged again when more of its earlier
    offers are known.

    A chain that reached an offer without ``prev`` (not ``partial``) is complete already:
    its offers are fixed by their digests and no earlier offer can change it, and the
    checks before the chain check read nothing the store adds. Judging it again gave the
    same row, and made each offer judge its whole stored ancestry again. A duplicate or an
    equivocation keeps the reported verdict, whose chain was never checked (the replay
    check stopped it), so its judgement is always completed."""
    if chain is not None and chain.get("carried") and chain.get("length") != 1:
        return False
    if chain is None or outcome == Outcome.DUPLICATE.value or reason == "equivocation":
        return True
    return chain.get("partial") is not False


@dataclass(frozen=True, slots=True)
class Ancestor:
    """A stored offer as the chain walk reads it."""

    octets: bytes
    form: str
    prev: bytes | None


# What the caller already knows of a digest: its stored offer, False when it knows none is
# stored, None when the store must be asked.
AncestorLookup = Callable[[bytes], "Ancestor | Literal[False] | None"]


def stored_ancestors(
    session: Session,
    prev: bytes,
    *,
    form: Form,
    limit: int,
    locks: Locks,
    known: AncestorLookup | None = None,
) -> list[bytes]:
    """The stored offers up the chain from ``prev``, oldest first, at most ``limit``: the
    chain a receiver holding them can check (profile §7, rule 6). Only elements of
    ``form`` qualify, as in a carried chain (profile §1.4). ``known`` answers for the
    offers the batch holds in memory (loaded up front, or not yet written)."""
    found: list[bytes] = []
    digest: bytes | None = prev
    while digest is not None and len(found) < limit:
        locks.need([digest_lock(digest)])
        row = None if known is None else known(digest)
        if row is None:
            row = execute(session, _ANCESTOR, {"b_digest": digest}).first()
        if not row or row.form != form.value:
            break
        found.append(row.octets)
        digest = row.prev
    found.reverse()
    return found
