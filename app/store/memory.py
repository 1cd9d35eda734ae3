"""The receiver's memories backed by the database (SPEC 6.4: they survive a restart).

``StoreMemory`` implements the memory Protocols of ``handoff_context`` (replay memory, known
offers, seen statuses, signature cache) over one session, so a ``Verifier`` built by
``store_verifier`` judges against everything any worker ever stored. Each memory rests on a
primary key and ``INSERT .. ON CONFLICT DO NOTHING``: of two workers remembering the same
(iss, hop), exactly one records it and the other finds it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from handoff_context import (
    Element,
    Form,
    InMemoryState,
    ObjectIndex,
    Offer,
    Policy,
    Remembered,
    TrustStore,
    Verifier,
    content_fingerprint,
    parse_element,
)
from handoff_context.errors import HandoffError
from sqlalchemy import bindparam, select
from sqlmodel import Session

from app.store.db import execute, insert_ignore
from app.store.models import ElementRow, LinkRow, ReplayRow, SeenStatusRow, SignatureCacheRow

# Built once: see app.store.db, "dialect-specific statements".
_ELEMENT_OCTETS = select(ElementRow.octets, ElementRow.form).where(
    ElementRow.digest == bindparam("b_digest")
)
_OFFER_OCTETS = _ELEMENT_OCTETS.where(ElementRow.type == "offer")
_REPLAY_FIRST = select(ReplayRow.digest, ReplayRow.content).where(
    ReplayRow.iss == bindparam("b_iss"), ReplayRow.hop == bindparam("b_hop")
)
_SEEN_STATUS = select(SeenStatusRow.digest).where(SeenStatusRow.digest == bindparam("b_digest"))
_SIGNATURE_CACHED = select(SignatureCacheRow.digest).where(
    SignatureCacheRow.digest == bindparam("b_digest"),
    SignatureCacheRow.trust == bindparam("b_trust"),
)


class _VerifiedSignatures:
    """A bounded, process-wide front of the signature cache table: (digest, trust
    fingerprint) pairs whose signature verified. Whether a signature verifies under a trust
    store is a fact about the octets alone, so this memory can never be wrong, even when
    the transaction that recorded the pair in the table rolls back; it only spares the
    lookup. Replay, dedupe and equivocation still rest on the database alone."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pairs: OrderedDict[tuple[bytes, str], None] = OrderedDict()

    def __contains__(self, pair: tuple[bytes, str]) -> bool:
        if pair in self._pairs:
            self._pairs.move_to_end(pair)
            return True
        return False

    def add(self, pair: tuple[bytes, str]) -> None:
        self._pairs[pair] = None
        self._pairs.move_to_end(pair)
        if len(self._pairs) > self.size:
            self._pairs.popitem(last=False)


_VERIFIED = _VerifiedSignatures(65_536)  # ~10 MiB at most


def element_values(element: Element, *, now: int) -> dict[str, object]:
    """The element table's row for ``element`` (first seen at ``now``)."""
    p = element.payload
    values: dict[str, object] = {
        "digest": element.digest,
        "form": element.form.value,
        "type": p.type.value,
        "octets": element.octets,
        "iss": p.iss,
        "aud": p.aud,
        "hop": p.hop,
        "iat": p.iat,
        "ref_count": len(p.refs),
        "content": content_fingerprint(element),
        "first_seen": now,
    }
    if isinstance(p, Offer):
        values.update(hop_iss=p.hop_owner, dialog=p.dialog, task=p.task, exp=p.exp)
    else:
        values.update(hop_iss=p.hop_owner, offer=p.offer, state=p.state.value, reason=p.reason)
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


def load_element(session: Session, digest: bytes) -> Element | None:
    """Parse a stored element again from its octets (None when not stored)."""
    row = execute(session, _ELEMENT_OCTETS, {"b_digest": digest}).first()
    if row is None:
        return None
    return parse_element(row.octets, Form(row.form))


class StoreMemory:
    """Replay memory, offer index, seen statuses and signature cache over one session."""

    def __init__(self, session: Session, *, trust: TrustStore, now: int) -> None:
        self.session = session
        self.trust = trust
        self.now = now
        # Set by ``store_verifier``: the verifier's cached signature check (SPEC 6.1).
        self.check_signature: Callable[[Element], None] | None = None
        self._offers: dict[bytes, Element | None] = {}

    # -- ReplayMemory ------------------------------------------------------------------

    def remember(self, element: Element) -> tuple[Remembered, bool]:
        p = element.payload
        mine = Remembered(element.digest, content_fingerprint(element))
        row = {
            "iss": p.iss,
            "hop": p.hop,
            "digest": mine.digest,
            "content": mine.content,
            "recorded_at": self.now,
        }
        if insert_ignore(self.session, ReplayRow, row, ["iss", "hop"]):
            return mine, True
        first = execute(self.session, _REPLAY_FIRST, {"b_iss": p.iss, "b_hop": p.hop}).one()
        return Remembered(first.digest, first.content), False

    # -- OfferIndex --------------------------------------------------------------------

    def get_offer(self, digest: bytes) -> Element | None:
        """A stored offer whose signature verifies under the current trust store."""
        if digest not in self._offers:
            self._offers[digest] = self._verified_offer(digest)
        return self._offers[digest]

    def _verified_offer(self, digest: bytes) -> Element | None:
        row = execute(self.session, _OFFER_OCTETS, {"b_digest": digest}).first()
        if row is None:
            return None
        assert self.check_signature is not None, "use store_verifier"
        try:
            element = parse_element(row.octets, Form(row.form))
            self.check_signature(element)
        except HandoffError:
            return None
        return element

    def add_offer(self, element: Element) -> None:
        store_element(self.session, element, now=self.now)
        self._offers[element.digest] = element

    def holds(self, digest: bytes) -> bool:
        """True when this memory has seen the offer stored (it stored or read it)."""
        return self._offers.get(digest) is not None

    # -- SeenStatuses ------------------------------------------------------------------

    def has_status(self, digest: bytes) -> bool:
        return execute(self.session, _SEEN_STATUS, {"b_digest": digest}).first() is not None

    def add_status(self, digest: bytes) -> None:
        insert_ignore(
            self.session, SeenStatusRow, {"digest": digest, "seen_at": self.now}, ["digest"]
        )

    # -- SignatureCache ----------------------------------------------------------------

    def verified(self, digest: bytes, trust_fingerprint: str) -> bool:
        if (digest, trust_fingerprint) in _VERIFIED:
            return True
        params = {"b_digest": digest, "b_trust": trust_fingerprint}
        found = execute(self.session, _SIGNATURE_CACHED, params).first() is not None
        if found:
            _VERIFIED.add((digest, trust_fingerprint))
        return found

    def mark_verified(self, digest: bytes, trust_fingerprint: str) -> None:
        row = {"digest": digest, "trust": trust_fingerprint, "verified_at": self.now}
        insert_ignore(self.session, SignatureCacheRow, row, ["digest", "trust"])
        _VERIFIED.add((digest, trust_fingerprint))


def store_verifier(
    session: Session,
    *,
    trust: TrustStore,
    policy: Policy,
    objects: ObjectIndex,
    now: int,
    fresh: bool = False,
) -> Verifier:
    """A verifier whose memories are the database. ``fresh``: known offers and the
    signature cache still come from the database, but replay memory and seen statuses start
    empty, which judges an element as if it were the first ever seen (ignoring replay)."""
    memory = StoreMemory(session, trust=trust, now=now)
    empty = InMemoryState()
    verifier = Verifier(
        trust=trust,
        policy=policy,
        objects=objects,
        replay=empty if fresh else memory,
        offers=memory,
        statuses=empty if fresh else memory,
        signature_cache=memory,
    )
    memory.check_signature = verifier.check_signature
    return verifier
