"""The rows behind the receiver's memories (profile §6.4: they survive a restart): the
replay memory, the known offers, the seen statuses and the signature cache, each resting
on a primary key and ``INSERT .. ON CONFLICT DO NOTHING`` (of two workers remembering the
same (iss, hop), exactly one records it and the other finds it).

SQL only: the memories the verifier asks (``app.ingest.memory.StoreMemory``) are built
over these functions by ingest, which also parses what they return.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from handoff_context import Element, Offer, Remembered, content_fingerprint
from sqlalchemy import bindparam, select
from sqlmodel import Session

from app.store.db import (
    execute,
    insert_ignore,
    insert_ignore_many,
    pair_params,
    pairs_in,
    select_rows,
)
from app.store.models import ElementRow, LinkRow, ReplayRow, SeenStatusRow, SignatureCacheRow
from app.store.records import Ancestor

# Built once: see app.store.db, "dialect-specific statements".
_ELEMENT_OCTETS = select(ElementRow.octets, ElementRow.form).where(
    ElementRow.digest == bindparam("b_digest")
)
_OFFER_OCTETS = _ELEMENT_OCTETS.where(ElementRow.type == "offer")
_REPLAY_FIRST = select(ReplayRow.digest, ReplayRow.content).where(
    ReplayRow.iss == bindparam("b_iss"), ReplayRow.hop == bindparam("b_hop")
)
_SEEN_STATUS = select(SeenStatusRow.digest).where(SeenStatusRow.digest == bindparam("b_digest"))
_SIGNATURES_CACHED = select(SignatureCacheRow.digest).where(
    SignatureCacheRow.digest.in_(bindparam("b_digests", expanding=True)),
    SignatureCacheRow.trust == bindparam("b_trust"),
)
_SIGNATURE_CACHED = select(SignatureCacheRow.digest).where(
    SignatureCacheRow.digest == bindparam("b_digest"),
    SignatureCacheRow.trust == bindparam("b_trust"),
)


def element_values(
    element: Element, *, now: int, content: bytes | None = None
) -> dict[str, object]:
    """The element table's row for ``element`` (first seen at ``now``); ``content``: its
    ``content_fingerprint`` when the caller takes it anyway (a SHA-256 of the signed
    content, not taken twice)."""
    p = element.payload
    values: dict[str, object] = {
        "digest": element.digest,
        "form": element.form._value_,
        "type": p.type._value_,
        "octets": element.octets,
        "iss": p.iss,
        "aud": p.aud,
        "hop": p.hop,
        "iat": p.iat,
        "ref_count": len(p.refs),
        "content": content_fingerprint(element) if content is None else content,
        "first_seen": now,
    }
    # Every column named for both types, so that rows of both go in one executemany.
    if isinstance(p, Offer):
        values.update(hop_iss=p.hop_owner, dialog=p.dialog, task=p.task, exp=p.exp)
        values.update(offer=None, state=None, reason=None)
    else:
        values.update(hop_iss=p.hop_owner, offer=p.offer, state=p.state._value_, reason=p.reason)
        values.update(dialog=None, task=None, exp=None)
    return values


def store_element(session: Session, element: Element, *, now: int) -> bool:
    """Store the element unless its digest is already stored (append-only: an existing row
    is never touched). Offers with ``prev`` also get their chain link. True when new."""
    inserted = insert_ignore(session, ElementRow, element_values(element, now=now), ["digest"])
    p = element.payload
    if inserted and isinstance(p, Offer) and p.prev is not None:
        link = {"offer": element.digest, "prev": p.prev, "dialog": p.dialog}
        insert_ignore(session, LinkRow, link, ["offer"])
    return inserted


_STORED_ROWS = (
    select(ElementRow.digest, ElementRow.type, ElementRow.octets, ElementRow.form, LinkRow.prev)
    .outerjoin(LinkRow, LinkRow.offer == ElementRow.digest)
    .where(ElementRow.digest.in_(bindparam("b_digests", expanding=True)))
)


_SEEN_AMONG = select(SeenStatusRow.digest).where(
    SeenStatusRow.digest.in_(bindparam("b_digests", expanding=True))
)
_REPLAY_AMONG = select(ReplayRow.iss, ReplayRow.hop, ReplayRow.digest, ReplayRow.content).where(
    pairs_in(ReplayRow.iss, ReplayRow.hop)
)


def seen_among(session: Session, *, digests: Collection[bytes]) -> set[bytes]:
    """Which of ``digests`` are seen statuses (profile §6.8): one query."""
    if not digests:
        return set()
    return {r[0] for r in select_rows(session, _SEEN_AMONG, {"b_digests": list(digests)})}


def replay_among(
    session: Session, *, hops: Collection[tuple[str, str]]
) -> dict[tuple[str, str], Remembered]:
    """What the replay memory holds for each of ``hops`` ((iss, hop)): one query."""
    if not hops:
        return {}
    rows = select_rows(session, _REPLAY_AMONG, pair_params(hops))
    return {(iss, hop): Remembered(digest, content) for iss, hop, digest, content in rows}


def stored_rows(session: Session, digests: Collection[bytes]) -> list[tuple[Any, ...]]:
    """The stored elements among ``digests``: (digest, type, octets, form, and for offers
    ``prev``) tuples, one query."""
    if not digests:
        return []
    return select_rows(session, _STORED_ROWS, {"b_digests": list(digests)})


def stored_offer(session: Session, digest: bytes) -> Ancestor | None:
    """The stored offer ``digest`` (its octets and form; ``prev`` is not read), or None."""
    row = execute(session, _OFFER_OCTETS, {"b_digest": digest}).first()
    return None if row is None else Ancestor(row.octets, row.form, None)


def cached_signatures(session: Session, digests: Sequence[bytes], *, trust: str) -> list[bytes]:
    """Which of ``digests`` the signature cache says verified under ``trust``: one query."""
    if not digests:
        return []
    params = {"b_digests": list(digests), "b_trust": trust}
    return [r[0] for r in select_rows(session, _SIGNATURES_CACHED, params)]


def signature_cached(session: Session, digest: bytes, *, trust: str) -> bool:
    params = {"b_digest": digest, "b_trust": trust}
    return execute(session, _SIGNATURE_CACHED, params).first() is not None


def remember_first(session: Session, row: dict[str, Any]) -> Remembered | None:
    """Record ``row`` in the replay memory unless its (iss, hop) is there: None when this
    call recorded it, else what was there first."""
    if insert_ignore(session, ReplayRow, row, ["iss", "hop"]):
        return None
    params = {"b_iss": row["iss"], "b_hop": row["hop"]}
    first = execute(session, _REPLAY_FIRST, params).one()
    return Remembered(first.digest, first.content)


def status_seen(session: Session, digest: bytes) -> bool:
    return execute(session, _SEEN_STATUS, {"b_digest": digest}).first() is not None


def add_seen_status(session: Session, row: dict[str, Any]) -> None:
    insert_ignore(session, SeenStatusRow, row, ["digest"])


def write_memories(
    session: Session,
    *,
    signatures: Sequence[dict[str, Any]],
    replay: Sequence[dict[str, Any]],
    seen: Sequence[dict[str, Any]],
) -> None:
    """Write rows gathered for the signature cache, the replay memory and the seen
    statuses, one statement each (a row already there is left as it is)."""
    insert_ignore_many(session, SignatureCacheRow, signatures, ["digest", "trust"])
    insert_ignore_many(session, ReplayRow, replay, ["iss", "hop"])
    insert_ignore_many(session, SeenStatusRow, seen, ["digest"])
