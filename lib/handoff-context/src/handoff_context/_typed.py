"""Typed SDK messages as the JSON values the rest of the library reads.

a2a-sdk 1.x hands agents protobuf messages (``Message``, ``Task``, ``SendMessageRequest``,
a ``Struct`` from ``metadata``) and the mcp package pydantic models. Everything in this
library reads decoded JSON (maps, lists, strings), so a typed message is turned into its
JSON form at the boundary. Both are recognised by duck typing: the core does not depend on
protobuf or pydantic, and imports protobuf's ``json_format`` only when handed a protobuf
message (which means protobuf is installed).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any, TypeGuard

# The types decoded JSON and CBOR are made of besides maps, none of them a Mapping.
_LEAVES = frozenset({type(None), bool, int, float, str, bytes, list})


def is_map(value: object) -> TypeGuard[Mapping[str, Any]]:
    """Whether ``value`` is a map (``isinstance(value, Mapping)``), answered at once for
    decoded JSON and CBOR: a dict is one, null (an absent member, the usual case in a walk
    of a message) and the other leaves are not; only anything else (a typed SDK map) asks
    the Mapping ABC, whose check costs some 1,800 instructions, ten times this one."""
    return type(value) is dict or (type(value) not in _LEAVES and isinstance(value, Mapping))


def is_protobuf(value: object) -> bool:
    """True for a protobuf message (``google.protobuf.message.Message``), without importing
    protobuf unless it is already loaded."""
    module = sys.modules.get("google.protobuf.message")
    if module is None:
        return False
    return isinstance(value, module.Message)


def is_pydantic(value: object) -> bool:
    """True for a pydantic model instance (the mcp package's types)."""
    return callable(getattr(value, "model_dump", None)) and callable(
        getattr(type(value), "model_validate", None)
    )


def as_json(value: object) -> Any:
    """``value`` as decoded JSON when it is a typed SDK message, else ``value`` itself.

    Protobuf messages take their proto3 JSON mapping (camelCase names, as on the wire);
    pydantic models their aliases (``_meta``), without unset members."""
    if type(value) is dict:  # decoded JSON already (a capture): the common case, at once
        return value
    if is_protobuf(value):
        # Imported by name: protobuf is no dependency (and has no stubs) of the core.
        json_format = importlib.import_module("google.protobuf.json_format")
        return json_format.MessageToDict(value)
    if is_pydantic(value):
        return value.model_dump(by_alias=True, mode="json", exclude_none=True)  # type: ignore[attr-defined]
    return value
