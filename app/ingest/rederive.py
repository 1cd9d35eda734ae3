"""Re-deriving a store from its signed octets and receipts, and moving a store between
databases (``handoff-trace rederive``, ``export``, ``import``).

Both rest on one replay: every receipt as ingested is rebuilt into the object its carrier
held (the stored octets, plus the chain it carried) and fed, in ingest order and at its
ingest clock, through the one ingest pipeline (``app.ingest.pipeline.ingest_carried``) into a store
that holds the octets but nothing derived. So a re-derivation is the same derivation as
ingest, never a second one, and replay memory gives the same duplicates and equivocations.

Limits, said where they apply: receipts are judged under the trust file, policy and ref
objects given now (per-request options of the API are not stored); a chain element that
failed verification was never stored, so an item whose carried chain held one is replayed
with the part of its chain the store holds, and may be judged differently (counted as
``incomplete chains``).
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

import cbor2
from handoff_context import Element, Form, Timing, b64url_decode, parse_element
from handoff_context.errors import HandoffError
from sqlalchemy import Engine
from sqlmodel import Session

from app.capture.carriers import Carried, Carrier, Role
from app.envelope.ledger import CaseRules
from app.ingest.cases import derive_cases
from app.ingest.derive import derive_every_hop
from app.ingest.pipeline import Pipeline, ingest_carried
from app.ingest.sweep import sweep
from app.store import db
from app.store.db import Locks
from app.store.derived import TableDiff, compare, replace, snapshot
from app.store.envelopes import UNKNOWN_CASE
from app.store.models import RejectedOctetsRow
from app.store.rejected import get_refused
from app.store.transfer import (
    PLAIN,
    TransferError,
    export_records,
    insert_rows,
    latest_item_time,
    plain_rows,
    restore_workflow,
    stored_elements,
)

_BATCH = 500


@dataclass
class Replayed:
    """What an import or a re-derivation replayed."""

    rows: dict[str, int] = field(default_factory=dict)  # plain records inserted, by kind
    receipts: int = 0
    refused: int = 0
    incomplete_chains: int = 0  # receipts whose carried chain the store holds only in part
    errors: list[str] = field(default_factory=list)  # items the pipeline could not store
    flags_restored: int = 0


def replay(pipeline: Pipeline, records: Iterable[Mapping[str, Any]]) -> Replayed:
    """Load a store export's records into ``pipeline.engine`` (an empty store): octets as
    they are, receipts through the pipeline, then operators' state onto the flags.
    Raises TransferError for an unknown record kind."""
    done = Replayed()
    workflow: dict[str, list[Mapping[str, Any]]] = {
        "flag": [], "action": [], "comment": [], "delivery": []
    }  # fmt: skip
    cases: set[str] = set()
    for kind, group in groupby(records, key=lambda r: r.get("t")):
        if kind == "envelope_item":
            group = list(group)
            cases |= {str(r.get("case_id") or UNKNOWN_CASE) for r in group}
        if kind in PLAIN:
            for batch in _batches(group):
                db.run(pipeline.engine, functools.partial(_insert, kind=str(kind), batch=batch))
                done.rows[str(kind)] = done.rows.get(str(kind), 0) + len(batch)
        elif kind == "observation":
            _receipts(pipeline, group, done)
        elif kind == "rejected_observation":
            _refused(pipeline, group, done)
        elif kind in workflow:
            workflow[str(kind)].extend(group)
        else:
            raise TransferError(f"unknown record kind {kind!r}")
    if cases:
        # The envelope items' cases, derived as ingest derives them (before operators'
        # state goes back on their flags), at the last item's ingest clock; the sweep
        # after an import moves them to its now.
        rules = pipeline.envelope.rules

        def derive(session: Session) -> None:
            at = latest_item_time(session)
            derive_cases(session, sorted(cases), now=at, rules=rules, locks=Locks(session))

        db.run(pipeline.engine, derive)
    done.flags_restored = db.run(pipeline.engine, lambda s: restore_workflow(s, workflow))
    return done


TRUST_KINDS = ("trust_key_window", "trust_revocation", "trust_event")


@dataclass
class TrustHistory:
    """What ``replay_trust`` inserted, and the first record after the trust records."""

    rows: dict[str, int] = field(default_factory=dict)
    next_record: Mapping[str, Any] | None = None


def replay_trust(engine: Engine, records: Iterator[Mapping[str, Any]]) -> TrustHistory:
    """Insert an export's leading key history, revocations and trust audit log into
    ``engine``, before a pipeline is made that judges with them; stops at the first other
    record, which it hands back."""
    done = TrustHistory()
    batch: list[Mapping[str, Any]] = []
    for record in records:
        kind = record.get("t")
        if kind not in TRUST_KINDS:
            done.next_record = record
            break
        if batch and batch[-1].get("t") != kind:
            _flush(engine, batch, done.rows)
        batch.append(record)
        if len(batch) >= _BATCH:
            _flush(engine, batch, done.rows)
    if batch:
        _flush(engine, batch, done.rows)
    return done


def _flush(engine: Engine, batch: list[Mapping[str, Any]], rows: dict[str, int]) -> None:
    kind = str(batch[0]["t"])
    db.run(engine, functools.partial(_insert, kind=kind, batch=list(batch)))
    rows[kind] = rows.get(kind, 0) + len(batch)
    batch.clear()


def _insert(session: Session, *, kind: str, batch: list[Mapping[str, Any]]) -> None:
    """Insert one batch of plain records; an element whose octets parse is stored as
    ingest stores it, one that no longer parses as it was exported."""
    rows = plain_rows(kind, batch)
    elements: list[tuple[Element, int]] = []
    if kind == "element":
        kept = []
        for row in rows:
            try:
                elements.append(
                    (parse_element(row["octets"], Form(row["form"])), row["first_seen"])
                )
            except (HandoffError, ValueError):
                kept.append(row)
        rows = kept
    insert_rows(session, kind, rows, elements=elements)


def _batches(records: Iterable[Mapping[str, Any]]) -> Iterator[list[Mapping[str, Any]]]:
    batch: list[Mapping[str, Any]] = []
    for record in records:
        batch.append(record)
        if len(batch) >= _BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _receipts(pipeline: Pipeline, records: Iterable[Mapping[str, Any]], done: Replayed) -> None:
    """Receipts with one ingest clock go through the pipeline together, in order."""
    for clock, group in groupby(records, key=lambda r: int(r["ingested_at"])):
        items = []
        for record in group:
            item, complete = _rebuild(pipeline.engine, record)
            done.incomplete_chains += not complete
            items.append(item)
        report = ingest_carried(pipeline, items, now=clock)
        done.receipts += len(items)
        done.errors += [f"{e.source}: {e.detail}" for e in report.errors]


def _rebuild(engine: Engine, record: Mapping[str, Any]) -> tuple[Carried, bool]:
    """The object a receipt's carrier held, and whether its whole carried chain is stored."""
    digest = b64url_decode(record["digest"], what="digest")
    chain = record.get("chain")
    wanted = [digest, *(b64url_decode(d, what="chain digest") for d in chain or [])]
    with db.transaction(db.read_only(engine)) as session:
        found = stored_elements(session, digests=wanted)
    if digest not in found:
        raise TransferError(f"a receipt names an element that is not stored ({record['digest']})")
    element = found[digest]
    value: dict[str, Any] = {element.type: _member(element.octets, element.form)}
    if chain is not None:
        value["chain"] = [_member(found[d].octets, found[d].form) for d in wanted[1:] if d in found]
    complete = chain is None or len(value["chain"]) == len(chain)
    return _carried(record, value), complete


def _member(octets: bytes, form: str) -> str | bytes:
    """An element as a handoff object carries it (profile §1.4): JWS text, COSE bytes."""
    return octets.decode("ascii") if form == "jws" else octets


def _carried(record: Mapping[str, Any], value: Mapping[str, Any]) -> Carried:
    return Carried(
        source=record["source"],
        value=value,
        carrier=Carrier(record.get("carrier") or Carrier.RAW.value),
        dialog=None,
        # The receive time with its fraction when it was kept (docs/profile.md §10.5).
        received_at=record.get("received_exact") or record["received_at"],
        received_by=record.get("received_by"),
        record_dialog=record.get("dialog"),
        task_id=record.get("task_id"),
        task_state=record.get("task_state"),
        role=Role(record.get("role") or Role.OFFER.value),
        key=record.get("observation_key"),
    )


def _refused(pipeline: Pipeline, records: Iterable[Mapping[str, Any]], done: Replayed) -> None:
    for record in records:
        digest = b64url_decode(record["digest"], what="digest")
        with db.transaction(db.read_only(pipeline.engine)) as session:
            row = get_refused(session, digest=digest)
        if row is None:
            raise TransferError(f"a receipt names refused octets not stored ({record['digest']})")
        report = ingest_carried(
            pipeline, [_carried(record, _object(row))], now=record["ingested_at"]
        )
        done.refused += 1
        done.errors += [f"{e.source}: {e.detail}" for e in report.errors]


def _object(row: RejectedOctetsRow) -> Any:
    """The carried object the refused octets came in (``app.store.rejected``)."""
    if row.form == "json":
        return json.loads(row.octets)
    if row.form == "cbor":
        return cbor2.loads(row.octets)
    return {row.type or "offer": _member(row.octets, row.form)}


# --- rederive -----------------------------------------------------------------------------


@dataclass
class Rederived:
    diffs: list[TableDiff]
    replayed: Replayed
    applied: bool

    @property
    def differs(self) -> bool:
        return any(d.differs for d in self.diffs)


def rederive(
    engine: Engine,
    pipeline_for: Callable[[Engine], Pipeline],
    *,
    now: int,
    dry_run: bool,
    scratch_dir: Path | None = None,
) -> Rederived:
    """Re-derive ``engine``'s store in a scratch SQLite store, compare the two at clock
    ``now``, and unless ``dry_run`` (or nothing differs, or some carried chain could not be
    rebuilt) replace the stored derived state.
    Raises TransferError, ReplaceError or SQLAlchemyError."""
    with tempfile.TemporaryDirectory(dir=scratch_dir, prefix="rederive-") as tmp:
        scratch = db.make_engine(f"sqlite:///{Path(tmp) / 'scratch.db'}")
        try:
            db.ensure_schema(scratch)
            pipeline = pipeline_for(scratch)
            with db.transaction(db.read_only(engine)) as source:
                replayed = replay(pipeline, export_records(source, secrets=False))
            with db.transaction(scratch) as session:
                sweep(session, now=now, timing=pipeline.timing, cases=pipeline.envelope.rules)
                after = snapshot(session)
            before = swept_snapshot(
                engine, now=now, timing=pipeline.timing, cases=pipeline.envelope.rules
            )
            diffs = compare(before, after)
            # A replay that could not rebuild every carried chain may judge those items
            # more leniently than ingest did: report, never overwrite with that.
            applied = (
                not dry_run and replayed.incomplete_chains == 0 and any(d.differs for d in diffs)
            )
            if applied:
                with Session(scratch) as rederived:

                    def work(session: Session) -> None:
                        hops = replace(session, rederived)
                        derive_every_hop(session, hops, now=now, timing=pipeline.timing)

                    db.run(engine, work, attempts=1)
        finally:
            scratch.dispose()
    return Rederived(diffs, replayed, applied)


def swept_snapshot(engine: Engine, *, now: int, timing: Timing, cases: CaseRules) -> dict[str, Any]:
    """The stored derived state at clock ``now``: swept in a transaction that is rolled
    back, so a dry run changes nothing."""
    with Session(engine) as session:
        session.begin()
        try:
            sweep(session, now=now, timing=timing, cases=cases)
            return snapshot(session)
        finally:
            session.rollback()
