"""Storing envelope items: the envelope stage of the ingest pipeline (docs/envelopes.md).

``app.ingest.pipeline`` hands every capture item to ``EnvelopeIngest.read`` as the capture is
read, and calls ``flush`` after each batch of signed items it ran; ``read`` flushes by itself
once ``BATCH_ITEMS`` capture items with envelope items are waiting, so they never wait for
the end of an input. A batch of capture items goes through the pipeline's one batch runner
(``app.ingest.batches``) in one transaction: their items are stored (valid or not, as
evidence), then the ledger of every case they touch is derived again, once for the batch (a
ledger depends on the set of stored items only, so deriving once leaves what deriving after
each capture item would have; per capture item, deriving a case's ledger from all its items
made the flush cost more than the signed ingest itself, BENCHMARKS.md). The batch is
written set-based: one INSERT for its items, and the ledgers of all its cases derived
together (``app.ingest.cases.derive_cases``) from what this ingest already read. When
the batch cannot be stored, nothing of it was kept and each of its capture items is stored
again alone, in a transaction of its own: a failing item is reported and the rest goes on.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cbor2
import orjson
from handoff_context import ObjectIndex
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from app.capture.formats import CaptureItem
from app.envelope.config import EnvelopeConfig
from app.envelope.extract import EnvelopeItem, find_items, may_hold_items
from app.envelope.ledger import Item
from app.envelope.references import check_reference
from app.errors import ItemProblem as EnvelopeError  # an invalid or unstorable envelope item
from app.errors import NotStored
from app.ingest.batches import BATCH_ITEMS, BUSY, BatchFailed, batched, not_stored, run_batch
from app.ingest.cases import KnownItems, derive_cases, stored_as
from app.store import db
from app.store.db import Locks, NeedLocks
from app.store.envelopes import (
    ItemRecord,
    affected_cases,
    case_keys,
    case_lock,
    context_lock,
    store_items,
)

_RESTARTS = 50  # as for signed items: restarts after finding a lock taken


@dataclass
class EnvelopeReport:
    items: int = 0  # envelope items read
    stored: int = 0  # stored for the first time
    errors: list[EnvelopeError] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return {"envelopes": self.items, "envelope_errors": len(self.errors)}


# One capture item's envelope rows, ready to store.
_Prepared = tuple[CaptureItem, list[ItemRecord]]


@dataclass
class EnvelopeIngest:
    """Collects a capture's envelope items while it is read; ``flush`` stores them."""

    engine: Engine
    config: EnvelopeConfig
    objects: ObjectIndex
    now: int
    report: EnvelopeReport = field(default_factory=EnvelopeReport)
    pending: list[tuple[CaptureItem, list[EnvelopeItem]]] = field(default_factory=list)
    # The stored items read so far: a case's later ledgers read only its keys again.
    known: KnownItems = field(default_factory=KnownItems, repr=False)
    # ``read`` runs in the reader thread of a live pipe (app.ingest.live.timed_batches)
    # while the ingest thread flushes after each batch: one flush at a time.
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def read(self, item: CaptureItem) -> bool:
        """Keep the item's envelope items for ``flush``; whether it had any (an envelope,
        acceptance, rejection or case event, valid or not). A full batch is stored at
        once (reading happens outside any transaction)."""
        if item.raw is not None and not may_hold_items(item.raw, self.config.types):
            return False  # none of what an envelope item needs is in its text: no walk
        # Envelope times are NumericDate seconds; a capture's receive time has a fraction.
        at = None if item.received_at is None else math.floor(item.received_at)
        found = find_items(
            item.value, source=item.source, received_at=at, accepted=self.config.types
        )
        if found:
            with self._lock:
                self.pending.append((item, found))
                if len(self.pending) >= BATCH_ITEMS:
                    self.flush()
        return bool(found)

    def flush(self) -> None:
        """Store what was read since the last flush, in batches of capture items. Never
        raises for bad input or a failing item."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        pending, self.pending = self.pending, []
        for found in batched(pending):
            batch = [self._prepare(capture, items) for capture, items in found]
            outcomes = run_batch(batch, attempt=self._attempt, alone=self._alone, stop=_unavailable)
            for outcome in outcomes:
                if isinstance(outcome, EnvelopeError):
                    self.report.errors.append(outcome)
                else:
                    self.report.stored += outcome
            if outcomes and _unavailable(outcomes[-1]):
                return  # the database cannot be written: the ingest stops (pipeline.cut)

    def _prepare(self, capture: CaptureItem, found: list[EnvelopeItem]) -> _Prepared:
        self.report.items += len(found)
        rows = item_rows(capture, found, objects=self.objects, now=self.now)
        self.report.errors.extend(_problems(rows))
        return capture, rows

    def _attempt(self, batch: Sequence[_Prepared]) -> tuple[list[int | EnvelopeError], int]:
        """The whole batch in one transaction and one INSERT; the items it stored for the
        first time are counted on its first capture item (the report keeps only their
        sum). Raises SQLAlchemyError or BatchFailed when nothing of it was kept."""
        if len(batch) < 2:
            raise BatchFailed  # one capture item is simply run alone
        new = self._store([row for _, rows in batch for row in rows])
        if new is None:
            raise BatchFailed
        return [new, *[0] * (len(batch) - 1)], len(batch)

    def _alone(self, prepared: _Prepared) -> int | EnvelopeError:
        capture, rows = prepared
        try:
            new = self._store(rows)
        except SQLAlchemyError as exc:
            return not_stored(capture.source, exc)
        if new is None:
            return NotStored(capture.source, BUSY)
        return new

    def _store(self, rows: list[ItemRecord]) -> int | None:
        keys = frozenset(
            [case_lock(r.case_id) for r in rows]
            + [context_lock(r.context_id) for r in rows if r.context_id and r.to_agent]
        )
        for _ in range(_RESTARTS):
            try:
                new, read = db.run(self.engine, functools.partial(self._work, rows=rows, keys=keys))
            except NeedLocks as exc:
                keys = exc.keys
                continue
            self.known.remember(read)  # committed: these items are stored for good
            return new
        return None

    def _work(
        self, session: Session, *, rows: list[ItemRecord], keys: frozenset[str]
    ) -> tuple[int, dict[str, Item]]:
        locks = Locks(session, keys)
        # The cases first (their own and those sharing a context id: the same set before
        # the rows are stored as after, since the rows' own cases are in it), then their
        # stored keys, read once: they say which rows are new and, with those, which items
        # the ledgers are derived from.
        cases = sorted(affected_cases(session, rows, locks=locks))
        locks.need(case_lock(c) for c in cases)
        held = case_keys(session, cases)
        new = store_items(session, rows, held={key for key, _ in held})
        added = {r.key: r.case_id for r in rows if r.key in new}
        read = derive_cases(
            session,
            cases,
            now=self.now,
            rules=self.config.rules,
            locks=locks,
            known=self.known,
            fresh=stored_as(rows, new),
            keys=[*held, *added.items()],
        )
        return len(new), read


def _problems(rows: list[ItemRecord]) -> list[EnvelopeError]:
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


# In JSON text a float is a number token with a fraction or an exponent, or NaN or
# Infinity (which strict parsing refuses): in an object or an array, after ":", "," or "["
# and whitespace, an optional "-", then digits and "." or "e", or an "N" or "I". The text
# is mapped to a few classes first (digits to "0", the three separators to ":", "." and
# "e" to ".", "N" and "I" to "N", the rest to "x"; whitespace and "-" dropped), so that
# one literal search finds every such token: scanning the text itself with a pattern
# cost more than the ``json.dumps`` it saves. Met inside a string too ("v:1.0"), which
# only costs the fast path; the digits before a dot inside a JWS or a host name are not
# met, as a letter or a quote comes before them.
def _float_classes() -> bytes:
    table = bytearray(b"x" * 256)
    for classes, to in ((b"0123456789", b"0"), (b":,[", b":"), (b".eE", b"."), (b"NI", b"N")):
        for byte in classes:
            table[byte] = to[0]
    return bytes(table)


_FLOAT_CLASSES = _float_classes()
_FLOAT_TOKEN = re.compile(rb":0+\.")


def _maybe_float(raw: bytes) -> bool:
    if raw.lstrip(b" \t\r\n")[:1] not in (b"{", b"["):
        return True  # a number alone has no ":" before it
    classes = raw.translate(_FLOAT_CLASSES, b" \t\r\n-")
    return b":N" in classes or _FLOAT_TOKEN.search(classes) is not None


def payload_octets(value: object, raw: bytes | None = None) -> tuple[bytes, str]:
    """The capture item as received: its JSON text (members in their order), or its CBOR
    encoding when it holds what JSON cannot (byte strings).

    ``raw``, the JSON text ``value`` was parsed from, lets ``orjson`` write the text (a
    tenth of ``json.dumps``'s time) when it shows no float: for every other JSON value
    ``orjson`` writes exactly ``json.dumps``'s compact text with ``ensure_ascii=False``
    (``tests/envelope/test_raw_text.py``), while floats are written differently
    (1e-05 as 0.00001, NaN as null), which would change the stored octets, their digest and
    so the receipts' dedupe keys. What ``orjson`` refuses (a lone surrogate, an integer
    beyond 64 bits, deep nesting) is left to ``json.dumps``, as is all of a value without
    ``raw`` (CBOR). Never raises for a decoded capture item: what neither JSON nor CBOR can
    hold is written as JSON text with ``Infinity`` or ``NaN``."""
    if raw is not None and not _maybe_float(raw):
        try:
            return orjson.dumps(value), "json"
        except orjson.JSONEncodeError:
            pass
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        pass
    else:
        return text.encode("utf-8", errors="surrogatepass"), "json"
    try:
        return cbor2.dumps(value), "cbor"
    except (UnicodeEncodeError, cbor2.CBOREncodeError):
        # Neither can hold it whole: JSON text decoded with a lone surrogate (an escape) and a
        # number beyond a float's range (1E400 reads as infinity). Once this raised out of
        # the ingest; the text with Python's JSON extensions (Infinity, NaN) is the octets
        # instead (``item_rows`` keeps such an envelope out of the JSON column).
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)
        return text.encode("utf-8", errors="surrogatepass"), "json"


def _finite_json(octets: bytes) -> bool:
    # Only the last resort of ``payload_octets`` writes Infinity or NaN: the rare text that
    # holds either is looked at again.
    if b"Infinity" not in octets and b"NaN" not in octets:
        return True
    try:
        json.loads(octets, parse_constant=_refuse)
    except ValueError:
        return False
    return True


def _refuse(name: str) -> object:
    raise ValueError(name)


def item_rows(
    capture: CaptureItem, found: list[EnvelopeItem], *, objects: ObjectIndex, now: int
) -> list[ItemRecord]:
    """The rows of one capture item's envelope items, references checked at their receive
    time (``now`` for items without one)."""
    octets, fmt = payload_octets(capture.value, capture.raw)
    digest = hashlib.sha256(octets).digest()
    # Every part of a payload that JSON could encode whole fits a JSON column; only a
    # CBOR payload's envelopes need looking at one by one.
    checked = fmt == "json" and _finite_json(octets)
    return [
        _row(item, i, octets, fmt, digest, objects, now, checked) for i, item in enumerate(found)
    ]


def _row(
    item: EnvelopeItem,
    index: int,
    octets: bytes,
    fmt: str,
    digest: bytes,
    objects: ObjectIndex,
    now: int,
    checked: bool,
) -> ItemRecord:
    at = item.at if item.at is not None else now
    # One receipt, one key: the same payload at the same time by the same receiver again
    # (a capture ingested twice) is stored once.
    receipt = json.dumps([digest.hex(), index, at, item.received_by, item.kind.value])
    references = [check_reference(u, objects=objects, received_at=at) for u in item.urls]
    envelope = dict(item.envelope) if item.envelope is not None else None
    if not checked:
        envelope = _json_or_none(envelope)
    # Positional, in ItemRecord's order: the tuple is built once per item.
    return ItemRecord(
        hashlib.sha256(receipt.encode()).hexdigest(),
        digest,
        octets,
        fmt,
        item.source,
        item.kind.value,
        item.case_id,
        item.handoff_id,
        item.agent,
        item.to_agent,
        item.epoch,
        at,
        item.received_by,
        item.media_type,
        item.message_id,
        item.context_id,
        item.task_id,
        item.action,
        item.outcome,
        item.detail,
        envelope,
        list(item.errors),
        list(item.drift),
        references,
        item.text_bytes,
        now,
    )


def _unavailable(outcome: int | EnvelopeError) -> bool:
    return isinstance(outcome, NotStored) and outcome.unavailable
