"""What each flag kind's page shows as proof, read from the store and arranged for reading:
who received which offer of an equivocation and when, the downstream offers of a cancel
that did not propagate with their times against the grace deadline, and for a case flag
the envelope items, ledger epochs and writes it rests on.

Nothing here judges anything: the flag, its evidence and the verdicts are the store's; the
ledger is the one ``app.ingest.cases`` derives. This module only picks the rows that the
flag's evidence names and puts them side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from handoff_context import digest_text
from sqlmodel import Session

from app.envelope.ledger import CaseEvent, Epoch, Item
from app.ingest.cases import case_detail, case_items
from app.store import dashboard
from app.store.models import ElementRow, FlagRow
from app.store.queries import HopListing, hop_for_offer, observations_of


@dataclass(frozen=True)
class Receipt:
    """One receipt of one offer: who says they received it, when, from which capture."""

    label: str  # "A", "B", ...
    digest: bytes
    received_by: str | None
    received_at: int
    source: str
    carrier: str | None


def receipts(session: Session, offers: Sequence[ElementRow]) -> list[Receipt]:
    """Every receipt of each offer, labelled A, B... as the comparison table labels them,
    in the order they were received."""
    labels = {o.digest: "ABCDEFGHIJ"[i] if i < 10 else str(i + 1) for i, o in enumerate(offers)}
    return [
        Receipt(labels[o.digest], o.digest, o.received_by, o.received_at, o.source, o.carrier)
        for o in observations_of(session, digests=list(labels))
    ]


@dataclass(frozen=True)
class Downstream:
    """One offer the delegate issued below a canceled hop, against the grace deadline."""

    offer: ElementRow
    hop: HopListing | None
    canceled_at: int | None  # the iat of its first canceled status, if any

    def late_by(self, deadline: int) -> int | None:
        """Seconds after the deadline it was canceled (None: not canceled at all)."""
        return None if self.canceled_at is None else self.canceled_at - deadline


def downstream(session: Session, offers: Sequence[ElementRow]) -> list[Downstream]:
    statuses = dashboard.statuses_of(session, offers=[o.digest for o in offers])
    rows = []
    for offer in sorted(offers, key=lambda o: (o.iat, o.digest)):
        cancels = [s.iat for s in statuses.get(offer.digest, []) if s.state == "canceled"]
        rows.append(
            Downstream(
                offer, hop_for_offer(session, offer=offer.digest), min(cancels, default=None)
            )
        )
    return rows


@dataclass(frozen=True)
class CaseProof:
    """The parts of a case a case flag rests on."""

    items: tuple[Item, ...]  # the envelope items its evidence names
    epochs: tuple[Epoch, ...]  # every epoch of the case
    involved: frozenset[int]  # epochs the flag touches (its items' epochs, its agent's)
    events: tuple[CaseEvent, ...]  # the writes, acts and handoffs of its items and handoff
    missing: int  # evidence digests no stored item has


def case_proof(session: Session, flag: FlagRow) -> CaseProof | None:
    if flag.case_id is None:
        return None
    detail = case_detail(session, flag.case_id)
    named = set(flag.evidence)
    items = tuple(
        sorted(
            (i for i in case_items(session, flag.case_id) if digest_text(i.digest) in named),
            key=lambda i: (i.at, i.key),
        )
    )
    if detail is None:
        return CaseProof(items, (), frozenset(), (), len(named) - len(items))
    receipts_of_items = {(i.source, i.at) for i in items}
    events = tuple(
        e
        for e in detail.events
        if (e.source, e.at) in receipts_of_items or (e.handoff_id and e.handoff_id == flag.hop)
    )
    involved = {i.epoch for i in items if i.epoch is not None}
    involved |= {e.epoch for e in events if e.epoch is not None}
    involved |= {ep.epoch for ep in detail.epochs if ep.owner == flag.iss}
    found = {digest_text(i.digest) for i in items}
    return CaseProof(items, detail.epochs, frozenset(involved), events, len(named - found))


# Members of an element that are NumericDates (profile §1.3), shown readable beside the number.
TIME_MEMBERS = ("iat", "exp", "nbf")


def times_of(payload: dict[str, Any]) -> list[tuple[str, int]]:
    """The NumericDate members of a decoded payload, in a fixed order."""
    return [
        (name, int(payload[name]))
        for name in TIME_MEMBERS
        if isinstance(payload.get(name), int) and not isinstance(payload.get(name), bool)
    ]
