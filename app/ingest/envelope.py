"""Storing envelope items: the envelope side of the ingest pipeline (docs/envelopes.md).

``app.ingest.pipeline`` hands every capture item to ``EnvelopeIngest.read`` as the capture is read
and calls ``flush`` after each input. Up to ``BATCH_ITEMS`` capture items holding envelope
items share one transaction: their items are stored (valid or not, as evidence), then the
ledger of every case they touch is derived again, once for the batch (a ledger depends on
the set of stored items only, so deriving once leaves what deriving after each capture item
would have; per capture item, deriving a case's ledger from all its items made the flush
cost more than the signed ingest itself, BENCHMARKS.md). When the batch cannot be stored,
nothing of it was kept and each of its capture items is stored again alone, in a
transaction of its own: a failing item is reported and the rest goes on.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import cbor2
from handoff_context.refs import ObjectIndex
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from app.capture.formats import CaptureItem
from app.envelope.config import EnvelopeConfig
from app.envelope.extract import EnvelopeItem, find_items
from app.envelope.references import check_reference
from app.store import db
from app.store.db import Locks, NeedLocks
from app.store.envelopes import (
    affected_cases,
    case_lock,
    context_lock,
    derive_cases,
    store_items,
)
from app.store.models import EnvelopeItemRow

_RESTARTS = 50  # as for signed items: restarts after finding a lock taken
# Capture items per transaction in ``flush`` (as ``app.ingest.pipeline.BATCH_ITEMS`` for signed
# ones).
BATCH_ITEMS = 64


@dataclass(frozen=True)
class EnvelopeError:
    """An envelope item that is invalid (stored as evidence, never applied to a ledger),
    or a capture item the database could not store (nothing of it kept)."""

    source: str
    detail: str


@dataclass
class EnvelopeReport:
    items: int = 0  # envelope items read
    stored: int = 0  # stored for the first time
    errors: list[EnvelopeError] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return {"envelopes": self.items, "envelope_errors": len(self.errors)}


@dataclass
class EnvelopeIngest:
    """Collects a capture's envelope items while it is read; ``flush`` stores them."""

    engine: Engine
    config: EnvelopeConfig
    objects: ObjectIndex
    now: int
    pending: list[tuple[CaptureItem, list[EnvelopeItem]]] = field(default_factory=list)

    def read(self, item: CaptureItem) -> bool:
        """Keep the item's envelope items for ``flush``; whether it had any (an envelope,
        acceptance, rejection or case event, valid or not)."""
        # Envelope times are NumericDate seconds; a capture's receive time has a fraction.
        at = None if item.received_at is None else math.floor(item.received_at)
        found = find_items(
            item.value, source=item.source, received_at=at, accepted=self.config.types
        )
        if found:
            self.pending.append((item, found))
        return bool(found)

    def flush(self, report: EnvelopeReport) -> None:
        """Store what was read since the last flush, in batches of capture items. Never
        raises for bad input or a failing item."""
        pending, self.pending = self.pending, []
        for start in range(0, len(pending), BATCH_ITEMS):
            self._flush_batch(pending[start : start + BATCH_ITEMS], report)

    def _flush_batch(
        self, batch: list[tuple[CaptureItem, list[EnvelopeItem]]], report: EnvelopeReport
    ) -> None:
        """One transaction for the batch; when it fails (nothing of it was kept), one per
        capture item."""
        prepared = []
        for capture, found in batch:
            report.items += len(found)
            rows = item_rows(capture, found, objects=self.objects, now=self.now)
            report.errors.extend(_problems(rows))
            prepared.append((capture, rows))
        if len(prepared) > 1:
            with contextlib.suppress(SQLAlchemyError):
                new = self._store([row for _, rows in prepared for row in rows])
                if new is not None:
                    report.stored += new
                    return
        for capture, rows in prepared:
            self._store_alone(capture, rows, report)

    def _store_alone(
        self, capture: CaptureItem, rows: list[EnvelopeItemRow], report: EnvelopeReport
    ) -> None:
        try:
            new = self._store(rows)
        except SQLAlchemyError as exc:
            first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
            report.errors.append(EnvelopeError(capture.source, f"database error: {first}"))
            return
        if new is None:
            busy = "busy: too many concurrent writers"
            report.errors.append(EnvelopeError(capture.source, busy))
            return
        report.stored += new

    def _store(self, rows: list[EnvelopeItemRow]) -> int | None:
        keys = frozenset(
            [case_lock(r.case_id) for r in rows]
            + [context_lock(r.context_id) for r in rows if r.context_id and r.to_agent]
        )
        for _ in range(_RESTARTS):
            try:
                return db.run(self.engine, functools.partial(self._work, rows=rows, keys=keys))
            except NeedLocks as exc:
                keys = exc.keys
        return None

    def _work(self, session: Session, *, rows: list[EnvelopeItemRow], keys: frozenset[str]) -> int:
        locks = Locks(session, keys)
        new = store_items(session, rows)
        cases = affected_cases(session, rows, locks=locks)
        derive_cases(session, cases, now=self.now, rules=self.config.rules, locks=locks)
        return new


def _problems(rows: list[EnvelopeItemRow]) -> list[EnvelopeError]:
    """Per item: its errors, and version drift (reported, never read)."""
    problems = []
    for row in rows:
        said = [*row.errors, *(f"version drift: {m} is not an accepted type" for m in row.drift)]
        if said:
            problems.append(EnvelopeError(row.source, "; ".join(said)))
    return problems


def _json_or_none(value: dict[str, Any] | None) -> dict[str, Any] | None:
    # A CBOR capture may hold what a JSON column cannot; the octets keep it all the same.
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return value


def payload_octets(value: object) -> tuple[bytes, str]:
    """The capture item as received: its JSON text (members in their order), or its CBOR
    encoding when it holds what JSON cannot (byte strings)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return cbor2.dumps(value), "cbor"
    return text.encode("utf-8", errors="surrogatepass"), "json"


def item_rows(
    capture: CaptureItem, found: list[EnvelopeItem], *, objects: ObjectIndex, now: int
) -> list[EnvelopeItemRow]:
    """The rows of one capture item's envelope items, references checked at their receive
    time (``now`` for items without one)."""
    octets, fmt = payload_octets(capture.value)
    digest = hashlib.sha256(octets).digest()
    return [_row(item, i, octets, fmt, digest, objects, now) for i, item in enumerate(found)]


def _row(
    item: EnvelopeItem,
    index: int,
    octets: bytes,
    fmt: str,
    digest: bytes,
    objects: ObjectIndex,
    now: int,
) -> EnvelopeItemRow:
    at = item.at if item.at is not None else now
    # One receipt, one key: the same payload at the same time by the same receiver again
    # (a capture ingested twice) is stored once.
    receipt = json.dumps([digest.hex(), index, at, item.received_by, item.kind.value])
    references = [check_reference(u, objects=objects, received_at=at) for u in item.urls]
    envelope = _json_or_none(dict(item.envelope) if item.envelope is not None else None)
    return EnvelopeItemRow(
        key=hashlib.sha256(receipt.encode()).hexdigest(),
        digest=digest,
        octets=octets,
        format=fmt,
        source=item.source,
        kind=item.kind.value,
        case_id=item.case_id,
        handoff_id=item.handoff_id,
        agent=item.agent,
        to_agent=item.to_agent,
        epoch=item.epoch,
        at=at,
        received_by=item.received_by,
        media_type=item.media_type,
        message_id=item.message_id,
        context_id=item.context_id,
        task_id=item.task_id,
        action=item.action,
        outcome=item.outcome,
        detail=item.detail,
        envelope=envelope,
        errors=list(item.errors),
        drift=list(item.drift),
        references=references,
        text_bytes=item.text_bytes,
        ingested_at=now,
    )
