"""Chain rules (profile §7): s0..sn is chain[0..] followed by the current offer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from handoff_context._model import Element, Offer
from handoff_context._verdict import _PASS, ChainElementReport, ChainReport, Result
from handoff_context.errors import CheckFailed, HandoffError, Reason


def check_too_deep(chain_length: int, max_chain: int) -> None:
    """Profile §7 [profile]: checked first, before any signature work."""
    if chain_length + 1 > max_chain:
        raise CheckFailed(
            Reason.TOO_DEEP,
            f"chain of {chain_length + 1} offers exceeds the maximum of {max_chain}",
        )


def _offer(el: Element) -> Offer:
    if not isinstance(el.payload, Offer):  # the callers only pass offers
        raise CheckFailed(Reason.BROKEN_CHAIN, "a status stands where an offer belongs")
    return el.payload


def check_chain(
    current: Element,
    chain: Sequence[bytes],
    *,
    parse: Callable[[bytes], Element],
    verify_signature: Callable[[Element], object],
    receiver: str | None,
    skew: int,
    report: ChainReport,
    on_verified: Callable[[Element], None] | None = None,
) -> list[Element]:
    """Verify the carried chain of ``current`` and fill ``report``.

    Raises CheckFailed (broken-chain, cycle, or a chain element's own failure reason named
    ``chain[i]``). Returns the parsed chain elements. ``on_verified`` sees each chain element
    whose signature verified (so a caller can remember it as a known offer).
    """
    elements: list[Element] = []
    for i, octets in enumerate(chain):
        try:
            el = parse(octets)
            if not isinstance(el.payload, Offer):
                raise CheckFailed(Reason.BROKEN_CHAIN, "it is a status, not an offer")
            verify_signature(el)
        except HandoffError as exc:
            report.elements.append(ChainElementReport(i, None, None, None, Result.FAIL, exc.reason))
            raise CheckFailed(exc.reason, f"chain[{i}]: {exc.detail}") from exc
        if on_verified is not None:
            on_verified(el)
        elements.append(el)
        report.elements.append(
            ChainElementReport(
                i, el.digest, el.payload.iss, el.payload.aud, _PASS, hop=el.payload.hop
            )
        )
    seq = [*elements, current]
    offers = [_offer(el) for el in seq]
    report.partial = offers[0].prev is not None
    for i in range(1, len(seq)):
        prev_el, prev, cur = seq[i - 1], offers[i - 1], offers[i]
        name = "the offer" if i == len(seq) - 1 else f"chain[{i}]"
        if cur.prev != prev_el.digest:
            raise CheckFailed(Reason.BROKEN_CHAIN, f"prev of {name} does not name chain[{i - 1}]")
        if prev.aud != cur.iss:
            raise CheckFailed(
                Reason.BROKEN_CHAIN,
                f"aud of chain[{i - 1}] ({prev.aud!r}) is not the iss of {name} ({cur.iss!r})",
            )
        if not prev.iat - skew <= cur.iat <= prev.exp + skew:
            raise CheckFailed(
                Reason.BROKEN_CHAIN,
                f"{name} was issued at {cur.iat}, outside chain[{i - 1}]'s life "
                f"{prev.iat}..{prev.exp} (skew {skew} s)",
            )
    seen: set[str] = set()
    for i, offer in enumerate(offers):
        if offer.iss in seen:
            raise CheckFailed(
                Reason.CYCLE, f"{offer.iss!r} issues more than one offer in the chain"
            )
        seen.add(offer.iss)
        if receiver is not None and i < len(offers) - 1 and offer.iss == receiver:
            raise CheckFailed(Reason.CYCLE, f"the receiver {receiver!r} is an earlier issuer")
    return elements
