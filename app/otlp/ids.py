"""Deterministic OTLP ids for hops (docs/otlp.md, "Ids"), so that a re-export is idempotent
and every instance exports the same span for the same hop.

- trace id: the first 16 octets of SHA-256("handoff-trace/otlp/trace" NUL dialog): one trace
  per dialog (the A2A ``contextId`` the offers name);
- span id: the first 8 octets of the offer's handoff digest (profile §1.3), so the parent of
  a hop's span is its offer's ``prev`` cut the same way, with no lookup;
- a status's link: the first 8 octets of the status's handoff digest.

OTLP forbids all-zero ids; a digest that starts with 8 (or 16) zero octets is a SHA-256
preimage nobody will find, but the rule is total anyway: such an id takes the next octets.
"""

from __future__ import annotations

import functools
import hashlib
import re

_TRACE_LABEL = b"handoff-trace/otlp/trace\x00"
TRACE_ID_HEX = re.compile(r"[0-9a-f]{32}")
SPAN_ID_HEX = re.compile(r"[0-9a-f]{16}")


def _nonzero(octets: bytes, size: int) -> bytes:
    for start in range(0, len(octets) - size + 1, size):
        part = octets[start : start + size]
        if any(part):
            return part
    return b"\x00" * (size - 1) + b"\x01"


@functools.lru_cache(maxsize=4096)  # an export names each dialog once per hop
def trace_id(dialog: str) -> bytes:
    """The trace id of every hop of ``dialog`` (16 octets)."""
    return _nonzero(hashlib.sha256(_TRACE_LABEL + dialog.encode()).digest(), 16)


def span_id(digest: bytes) -> bytes:
    """The span id of the hop whose offer has handoff digest ``digest`` (or of a status's
    link, with the status's digest): 8 octets."""
    first = digest[:8]
    return first if any(first) else _nonzero(digest, 8)


def trace_hex(dialog: str) -> str:
    return trace_id(dialog).hex()


def span_hex(digest: bytes) -> str:
    return span_id(digest).hex()
