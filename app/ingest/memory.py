"""The receiver's memories backed by the database (profile §6.4: they survive a restart).

``StoreMemory`` implements the memory Protocols of ``handoff_context`` (replay memory, known
offers, seen statuses, signature cache) over one session, through the SQL of
``app.store.memory``, so a ``Verifier`` built by ``store_verifier`` judges against
everything any worker ever stored. Stored octets are parsed back into elements here; the
store only hands out rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection
from typing import Literal

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
from sqlalchemy import Engine
from sqlmodel import Session

from app.store.db import read_only
from app.store.memory import (
    add_seen_status,
    cached_signatures,
    element_values,
    remember_first,
    replay_among,
    seen_among,
    signature_cached,
    status_seen,
    store_element,
    stored_offer,
    stored_rows,
    write_memories,
)
from app.store.records import Ancestor
from app.store.writebehind import BatchWrites


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


def verified_before(engine: Engine, digests: Collection[bytes], *, trust: str) -> set[bytes]:
    """Which of ``digests`` verified under the trust store ``trust`` (its fingerprint)
    before: the process's memory, else the store's signature cache, read in a short read
    transaction of its own (on SQLite beside the writer, WAL). For verifying a batch's
    signatures before its write transaction (``app.ingest.signatures.verify_before``)."""
    found = {d for d in digests if (d, trust) in _VERIFIED}
    unknown = [d for d in digests if d not in found]
    if unknown:
        with Session(read_only(engine)) as session, session.begin():
            cached = cached_signatures(session, unknown, trust=trust)
        for digest in cached:
            _VERIFIED.add((digest, trust))
            found.add(digest)
    return found


class StoreMemory:
    """Replay memory, offer index, seen statuses and signature cache over one session."""

    def __init__(
        self, session: Session, *, trust: TrustStore, now: int, stored: set[bytes] | None = None
    ) -> None:
        self.session = session
        self.trust = trust
        self.now = now
        # Digests known to be stored in this transaction (loaded for a whole batch with one
        # query, ``load_batch``, and kept up to date): an element among them is not
        # inserted again. An element once stored stays stored, so the set can only ever
        # miss one, never name one that is not there.
        self.stored: set[bytes] = set() if stored is None else stored
        self.inserted: set[bytes] = set()  # digests this memory stored for the first time
        # Digests whose signature cache rows were loaded (``load_batch``): a miss among
        # them needs no lookup. Rows to add are written once, by ``flush``.
        self._cache_loaded: set[bytes] = set()
        self._to_mark: list[dict[str, object]] = []
        # Seen statuses and replay memory held for the batch (``load_batch(exact=True)``).
        self._seen_loaded: set[bytes] = set()
        self._seen: set[bytes] = set()
        self._seen_rows: list[dict[str, object]] = []
        self._replay_loaded: set[tuple[str, str]] = set()
        self._replay: dict[tuple[str, str], Remembered] = {}
        self._replay_rows: list[dict[str, object]] = []
        # The content fingerprints of the elements ``store`` buffered, by digest.
        self._contents: dict[bytes, bytes] = {}
        # Set by ``store_verifier``: the verifier's cached signature check (profile §6.1).
        self.check_signature: Callable[[Element], None] | None = None
        self._offers: dict[bytes, Element | None] = {}
        # Set by the ingest pipeline: the batch's rows not yet written (on SQLite its new
        # elements too), and the stored offers loaded up front by digest (``load_batch``),
        # with the digests whose absence is exact (SQLite).
        self.writes: BatchWrites | None = None
        self._rows: dict[bytes, Ancestor] = {}
        self._rows_loaded: set[bytes] = set()

    def load_batch(
        self,
        digests: Collection[bytes],
        *,
        hops: Collection[tuple[str, str]] = (),
        exact: bool = False,
        named: Collection[bytes] = (),
    ) -> None:
        """Load what a batch will ask about ``digests`` with one query each: which are
        stored, and which verified under this trust store.

        ``exact`` (SQLite: one writer, so nothing changes under the batch but the batch
        itself): also which of ``digests`` are seen statuses, and what the replay memory
        holds for ``hops`` ((iss, hop) pairs); the batch then asks and updates both in
        memory, and ``flush`` writes what it added. Without ``exact`` (PostgreSQL, where
        another writer may record either at any time) every question goes to the database,
        whose ``INSERT .. ON CONFLICT`` is what makes the answer right.

        ``named``: digests the batch names (statuses' offers, offers' ``prev``): their
        stored offers are read in the same query as ``digests``, so judging a status or
        walking a stored chain asks nothing more for them. An element once stored stays
        as it is, so what was read stays true; with ``exact`` so does what was not found."""
        if exact:
            self._seen_loaded = set(digests)
            self._seen = seen_among(self.session, digests=digests)
            self._replay_loaded = set(hops)
            self._replay = replay_among(self.session, hops=hops)
        wanted = {d for d in (*digests, *named) if d not in self.stored}
        if wanted:
            for digest, type_, octets, form, prev in stored_rows(self.session, wanted):
                self.stored.add(digest)
                if type_ == "offer":
                    self._rows[digest] = Ancestor(octets, form, prev)
        if exact:
            self._rows_loaded |= wanted
        fingerprint = self.trust.fingerprint
        unknown = [d for d in digests if (d, fingerprint) not in _VERIFIED]
        if unknown:
            for digest in cached_signatures(self.session, unknown, trust=fingerprint):
                _VERIFIED.add((digest, fingerprint))
        self._cache_loaded.update(unknown)

    def flush(self) -> None:
        """Write the signature cache rows gathered since the last flush (one statement).
        A row is a fact about octets and keys, true whether or not the item that found it
        was kept, so it may outlive a savepoint rolled back."""
        rows, self._to_mark = self._to_mark, []
        replay, self._replay_rows = self._replay_rows, []
        seen, self._seen_rows = self._seen_rows, []
        write_memories(self.session, signatures=rows, replay=replay, seen=seen)

    # -- ReplayMemory ------------------------------------------------------------------

    def remember(self, element: Element) -> tuple[Remembered, bool]:
        p = element.payload
        content = self._contents.get(element.digest)  # taken for its row (``store``)
        if content is None:
            content = content_fingerprint(element)
        mine = Remembered(element.digest, content)
        row = {
            "iss": p.iss,
            "hop": p.hop,
            "digest": mine.digest,
            "content": mine.content,
            "recorded_at": self.now,
        }
        key = (p.iss, p.hop)
        if key in self._replay_loaded:
            first = self._replay.get(key)
            if first is not None:
                return first, False
            self._replay[key] = mine
            self._replay_rows.append(row)
            return mine, True
        first = remember_first(self.session, row)
        return (mine, True) if first is None else (first, False)

    # -- OfferIndex --------------------------------------------------------------------

    def get_offer(self, digest: bytes) -> Element | None:
        """A stored offer whose signature verifies under the current trust store."""
        if digest not in self._offers:
            self._offers[digest] = self._verified_offer(digest)
        return self._offers[digest]

    def _verified_offer(self, digest: bytes) -> Element | None:
        assert self.check_signature is not None, "use store_verifier"
        try:
            element = self._stored_offer(digest)
            if element is None:
                return None
            self.check_signature(element)
        except HandoffError:
            return None
        return element

    def _stored_offer(self, digest: bytes) -> Element | None:
        """The stored offer ``digest``, parsed (None when no such offer is stored).
        Raises HandoffError when its octets no longer parse."""
        if self.writes is not None:
            buffered = self.writes.element(digest)
            if buffered is not None:
                return buffered if isinstance(buffered.payload, Offer) else None
        known = self.ancestor(digest)
        if known is False:
            return None
        if known is None:
            known = stored_offer(self.session, digest)
            if known is None:
                return None
        return parse_element(known.octets, Form(known.form))

    def ancestor(self, digest: bytes) -> Ancestor | Literal[False] | None:
        """What this memory knows of the stored offer ``digest`` without asking the store:
        it, False when no such offer is stored, None when it does not know
        (``records.stored_ancestors``)."""
        if self.writes is not None:
            buffered = self.writes.element(digest)
            if buffered is not None:
                p = buffered.payload
                if not isinstance(p, Offer):
                    return False
                return Ancestor(buffered.octets, buffered.form.value, p.prev)
        row = self._rows.get(digest)
        if row is not None:
            return row
        if digest in self._rows_loaded:
            # Loaded (exact: SQLite) and no offer then, and none stored since: the buffer
            # would hold it.
            return False
        return None

    def add_offer(self, element: Element) -> None:
        self.store(element)
        self._offers[element.digest] = element

    def store(self, element: Element) -> None:
        """Store the element unless it is known to be stored already."""
        if element.digest in self.stored:
            return
        if self.writes is not None and self.writes.buffers_elements:
            # Exact (SQLite): not stored, so new; written with the batch.
            # An offer is stored when its signature verifies, before the replay memory
            # remembers it, which needs the same fingerprint.
            content = self._contents[element.digest] = content_fingerprint(element)
            row = element_values(element, now=self.now, content=content)
            self.writes.add_element(element, row)
            self._note_inserted(element)
        elif store_element(self.session, element, now=self.now):
            self._note_inserted(element)
        self.stored.add(element.digest)

    def _note_inserted(self, element: Element) -> None:
        self.inserted.add(element.digest)

    def holds(self, digest: bytes) -> bool:
        """True when this memory has seen the offer stored (it stored or read it)."""
        return self._offers.get(digest) is not None

    # -- SeenStatuses ------------------------------------------------------------------

    def has_status(self, digest: bytes) -> bool:
        if digest in self._seen_loaded:
            return digest in self._seen
        return status_seen(self.session, digest)

    def add_status(self, digest: bytes) -> None:
        row = {"digest": digest, "seen_at": self.now}
        if digest in self._seen_loaded:
            if digest not in self._seen:
                self._seen.add(digest)
                self._seen_rows.append(row)
            return
        add_seen_status(self.session, row)

    # -- SignatureCache ----------------------------------------------------------------

    def verified(self, digest: bytes, trust_fingerprint: str) -> bool:
        if (digest, trust_fingerprint) in _VERIFIED:
            return True
        if digest in self._cache_loaded and trust_fingerprint == self.trust.fingerprint:
            return False
        found = signature_cached(self.session, digest, trust=trust_fingerprint)
        if found:
            _VERIFIED.add((digest, trust_fingerprint))
        return found

    def mark_verified(self, digest: bytes, trust_fingerprint: str) -> None:
        row = {"digest": digest, "trust": trust_fingerprint, "verified_at": self.now}
        self._to_mark.append(row)
        _VERIFIED.add((digest, trust_fingerprint))


def store_verifier(
    session: Session,
    *,
    trust: TrustStore,
    policy: Policy,
    objects: ObjectIndex,
    now: int,
    fresh: bool = False,
    stored: set[bytes] | None = None,
) -> Verifier:
    """A verifier whose memories are the database. ``fresh``: known offers and the
    signature cache still come from the database, but replay memory and seen statuses start
    empty, which judges an element as if it were the first ever seen (ignoring replay).
    ``stored``: see ``StoreMemory.stored``."""
    memory = StoreMemory(session, trust=trust, now=now, stored=stored)
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


def fresh_verifier(memory: StoreMemory, *, policy: Policy, objects: ObjectIndex) -> Verifier:
    """A verifier over ``memory``'s known offers and signature cache whose replay memory and
    seen statuses start empty: one judgement as if nothing had been seen before. Cheap, so
    one is made for each such judgement (reusing one would make the next twin an
    equivocation)."""
    empty = InMemoryState()
    return Verifier(
        trust=memory.trust,
        policy=policy,
        objects=objects,
        replay=empty,
        offers=memory,
        statuses=empty,
        signature_cache=memory,
    )
