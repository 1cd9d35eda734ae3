"""Write behind, per batch: the rows a batch of signed items produces, held in memory and
written with one executemany per table when the batch ends (BENCHMARKS.md, issue 13).

An item's receipt, verdict and ref outcomes (and on SQLite its element and chain link)
used to cost one statement each; buffered, a batch of 256 items costs one statement per
table. Observation and verdict ids are allocated here, up front (SQLite has one writer, so
``max(id)`` once per transaction gives exactly the ids it would have given; PostgreSQL
hands out a block of its sequence in one statement), so a verdict names its observation
and a ref outcome its verdict before either is written.

Correctness never depends on the buffer: every read of the batch that may need a row still
buffered asks the buffer too (``pending_statuses``, ``offers_without_chain``,
``children``, ``element``), and ``flush`` runs before anything else reads the tables (hops
derived at the end of the batch). A row judged again while still buffered is changed in
the buffer. An item that fails rolls the whole batch's transaction back, and the buffer
is built again with it (no savepoints, so nothing of the buffer is ever undone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from handoff_context import Element, Offer
from sqlalchemy import func, select, text
from sqlmodel import Session

from app.store.db import execute, insert_ignore_many, insert_many, select_rows
from app.store.models import (
    ElementRow,
    HostStateRow,
    LinkRow,
    ObservationRow,
    RefOutcomeRow,
    VerdictRow,
)
from app.store.records import Observed, without_chain

# Read through the driver (``select_rows``): twice a batch, and HTTP ingest runs a batch
# per request.
_MAX_ID = {
    "observation": select(func.coalesce(func.max(ObservationRow.id), 0)),
    "verdict": select(func.coalesce(func.max(VerdictRow.id), 0)),
}
_NEXTVAL = {
    table: text(
        f"SELECT nextval(pg_get_serial_sequence('{table}', 'id')) FROM generate_series(1, :n)"
    )
    for table in ("observation", "verdict")
}
# Observation columns besides those of an item's receipt: a chain element's receipt leaves
# them empty, and both go in one statement.
_ITEM_COLUMNS = (
    "carrier",
    "role",
    "task_id",
    "task_state",
    "received_exact",
    "observation_key",
)


class _Ids:
    """Row ids for one table, allocated in this transaction before the rows are written."""

    def __init__(self, session: Session, table: str) -> None:
        self.session = session
        self.table = table
        self.postgresql = session.get_bind().dialect.name == "postgresql"
        self.free: list[int] = []
        self.last: int | None = None  # SQLite: the greatest id taken so far
        self.want = 1

    def reserve(self, n: int) -> None:
        """How many ids to fetch at once on PostgreSQL (the batch's size)."""
        self.want = max(1, n)

    def take(self) -> int:
        if self.postgresql:
            if not self.free:
                rows = execute(self.session, _NEXTVAL[self.table], {"n": self.want})
                self.free = sorted(rows.scalars(), reverse=True)
            return int(self.free.pop())
        if self.last is None:
            ((last,),) = select_rows(self.session, _MAX_ID[self.table])
            self.last = int(last)
        self.last += 1
        return self.last


@dataclass
class _Verdict:
    """A buffered verdict row, its ref outcomes, and what judging it again needs."""

    row: dict[str, Any]
    refs: list[dict[str, Any]]
    observed: Observed
    kind: str  # "offer" or "status"
    offer: bytes | None  # the offer a status names


class BatchWrites:
    """The rows of one batch, written by ``flush``. ``elements``: the element and link rows
    are buffered too (SQLite, where the batch knows exactly which elements are stored)."""

    def __init__(self, session: Session, *, elements: bool) -> None:
        self.session = session
        self.buffers_elements = elements
        self.observation_ids = _Ids(session, "observation")
        self.verdict_ids = _Ids(session, "verdict")
        # The batch's new elements and links: rows to write (until ``flush``), and what
        # the batch knows of them (kept after a flush within the batch: an element and a
        # link, once stored, stay as they are).
        self._element_rows: dict[bytes, dict[str, Any]] = {}
        self._link_rows: dict[bytes, dict[str, Any]] = {}  # by the offer
        self._elements: dict[bytes, Element] = {}
        self._links: list[tuple[bytes, bytes]] = []  # (prev, offer)
        self._children: dict[bytes, set[bytes]] = {}  # the batch's links by their prev
        self._observations: list[dict[str, Any]] = []
        self._host: list[dict[str, Any]] = []
        self._verdicts: dict[int, _Verdict] = {}
        # Buffered status verdicts by the offer they name (ids, in the order added): every
        # item asks for the pending statuses its offers complete, and scanning every
        # buffered verdict for each made a batch quadratic in its items. An id may be
        # stale (rolled back, or reused for another verdict): readers check the verdict.
        self._statuses: dict[bytes, dict[int, None]] = {}
        # Buffered verdicts by the element they judge (ids, in the order added), for the
        # same reason: each completed offer asks for the verdicts of the offers below it.
        self._by_digest: dict[bytes, dict[int, None]] = {}
        self.flushes = 0

    def reserve(self, observations: int, verdicts: int) -> None:
        self.observation_ids.reserve(observations)
        self.verdict_ids.reserve(verdicts)

    # -- adding rows ---------------------------------------------------------------------

    def add_element(self, element: Element, row: dict[str, Any]) -> None:
        """A new element (and its chain link); the caller knows it is not stored."""
        self._elements[element.digest] = element
        self._element_rows[element.digest] = row
        p = element.payload
        if isinstance(p, Offer) and p.prev is not None:
            link = {"offer": element.digest, "prev": p.prev, "dialog": p.dialog}
            self._link_rows[element.digest] = link
            self._links.append((p.prev, element.digest))
            self._children.setdefault(p.prev, set()).add(element.digest)

    def add_observation(self, row: dict[str, Any]) -> int:
        """A receipt; returns its id."""
        row = {**dict.fromkeys(_ITEM_COLUMNS), **row, "id": self.observation_ids.take()}
        self._observations.append(row)
        return int(row["id"])

    def add_host_state(self, row: dict[str, Any]) -> None:
        self._host.append(row)

    def verdict_id(self) -> int:
        """An id for the next verdict (``add_verdict``)."""
        return self.verdict_ids.take()

    def add_verdict(
        self,
        row: dict[str, Any],
        refs: list[dict[str, Any]],
        observed: Observed,
        *,
        kind: str,
        offer: bytes | None,
    ) -> None:
        """A verdict row, with its id (``verdict_id``) in ``row``, ``refs`` and
        ``observed``; ``kind`` and ``offer`` say what it judged (a status: its offer)."""
        self._verdicts[row["id"]] = _Verdict(row, refs, observed, kind, offer)
        self._by_digest.setdefault(row["digest"], {})[row["id"]] = None
        if kind == "status" and offer is not None:
            self._statuses.setdefault(offer, {})[row["id"]] = None

    def holds_verdict(self, verdict_id: int) -> bool:
        return verdict_id in self._verdicts

    def update_verdict(
        self, verdict_id: int, values: dict[str, Any], refs: list[dict[str, Any]] | None
    ) -> None:
        """Change a buffered verdict row (``refs``: its new ref outcomes; None keeps them)."""
        old = self._verdicts[verdict_id]
        row = {**old.row, **values}
        new_refs = old.refs if refs is None else [{**r, "verdict_id": verdict_id} for r in refs]
        observed = dataclasses.replace(old.observed, outcome=row["outcome"], reason=row["reason"])
        self._verdicts[verdict_id] = _Verdict(row, new_refs, observed, old.kind, old.offer)

    # -- reading what is buffered ---------------------------------------------------------

    def element(self, digest: bytes) -> Element | None:
        return self._elements.get(digest)

    def children(self, offers: Collection[bytes]) -> set[bytes]:
        """Buffered offers whose ``prev`` is one of ``offers``."""
        return {c for d in offers for c in self._children.get(d, ())}

    def pending_offers(self) -> set[bytes]:
        """The offers that the buffered pending statuses name."""
        return {
            v.offer
            for v in self._verdicts.values()
            if v.kind == "status" and v.observed.outcome == "pending" and v.offer is not None
        }

    def pending_statuses(self, offers: Collection[bytes]) -> list[Observed]:
        """The buffered pending statuses naming one of ``offers`` (callers order them by
        observation, ``by_observation``)."""
        found = []
        for offer in offers:
            for verdict_id in self._statuses.get(offer, ()):
                v = self._verdicts.get(verdict_id)
                if (
                    v is not None
                    and v.kind == "status"
                    and v.offer == offer
                    and v.observed.outcome == "pending"
                ):
                    found.append(v.observed)
        return found

    def offers_without_chain(self, offers: Collection[bytes]) -> list[Observed]:
        """The buffered verdicts of ``offers`` whose chain was not carried whole (callers
        order them by observation, ``by_observation``)."""
        found = []
        for digest in offers:
            for verdict_id in self._by_digest.get(digest, ()):
                v = self._verdicts.get(verdict_id)
                if v is None or v.row["digest"] != digest:
                    continue
                if without_chain(v.row["chain"], v.row["outcome"], v.row["reason"]):
                    found.append(v.observed)
        return found

    # -- writing ---------------------------------------------------------------------------

    def flush(self) -> None:
        """Write everything buffered, one statement per table, parents before children."""
        if not (self._element_rows or self._observations or self._host or self._verdicts):
            return
        self.flushes += 1
        elements = list(self._element_rows.values())
        insert_ignore_many(self.session, ElementRow, elements, ["digest"])
        insert_ignore_many(self.session, LinkRow, list(self._link_rows.values()), ["offer"])
        # The driver's executemany with rows converted once (``insert_many``): through
        # SQLAlchemy's compiled INSERT each row cost ~10 us of parameter handling.
        for model, rows in (
            (HostStateRow, self._host),
            (ObservationRow, self._observations),
            (VerdictRow, [v.row for v in self._verdicts.values()]),
            (RefOutcomeRow, [r for v in self._verdicts.values() for r in v.refs]),
        ):
            insert_many(self.session, model, rows)
        self._element_rows.clear()
        self._link_rows.clear()
        self._observations.clear()
        self._host.clear()
        self._verdicts.clear()
        self._statuses.clear()
        self._by_digest.clear()


def by_observation(*found: Iterable[Observed]) -> list[Observed]:
    """Observations from the store and from the buffer, in the store's order (by id)."""
    return sorted((o for group in found for o in group), key=lambda o: o.observation_id)
