"""The hop rules that look across offers and refusals, beside ``derive_hop`` (which looks at
one hop's offer and statuses): which offer is the hop's, equivocation, and
``rejected-element``.

Each rule reads a set of facts and never their order of arrival, so a receiver that stores
the same elements in any order files the same flags (profile §8, "order independence").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from handoff_context._lifecycle import SEVERITY, Flag, FlagKind
from handoff_context._verdict import Variant


@dataclass(frozen=True, slots=True)
class CountingOffer:
    """An offer that counts for its hop (profile §6.4: it passed checks 1-3 judged against
    an empty replay memory, or came in the verified chain of an accepted bundle), with the
    earliest capture time among the observations by which it counts. ``content`` is its
    content fingerprint (``content_fingerprint``): what was signed, signature aside."""

    digest: bytes
    content: bytes
    first: int


@dataclass(frozen=True, slots=True)
class Rejection:
    """An element filed under a hop whose observation failed a check (replay aside), or
    octets refused before they became an element: ``fault`` is the reason, ``first`` the
    earliest capture time of such an observation."""

    fault: str
    digest: bytes
    first: int


def canonical_order(offers: Iterable[CountingOffer]) -> list[CountingOffer]:
    """The offers of one hop, the hop's offer first: the one received first by capture
    time, ties broken by the smaller digest (this profile's canonical rule; a verdict's
    ``equivocation.first`` says which offer one receiver saw first, which depends on ingest
    order, so it does not decide)."""
    return sorted(offers, key=lambda o: (o.first, o.digest))


def equivocation_flag(offers: Sequence[CountingOffer]) -> Flag | None:
    """The ``equivocation`` flag of a hop for which two or more different offers count, or
    None for fewer than two. ``offers`` is in ``canonical_order``: the variant is
    ``content`` when any offer differs from the hop's offer in what was signed, else
    ``signature-only``; the flag opened when the second offer was received."""
    if len(offers) < 2:
        return None
    differs = any(o.content != offers[0].content for o in offers[1:])
    variant = Variant.CONTENT if differs else Variant.SIGNATURE_ONLY
    kind = FlagKind.EQUIVOCATION
    return Flag(
        kind=kind,
        severity=SEVERITY[kind],
        evidence=tuple(sorted(o.digest for o in offers)),
        opened_at=offers[1].first,
        variant=variant.value,
        detail=f"{len(offers)} different offers signed for one hop ({variant.value} differs)",
    )


def rejection_flags(rejections: Iterable[Rejection]) -> list[Flag]:
    """The ``rejected-element`` flags of a hop: one per reason (the flag's variant), in
    reason order, with every element refused for it as evidence, opened at the earliest
    receipt among them."""
    by_fault: dict[str, list[Rejection]] = {}
    for r in rejections:
        by_fault.setdefault(r.fault, []).append(r)
    kind = FlagKind.REJECTED_ELEMENT
    return [
        Flag(
            kind=kind,
            severity=SEVERITY[kind],
            evidence=tuple(sorted(r.digest for r in found)),
            opened_at=min(r.first for r in found),
            variant=fault,
            detail=f"{len(found)} element(s) rejected: {fault}",
        )
        for fault, found in sorted(by_fault.items())
    ]
