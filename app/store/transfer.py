"""The export format of ``handoff-trace export`` / ``import``: the element store as JSON
Lines, one record per line, streamed in both directions (docs/export.md).

The first line is a signed header (``header``): the format and its version, the number of
records of each kind, and the SHA-256 of every record line that follows, as written; its
``signature`` is a JWS over the rest of the header, by a key the importer is told to trust
(``sign_header`` / ``verify_header``). So a file cut short, reordered, edited, with a record
added or taken out, or without a signature, is refused before anything is imported.

Every other line is one record ``{"t": KIND, ...columns}``, with octets and digests as
base64url text. What is exported is what cannot be re-derived, in the order an import
needs it (``KINDS``):

- ``trust_key_window``, ``trust_revocation``, ``trust_event``: the key history, the
  revocations and the trust audit log, first, since receipts are judged with them;
- ``element`` and ``rejected_octets``: the signed octets exactly as received;
- ``envelope_item``: envelope handoffs as captured (their cases are derived again);
- ``host_state``: captured A2A task states that rode with no element (those that did are
  re-created with their observation);
- ``observation`` (receipts as ingested, not the chain receipts ingest derives) with
  ``chain``, the digests of the chain the item carried, so an import can rebuild the item,
  and ``rejected_observation`` (receipts of refused octets);
- operator state: ``flag`` (keyed by its condition; workflow columns and what it said),
  ``action`` (the audit log) and ``comment`` (flag threads), naming their flag by key, and
  ``delivery`` (the webhook log, its flag by key where the flag still exists);
- with ``secrets`` only: ``api_token`` and ``operator_user``, whose hashes are
  credentials. Browser sessions, upload reports and caches are never exported.

Hops, links, verdicts, ref outcomes, replay memory, cases and flags' derived columns are
not trusted from the file: ``import`` re-derives them from the octets and receipts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from handoff_context import Element, alg_for_key, b64url_decode, b64url_encode
from joserfc import jws
from joserfc.errors import JoseError
from sqlalchemy import Engine, LargeBinary, func, select, text
from sqlmodel import Session, SQLModel

from app.errors import HandoffTraceError
from app.log.exported import Anchor
from app.store import tlog
from app.store.memory import store_element
from app.store.models import (
    ActionRow,
    CommentRow,
    DeliveryRow,
    ElementRow,
    EnvelopeItemRow,
    FlagRow,
    HostStateRow,
    LinkRow,
    LogLeafRow,
    ObservationRow,
    RejectedObservationRow,
    RejectedOctetsRow,
    TokenRow,
    TrustEventRow,
    TrustKeyWindowRow,
    TrustRevocationRow,
    UserRow,
    VerdictRow,
)

FORMAT = "handoff-trace-export"
VERSION = 2
_BATCH = 500
# Every kind, in the order an export writes them and an import needs them.
KINDS = (
    "trust_key_window", "trust_revocation", "trust_event", "element", "rejected_octets",
    "envelope_item", "host_state", "observation", "rejected_observation", "flag", "action",
    "comment", "delivery", "api_token", "operator_user",
)  # fmt: skip
# The header's members this importer understands; another one may be added by a later
# version and ignored by this one, unless it is named in ``crit`` (as in JWS, RFC 7515
# section 4.1.11): then this importer refuses the file.
HEADER_MEMBERS = frozenset(
    {"format", "version", "schema", "exported_at", "secrets", "counts", "records", "crit",
     "signature", "log"}
)  # fmt: skip
# Kinds whose rows are inserted as they are (no id of theirs is referenced).
PLAIN: dict[str, type[SQLModel]] = {
    "element": ElementRow,
    "rejected_octets": RejectedOctetsRow,
    "envelope_item": EnvelopeItemRow,
    "trust_key_window": TrustKeyWindowRow,
    "trust_revocation": TrustRevocationRow,
    "trust_event": TrustEventRow,
    "host_state": HostStateRow,
    "api_token": TokenRow,
    "operator_user": UserRow,
}
SECRET_KINDS = frozenset({"api_token", "operator_user"})


class TransferError(HandoffTraceError):
    """An export file that cannot be imported (wrong format, version or record)."""

    reason = "invalid-export"


def holds_elements(session: Session) -> bool:
    """Whether the store holds any element (an import goes into an empty store only)."""
    return session.execute(select(ElementRow).limit(1)).first() is not None


def to_json(model: type[SQLModel], row: Any, *, skip: Iterable[str] = ("id",)) -> dict[str, Any]:
    """A row's columns as JSON values: octets as base64url text."""
    out: dict[str, Any] = {}
    for column in model.__table__.columns:  # type: ignore[attr-defined]
        if column.name in skip:
            continue
        value = getattr(row, column.name)
        if isinstance(value, bytes):
            value = b64url_encode(value)
        out[column.name] = value
    return out


def from_json(model: type[SQLModel], record: Mapping[str, Any]) -> dict[str, Any]:
    """The column values of a record (base64url text back to octets). Raises
    TransferError for a member that is not a column."""
    columns = {c.name: c for c in model.__table__.columns}  # type: ignore[attr-defined]
    values: dict[str, Any] = {}
    for name, value in record.items():
        if name == "t":
            continue
        if name not in columns:
            raise TransferError(f"{record.get('t')} record: unknown member {name!r}")
        if isinstance(columns[name].type, LargeBinary) and value is not None:
            value = b64url_decode(value, what=name)
        values[name] = value
    return values


# --- export -----------------------------------------------------------------------------


def header(
    *,
    schema: str | None,
    now: int,
    secrets: bool,
    counts: Mapping[str, int],
    records: str,
    log: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The header, unsigned: ``records`` is ``records_digest`` of the record lines; ``log``
    the evidence log's anchor (``app.log.exported.Anchor``), which readers must check."""
    first = {"format": FORMAT, "version": VERSION, "schema": schema, "exported_at": now,
             "secrets": secrets, "counts": {k: counts.get(k, 0) for k in KINDS},
             "records": records, "crit": []}  # fmt: skip
    if log is not None:
        first["log"] = dict(log)
        first["crit"] = ["log"]
    return first


def log_anchor(session: Session) -> dict[str, str] | None:
    """The latest checkpoint and the source of each of its leaves, in log order (None: the
    store keeps no log). Read in the export's snapshot, so the records match it."""
    checkpoint = tlog.latest_checkpoint(session)
    if checkpoint is None:
        return None
    sources = tlog.leaf_sources(session, size=int(checkpoint.size))
    return Anchor(checkpoint.note, sources).to_json()


class RecordsDigest:
    """SHA-256 over the record lines exactly as written (each with its newline), in order,
    and the count of each kind."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.counts: dict[str, int] = {}

    def add(self, line: bytes, kind: str) -> None:
        self._hash.update(line)
        self.counts[kind] = self.counts.get(kind, 0) + 1

    @property
    def value(self) -> str:
        return "sha-256:" + b64url_encode(self._hash.digest())


def _signed_part(first: Mapping[str, Any]) -> bytes:
    unsigned = {k: v for k, v in first.items() if k != "signature"}
    return json.dumps(unsigned, sort_keys=True, separators=(",", ":")).encode()


def sign_header(first: Mapping[str, Any], key: Any) -> dict[str, Any]:
    """The header with its ``signature``: a compact JWS of the rest of the header (keys
    sorted, no spaces), by ``key`` (a private JWK of ``keys new``: ES256 or Ed25519)."""
    alg = alg_for_key(key)
    protected = {"alg": alg, "typ": "handoff-trace-export"}
    if key.kid:
        protected["kid"] = key.kid
    token = jws.serialize_compact(protected, _signed_part(first), key, algorithms=[alg])
    return {**first, "signature": token}


def verify_header(first: Mapping[str, Any], key: Any) -> None:
    """Check the header's signature with the trusted ``key``, and that this importer
    understands everything the header says it must. Raises TransferError."""
    token = first.get("signature")
    if not isinstance(token, str):
        raise TransferError("the export is not signed (its header has no signature)")
    alg = alg_for_key(key)
    try:
        signed = jws.deserialize_compact(token, key, algorithms=[alg])
    except (JoseError, ValueError) as exc:
        raise TransferError(
            f"the export's signature does not verify with the trusted key ({type(exc).__name__})"
        ) from exc
    if signed.payload != _signed_part(first):
        raise TransferError("the export's header was changed after it was signed")
    crit = first.get("crit", [])
    if not isinstance(crit, list) or any(c not in HEADER_MEMBERS for c in crit):
        raise TransferError(f"the export needs header members this version lacks: {crit!r}")


def check_records(first: Mapping[str, Any], digest: RecordsDigest) -> None:
    """The records read are the records signed: same count of each kind, same digest.
    Raises TransferError."""
    counts = first.get("counts")
    if not isinstance(counts, dict):
        raise TransferError("the export's header has no record counts")
    read = {k: digest.counts.get(k, 0) for k in KINDS}
    wanted = {k: counts.get(k, 0) for k in KINDS}
    if read != wanted:
        differ = [f"{k} {read[k]} of {wanted[k]}" for k in KINDS if read[k] != wanted[k]]
        raise TransferError(
            f"the export is cut short or was changed: records read {', '.join(differ)}"
        )
    if digest.value != first.get("records"):
        raise TransferError("the export's records were changed, reordered or replaced")


def export_records(session: Session, *, secrets: bool) -> Iterator[dict[str, Any]]:
    """Every record of the store, streamed (header excluded), in ``KINDS`` order."""
    # First: the key history and revocations, which the import judges the receipts with.
    yield from _rows(
        session,
        "trust_key_window",
        select(TrustKeyWindowRow).order_by(
            TrustKeyWindowRow.source, TrustKeyWindowRow.kid, TrustKeyWindowRow.thumbprint,
            TrustKeyWindowRow.generation,
        ),
    )  # fmt: skip
    yield from _rows(
        session, "trust_revocation", select(TrustRevocationRow).order_by(TrustRevocationRow.id)
    )
    yield from _rows(session, "trust_event", select(TrustEventRow).order_by(TrustEventRow.id))
    # In log order (the leaves are rebuilt from them, app.log.exported), then what the log
    # has not reached, by digest.
    for kind, model, source in (
        ("element", ElementRow, tlog.ELEMENT),
        ("rejected_octets", RejectedOctetsRow, tlog.REJECTED),
    ):
        idx = (
            select(LogLeafRow.idx)
            .where(LogLeafRow.source == source, LogLeafRow.digest == model.digest)
            .scalar_subquery()
        )
        yield from _rows(session, kind, select(model).order_by(idx.is_(None), idx, model.digest))
    yield from _rows(
        session,
        "envelope_item",
        select(EnvelopeItemRow).order_by(EnvelopeItemRow.ingested_at, EnvelopeItemRow.key),
    )
    # Before the receipts: replaying them derives the hops, which read these.
    yield from _rows(
        session,
        "host_state",
        select(HostStateRow).where(HostStateRow.element.is_(False)).order_by(HostStateRow.id),
    )
    yield from _observations(session)
    yield from _rows(
        session,
        "rejected_observation",
        select(RejectedObservationRow).order_by(RejectedObservationRow.id),
    )
    yield from _rows(session, "flag", select(FlagRow).order_by(FlagRow.key))
    yield from _by_flag(session, "action", ActionRow)
    yield from _by_flag(session, "comment", CommentRow)
    yield from _deliveries(session)
    if secrets:
        yield from _rows(session, "api_token", select(TokenRow).order_by(TokenRow.id))
        yield from _rows(session, "operator_user", select(UserRow).order_by(UserRow.id))


def _stream(session: Session, query: Any) -> Iterator[Any]:
    return iter(session.execute(query, execution_options={"yield_per": _BATCH}))


def _rows(session: Session, kind: str, query: Any) -> Iterator[dict[str, Any]]:
    model = query.column_descriptions[0]["entity"]
    for (row,) in _stream(session, query):
        yield {"t": kind, **to_json(model, row)}


def _observations(session: Session) -> Iterator[dict[str, Any]]:
    """Receipts as ingested, in ingest order, each with the chain it carried (as far as
    the store holds it: chain elements that failed verification are not kept)."""
    query = (
        select(ObservationRow, VerdictRow.chain)
        .outerjoin(VerdictRow, VerdictRow.observation_id == ObservationRow.id)
        .where(ObservationRow.via.is_(None))
        .order_by(ObservationRow.id)
    )
    for row, chain in _stream(session, query):
        record = {"t": "observation", **to_json(ObservationRow, row, skip=("id", "via"))}
        record["chain"] = carried_chain(session, row.digest, chain)
        yield record


def carried_chain(
    session: Session, digest: bytes, chain: Mapping[str, Any] | None
) -> list[str] | None:
    """The digests of the chain an item carried, oldest first; None when it carried none
    (or its chain came from the store). Read off the verdict's chain report when the chain
    check ran; otherwise (the item was a retransmission, or failed an earlier check) the
    offer's stored ancestors by prev, as many as the chain was long: what a valid carried
    chain holds (profile §7). Elements the store does not hold are left out."""
    if chain is None or not chain.get("carried"):
        return None
    wanted = int(chain.get("length", 1)) - 1
    reported = [e["digest"] for e in chain.get("elements", []) if e.get("digest")]
    if len(reported) == wanted:
        return reported
    found: list[str] = []
    current: bytes | None = digest
    while current is not None and len(found) < wanted:
        current = session.execute(select(LinkRow.prev).where(LinkRow.offer == current)).scalar()
        if current is not None:
            found.append(b64url_encode(current))
    found.reverse()
    return found


def _by_flag(session: Session, kind: str, model: Any) -> Iterator[dict[str, Any]]:
    """Rows that name a flag (the audit log, comments), the flag by its condition key."""
    query = select(model, FlagRow.key).join(FlagRow, FlagRow.id == model.flag_id).order_by(model.id)
    for row, key in _stream(session, query):
        record = to_json(model, row, skip=("id", "flag_id"))
        yield {"t": kind, "flag_key": key, **record}


def _deliveries(session: Session) -> Iterator[dict[str, Any]]:
    """The webhook log with its ids (a receiver knows a call by its delivery id), the flag
    by key where it still exists (its id changes in an import)."""
    query = (
        select(DeliveryRow, FlagRow.key)
        .outerjoin(FlagRow, FlagRow.id == DeliveryRow.flag_id)
        .order_by(DeliveryRow.id)
    )
    for row, key in _stream(session, query):
        yield {"t": "delivery", "flag_key": key, **to_json(DeliveryRow, row, skip=())}


def write_records(records: Iterable[Mapping[str, Any]], out: Any) -> RecordsDigest:
    """Write the records, one JSON object a line (UTF-8), to the binary ``out``; returns
    their digest and counts, for the header."""
    digest = RecordsDigest()
    for record in records:
        line = (json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        out.write(line)
        digest.add(line, str(record["t"]))
    return digest


def header_line(first: Mapping[str, Any]) -> bytes:
    return (json.dumps(first, separators=(",", ":")) + "\n").encode()


# --- import -----------------------------------------------------------------------------


def _touched(flag: Mapping[str, Any], acted: set[Any]) -> bool:
    """Someone acted on the flag: it has an audit entry or a workflow column set."""
    workflow = (flag.get("assignee"), flag.get("note"), flag.get("snoozed_until"))
    return flag["key"] in acted or flag.get("status") != "open" or any(workflow)


def read_header(line: bytes) -> dict[str, Any]:
    """The header line. Raises TransferError for a file that is not this format or
    version."""
    first = _record(line, 1)
    if first.get("format") != FORMAT:
        raise TransferError(f"not a {FORMAT} file (first line: no format {FORMAT!r})")
    if first.get("version") != VERSION:
        raise TransferError(f"export format version {first.get('version')!r} (this is {VERSION})")
    return first


def read_records(lines: Iterable[bytes], digest: RecordsDigest) -> Iterator[dict[str, Any]]:
    """The records after the header, each added to ``digest`` as read, in ``KINDS``
    order. Raises TransferError (as they are read) for a line that is not a record of a
    known kind, or a kind out of order."""
    last = -1
    for number, line in enumerate(lines, 2):
        record = _record(line, number)
        kind = record.get("t")
        if kind not in KINDS:
            raise TransferError(f"line {number}: unknown record kind {kind!r}")
        at = KINDS.index(str(kind))
        if at < last:
            raise TransferError(f"line {number}: a {kind} record after {KINDS[last]} records")
        last = at
        digest.add(line, str(kind))
        yield record


def _record(line: bytes | str, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise TransferError(f"line {number}: not JSON ({exc})") from exc
    if not isinstance(record, dict):
        raise TransferError(f"line {number}: not a JSON object")
    return record


def plain_rows(kind: str, records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows of records of one plain kind (element, rejected_octets, api_token,
    operator_user), as exported."""
    return [from_json(PLAIN[kind], r) for r in records]


def insert_rows(
    session: Session,
    kind: str,
    rows: Sequence[Mapping[str, Any]],
    *,
    elements: Sequence[tuple[Element, int]] = (),
) -> None:
    """Insert a batch of ``plain_rows`` of one kind as they were exported, and store
    ``elements`` (with their first-seen times) as ingest stores them (``store_element``:
    their columns and chain link derived from their octets again). Ingest parses the
    elements (``app.ingest.rederive``); a row whose octets no longer parse is inserted as
    it was exported (evidence is never dropped)."""
    for element, first_seen in elements:
        store_element(session, element, now=first_seen)
    if rows:
        session.execute(PLAIN[kind].__table__.insert(), list(rows))  # type: ignore[attr-defined]


def restore_workflow(session: Session, work: Mapping[str, list[Mapping[str, Any]]]) -> int:
    """Put operators' state back on the re-derived flags, by condition key: status,
    assignee, snooze, note, the audit log (``work["action"]``) and comments
    (``work["comment"]``); then the webhook log (``work["delivery"]``), its flag ids those
    of the flags now stored. A flag whose condition is no longer derived but that someone
    acted on or commented is restored as it was exported. Returns the flags restored."""
    acted = {a.get("flag_key") for kind in ("action", "comment") for a in work.get(kind, [])}
    ids: dict[str, int] = {}
    for record in work.get("flag", []):
        values = from_json(FlagRow, record)
        row = session.execute(select(FlagRow).where(FlagRow.key == values["key"])).scalar()
        if row is None and not _touched(values, acted):
            continue  # an open flag nobody acted on whose condition no longer holds
        if row is None:
            result = session.execute(
                FlagRow.__table__.insert().values(**values).returning(FlagRow.id)  # type: ignore[attr-defined]
            )
            ids[values["key"]] = int(result.scalar_one())
            continue
        for name in ("status", "assignee", "snoozed_until", "note"):
            setattr(row, name, values.get(name))
        session.flush()
        assert row.id is not None
        ids[values["key"]] = row.id
    for kind, model in (("action", ActionRow), ("comment", CommentRow)):
        rows = []
        for record in work.get(kind, []):
            key = record.get("flag_key")
            if key not in ids:
                raise TransferError(f"{kind} names no exported flag (key {key!r})")
            values = from_json(model, {k: v for k, v in record.items() if k != "flag_key"})
            rows.append({**values, "flag_id": ids[key]})
        if rows:
            session.execute(model.__table__.insert(), rows)  # type: ignore[attr-defined]
    deliveries = []
    for record in work.get("delivery", []):
        values = from_json(DeliveryRow, {k: v for k, v in record.items() if k != "flag_key"})
        key = record.get("flag_key")
        if key is not None:
            found = session.execute(select(FlagRow.id).where(FlagRow.key == key)).scalar()
            values["flag_id"] = found if found is not None else values["flag_id"]
        deliveries.append(values)
    if deliveries:
        session.execute(DeliveryRow.__table__.insert(), deliveries)  # type: ignore[attr-defined]
    return len(ids)


def stored_elements(session: Session, *, digests: Iterable[bytes]) -> dict[bytes, Any]:
    """The stored element rows among ``digests``, by digest (absent ones left out)."""
    query = select(ElementRow).where(ElementRow.digest.in_(list(digests)))
    return {row.digest: row for row in session.execute(query).scalars()}


def latest_item_time(session: Session) -> int:
    """The ingest clock of the last envelope item stored (0: none)."""
    found = session.execute(select(func.max(EnvelopeItemRow.ingested_at))).scalar()
    return int(found or 0)


def copy_store(source: Engine, session: Session) -> int:
    """Copy every row of every table of ``source`` (a scratch store an import was replayed
    into) into ``session``'s empty store, in the caller's one transaction: an import either
    lands whole or not at all. Returns the rows copied. Raises TransferError when the
    store holds elements already."""
    if holds_elements(session):
        raise TransferError("the database already holds elements: import into an empty one")
    copied = 0
    with Session(source) as reading:
        for table in SQLModel.metadata.sorted_tables:  # referenced tables first
            result = reading.execute(select(table), execution_options={"yield_per": _BATCH})
            for batch in result.mappings().partitions(_BATCH):
                session.execute(table.insert(), [dict(row) for row in batch])
                copied += len(batch)
    if session.get_bind().dialect.name == "postgresql":
        # Ids were copied as they were: each sequence moves past the highest one.
        for table in SQLModel.metadata.sorted_tables:
            if "id" in table.c and table.c.id.autoincrement is True:
                session.execute(
                    text(
                        f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), "
                        f"COALESCE((SELECT MAX(id) FROM {table.name}), 0) + 1, false)"
                    )
                )
    return copied
