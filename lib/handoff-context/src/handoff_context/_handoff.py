"""The handoff object and the status object that carry elements (profile §1.4).

JSON objects carry compact JWS strings; CBOR objects carry byte strings holding tagged
COSE_Sign1 octets. The form of each element follows from that type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from handoff_context._encoding import MAX_ELEMENT_OCTETS
from handoff_context._frozen import quick_init
from handoff_context._model import _COSE, _JWS, Form
from handoff_context._typed import as_json, is_map
from handoff_context.errors import MalformedError


@quick_init
@dataclass(frozen=True, slots=True)
class HandoffObject:
    """``{"offer": ..., "chain": [...]}``; chain oldest first (profile §1.4)."""

    offer: bytes
    chain: tuple[bytes, ...]
    form: Form
    chain_carried: bool


@quick_init
@dataclass(frozen=True, slots=True)
class StatusObject:
    """``{"status": ...}`` (profile §1.4)."""

    status: bytes
    form: Form


def _element_octets(value: object, *, what: str, limit: int) -> tuple[bytes, Form]:
    if isinstance(value, str):
        if len(value) > limit:
            raise MalformedError(f"{what} is larger than {limit} octets")
        try:
            return value.encode("ascii"), _JWS
        except UnicodeEncodeError as exc:
            raise MalformedError(f"{what} is not ASCII compact JWS") from exc
    if isinstance(value, bytes):
        if len(value) > limit:
            raise MalformedError(f"{what} is larger than {limit} octets")
        return value, _COSE
    raise MalformedError(f"{what} must be a compact JWS string or a COSE byte string")


def is_handoff_like(value: object) -> bool:
    """True when ``value`` is a mapping that claims to be a handoff or status object."""
    # ``type(...) is dict`` first: decoded JSON is a dict, and the ABC check is slow.
    return (type(value) is dict or isinstance(value, Mapping)) and (
        "offer" in value or "status" in value
    )


def parse_object(
    value: object, *, max_element: int = MAX_ELEMENT_OCTETS
) -> HandoffObject | StatusObject:
    """Read a handoff or status object. Other top-level members are ignored (profile §1.4).
    An element above ``max_element`` octets (at most the profile's 64 KiB) is refused
    before any decoding work.

    Raises MalformedError when it is neither, both, or its members have the wrong types.
    """
    value = as_json(value)  # a protobuf Struct from a2a-sdk metadata reads as its JSON
    if not is_map(value):
        raise MalformedError("a handoff or status object must be a map")
    has_offer = "offer" in value
    has_status = "status" in value
    if has_offer and has_status:
        raise MalformedError("an object must not carry both offer and status")
    if has_status:
        octets, form = _element_octets(value["status"], what="status", limit=max_element)
        return StatusObject(status=octets, form=form)
    if not has_offer:
        raise MalformedError("the object carries neither offer nor status")
    offer, form = _element_octets(value["offer"], what="offer", limit=max_element)
    chain_value = value.get("chain")
    carried = "chain" in value
    if chain_value is None:
        chain: tuple[bytes, ...] = ()
    else:
        if not isinstance(chain_value, list):
            raise MalformedError("chain must be an array")
        items = []
        for i, item in enumerate(chain_value):
            octets, item_form = _element_octets(item, what=f"chain[{i}]", limit=max_element)
            if item_form is not form:
                raise MalformedError(f"chain[{i}] is not in the same form as the offer")
            items.append(octets)
        chain = tuple(items)
    return HandoffObject(offer=offer, chain=chain, form=form, chain_carried=carried)
