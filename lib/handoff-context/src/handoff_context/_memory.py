"""What a receiver remembers between elements: replay memory, known offers, seen statuses.

The protocol core depends only on these Protocols. ``verify`` uses the in-memory versions
(each run starts empty, profile §11); the service backs them with its database and an agent
with ``FileState`` (``_filestate.py``), so they survive a restart (profile §6.4).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Protocol

from handoff_context._model import Element
from handoff_context._verdict import Equivocation, Variant


def content_fingerprint(element: Element) -> bytes:
    """Identifies what was signed (header and payload), independent of the signature."""
    return hashlib.sha256(element.signed_content).digest()


@dataclass(frozen=True, slots=True)
class Remembered:
    digest: bytes
    content: bytes  # content_fingerprint of the element first remembered


def replay_result(first: Remembered, element: Element) -> Equivocation | None:
    """None for a retransmission (same octets); otherwise the equivocation evidence."""
    if first.digest == element.digest:
        return None
    same_content = first.content == content_fingerprint(element)
    return Equivocation(first.digest, Variant.SIGNATURE_ONLY if same_content else Variant.CONTENT)


class ReplayMemory(Protocol):
    def remember(self, element: Element) -> tuple[Remembered, bool]:
        """Record (iss, hop) -> element unless already known. Returns what is remembered for
        that (iss, hop) and whether this call recorded it."""
        ...


class OfferIndex(Protocol):
    def get_offer(self, digest: bytes) -> Element | None: ...

    def add_offer(self, element: Element) -> None: ...


class SeenStatuses(Protocol):
    def has_status(self, digest: bytes) -> bool: ...

    def add_status(self, digest: bytes) -> None: ...


class AnswerMemory(Protocol):
    """The last status this agent signed for each offer it answered, as the exact octets it
    sent: a retransmitted offer (a ``duplicate`` verdict) is answered with them again
    (profile §6.4: "the receiver resends its last status"), never with a re-signed status."""

    def record_answer(self, offer_digest: bytes, status: bytes) -> None:
        """Remember ``status`` (element octets) as the last status for ``offer_digest``."""
        ...

    def last_answer(self, offer_digest: bytes) -> bytes | None:
        """The octets last recorded for ``offer_digest``, or None."""
        ...


class SignatureCache(Protocol):
    """Remembers which elements verified under which trust configuration, so a chain
    element seen again is not verified again; a changed trust store (another
    fingerprint) misses the cache and re-verifies."""

    def verified(self, digest: bytes, trust_fingerprint: str) -> bool: ...

    def mark_verified(self, digest: bytes, trust_fingerprint: str) -> None: ...


@dataclass
class InMemoryState:
    """Every memory in process memory, for one ``verify`` run. It is never pruned and is
    lost when the process ends: an agent uses ``FileState`` (profile §6.4)."""

    replay: dict[tuple[str, str], Remembered] = field(default_factory=dict)
    offers: dict[bytes, Element] = field(default_factory=dict)
    statuses: set[bytes] = field(default_factory=set)
    answers: dict[bytes, bytes] = field(default_factory=dict)

    def remember(self, element: Element) -> tuple[Remembered, bool]:
        key = (element.payload.iss, element.payload.hop)
        first = self.replay.get(key)
        if first is not None:
            return first, False
        first = Remembered(element.digest, content_fingerprint(element))
        self.replay[key] = first
        return first, True

    def get_offer(self, digest: bytes) -> Element | None:
        return self.offers.get(digest)

    def add_offer(self, element: Element) -> None:
        self.offers.setdefault(element.digest, element)

    def has_status(self, digest: bytes) -> bool:
        return digest in self.statuses

    def add_status(self, digest: bytes) -> None:
        self.statuses.add(digest)

    def record_answer(self, offer_digest: bytes, status: bytes) -> None:
        self.answers[offer_digest] = bytes(status)

    def last_answer(self, offer_digest: bytes) -> bytes | None:
        return self.answers.get(offer_digest)
