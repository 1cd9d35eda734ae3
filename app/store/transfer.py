"""The export format of ``handoff-trace export`` / ``import``: the element store as JSON
Lines, one record per line, streamed in both directions.

The first line is a header naming the format and its version; every other line is one
record ``{"t": KIND, ...columns}``, with octets and digests as base64url text. What is
exported is what cannot be re-derived, in the order an import needs it:

- ``element`` and ``rejected_octets``: the signed octets exactly as received;
- ``host_state``: captured A2A task states that rode with no element (those that did are
  re-created with their observation);
- ``observation`` (receipts as ingested, not the chain receipts ingest derives) with
  ``chain``, the digests of the chain the item carried, so an import can rebuild the item,
  and ``rejected_observation`` (receipts of refused octets);
- operator state: ``flag`` (keyed by its condition; workflow columns and what it said)
  and ``action`` (the audit log, naming its flag by key);
- with ``secrets`` only: ``api_token`` and ``operator_user``, whose hashes are
  credentials. Browser sessions and caches are never exported.

Hops, links, verdicts, ref outcomes, replay memory and flags' derived columns are not
trusted from the file: ``import`` re-derives them from the octets and receipts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from handoff_context import Form, b64url_decode, b64url_encode, parse_element
from handoff_context.errors import HandoffError
from sqlalchemy import LargeBinary, select
from sqlmodel import Session, SQLModel

from app.errors import HandoffTraceError
from app.store.memory import store_element
from app.store.models import (
    ActionRow,
    ElementRow,
    FlagRow,
    HostStateRow,
    LinkRow,
    ObservationRow,
    RejectedObservationRow,
    RejectedOctetsRow,
    TokenRow,
    UserRow,
    VerdictRow,
)

FORMAT = "handoff-trace-export"
VERSION = 1
_BATCH = 500
# Kinds whose rows are inserted as they are (no id of theirs is referenced).
PLAIN: dict[str, type[SQLModel]] = {
    "element": ElementRow,
    "rejected_octets": RejectedOctetsRow,
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


def header(*, schema: str | None, now: int, secrets: bool) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "schema": schema, "exported_at": now,
            "secrets": secrets}  # fmt: skip


def export_records(session: Session, *, secrets: bool) -> Iterator[dict[str, Any]]:
    """Every record of the store, streamed (header excluded)."""
    yield from _rows(session, "element", select(ElementRow).order_by(ElementRow.digest))
    yield from _rows(
        session, "rejected_octets", select(RejectedOctetsRow).order_by(RejectedOctetsRow.digest)
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
    yield from _actions(session)
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


def _actions(session: Session) -> Iterator[dict[str, Any]]:
    query = (
        select(ActionRow, FlagRow.key)
        .join(FlagRow, FlagRow.id == ActionRow.flag_id)
        .order_by(ActionRow.id)
    )
    for row, key in _stream(session, query):
        record = to_json(ActionRow, row, skip=("id", "flag_id"))
        yield {"t": "action", "flag_key": key, **record}


def write_jsonl(first: Mapping[str, Any], records: Iterable[Mapping[str, Any]], out: Any) -> int:
    """Write the header and the records, one JSON object a line. Returns the records."""
    out.write(json.dumps(first, separators=(",", ":")) + "\n")
    n = 0
    for record in records:
        out.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n")
        n += 1
    return n


# --- import -----------------------------------------------------------------------------


def _touched(flag: Mapping[str, Any], acted: set[Any]) -> bool:
    """Someone acted on the flag: it has an audit entry or a workflow column set."""
    workflow = (flag.get("assignee"), flag.get("note"), flag.get("snoozed_until"))
    return flag["key"] in acted or flag.get("status") != "open" or any(workflow)


def read_jsonl(lines: Iterable[str]) -> tuple[dict[str, Any], Iterator[dict[str, Any]]]:
    """The header and a stream of records. Raises TransferError for a file that is not
    this format or version (the records raise it as they are read)."""
    it = iter(lines)
    first = _record(next(it, ""), 1)
    if first.get("format") != FORMAT:
        raise TransferError(f"not a {FORMAT} file (first line: no format {FORMAT!r})")
    if first.get("version") != VERSION:
        raise TransferError(f"export format version {first.get('version')!r} (this is {VERSION})")
    return first, (_record(line, n) for n, line in enumerate(it, 2) if line.strip())


def _record(line: str, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise TransferError(f"line {number}: not JSON ({exc})") from exc
    if not isinstance(record, dict):
        raise TransferError(f"line {number}: not a JSON object")
    return record


def insert_rows(session: Session, kind: str, records: list[Mapping[str, Any]]) -> None:
    """Insert a batch of records of one plain kind (element, rejected_octets, api_token,
    operator_user). An element is stored as ingest stores it (``store_element``: its
    columns and chain link derived from its octets again), with its own first-seen time."""
    model = PLAIN[kind]
    rows = [from_json(model, r) for r in records]
    if kind == "element":
        rows = [r for r in rows if not _store_element(session, r)]
    if rows:
        session.execute(model.__table__.insert(), rows)  # type: ignore[attr-defined]


def _store_element(session: Session, row: Mapping[str, Any]) -> bool:
    """True when the octets parse and were stored; a row whose octets no longer parse is
    left to be inserted as it was exported (evidence is never dropped)."""
    try:
        element = parse_element(row["octets"], Form(row["form"]))
    except (HandoffError, ValueError):
        return False
    store_element(session, element, now=row["first_seen"])
    return True


def restore_workflow(
    session: Session, flags: list[Mapping[str, Any]], actions: list[Mapping[str, Any]]
) -> int:
    """Put operators' state back on the re-derived flags, by condition key: status,
    assignee, snooze, note and the audit log. A flag whose condition is no longer derived
    but that someone acted on is restored as it was exported. Returns the flags restored."""
    acted = {a.get("flag_key") for a in actions}
    ids: dict[str, int] = {}
    for record in flags:
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
    rows = []
    for record in actions:
        key = record.get("flag_key")
        if key not in ids:
            raise TransferError(f"action names no exported flag (key {key!r})")
        values = from_json(ActionRow, {k: v for k, v in record.items() if k != "flag_key"})
        rows.append({**values, "flag_id": ids[key]})
    if rows:
        session.execute(ActionRow.__table__.insert(), rows)  # type: ignore[attr-defined]
    return len(ids)


def stored_elements(session: Session, *, digests: Iterable[bytes]) -> dict[bytes, Any]:
    """The stored element rows among ``digests``, by digest (absent ones left out)."""
    query = select(ElementRow).where(ElementRow.digest.in_(list(digests)))
    return {row.digest: row for row in session.execute(query).scalars()}
