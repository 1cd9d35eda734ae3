"""The rules across a hop's offers and refusals (``canonical_order``, ``equivocation_flag``,
``rejection_flags``): one test per decision, and order independence over random sets."""

from __future__ import annotations

import random

from handoff_context import (
    SEVERITY,
    CountingOffer,
    FlagKind,
    Rejection,
    Variant,
    canonical_order,
    equivocation_flag,
    rejection_flags,
)
from hypothesis import given
from hypothesis import strategies as st

A, B, C = b"\xaa" * 32, b"\xbb" * 32, b"\xcc" * 32


def test_the_hops_offer_is_the_first_received_ties_to_the_smaller_digest() -> None:
    late, early = CountingOffer(A, b"x", 20), CountingOffer(B, b"x", 10)
    assert canonical_order([late, early]) == [early, late]
    tie_b, tie_a = CountingOffer(B, b"x", 10), CountingOffer(A, b"x", 10)
    assert canonical_order([tie_b, tie_a]) == [tie_a, tie_b]


def test_one_offer_is_no_equivocation() -> None:
    assert equivocation_flag([]) is None
    assert equivocation_flag([CountingOffer(A, b"x", 1)]) is None


def test_offers_differing_only_in_signature_are_signature_only_equivocation() -> None:
    offers = canonical_order([CountingOffer(B, b"same", 5), CountingOffer(A, b"same", 9)])
    flag = equivocation_flag(offers)
    assert flag is not None
    assert flag.kind is FlagKind.EQUIVOCATION
    assert flag.severity is SEVERITY[FlagKind.EQUIVOCATION]
    assert flag.variant == Variant.SIGNATURE_ONLY.value
    assert flag.evidence == (A, B)
    assert flag.opened_at == 9  # when the second offer was received
    assert "2 different offers" in flag.detail


def test_any_offer_differing_in_what_was_signed_makes_it_content() -> None:
    offers = canonical_order(
        [CountingOffer(A, b"one", 1), CountingOffer(B, b"one", 2), CountingOffer(C, b"two", 3)]
    )
    flag = equivocation_flag(offers)
    assert flag is not None and flag.variant == Variant.CONTENT.value
    assert flag.evidence == (A, B, C) and flag.opened_at == 2


def test_rejections_make_one_flag_per_reason_in_reason_order() -> None:
    flags = rejection_flags(
        [
            Rejection("signature-invalid", B, 7),
            Rejection("expired", A, 9),
            Rejection("signature-invalid", A, 3),
        ]
    )
    assert [f.variant for f in flags] == ["expired", "signature-invalid"]
    assert all(f.kind is FlagKind.REJECTED_ELEMENT for f in flags)
    assert flags[1].evidence == (A, B) and flags[1].opened_at == 3
    assert flags[1].detail == "2 element(s) rejected: signature-invalid"
    assert rejection_flags([]) == []


_offers = st.lists(
    st.builds(
        CountingOffer,
        digest=st.binary(min_size=32, max_size=32),
        content=st.sampled_from([b"p", b"q"]),
        first=st.integers(0, 5),
    ),
    max_size=6,
    unique_by=lambda o: o.digest,
)
_rejections = st.lists(
    st.builds(
        Rejection,
        fault=st.sampled_from(["expired", "malformed"]),
        digest=st.binary(min_size=32, max_size=32),
        first=st.integers(0, 5),
    ),
    max_size=6,
)


@given(_offers, st.randoms(use_true_random=False))
def test_the_hop_offer_and_equivocation_do_not_depend_on_arrival_order(
    offers: list[CountingOffer], rng: random.Random
) -> None:
    shuffled = list(offers)
    rng.shuffle(shuffled)
    assert canonical_order(shuffled) == canonical_order(offers)
    assert equivocation_flag(canonical_order(shuffled)) == equivocation_flag(
        canonical_order(offers)
    )


@given(_rejections, st.randoms(use_true_random=False))
def test_rejection_flags_do_not_depend_on_arrival_order(
    rejections: list[Rejection], rng: random.Random
) -> None:
    shuffled = list(rejections)
    rng.shuffle(shuffled)
    assert rejection_flags(shuffled) == rejection_flags(rejections)
