"""The leaf format: what the evidence log holds for each stored element (docs/evidence-log.md).

A leaf is 44 octets, fixed, big-endian, so that any tool can read it without a schema:

    offset  size  field
    0       1     version, 0x01
    1       1     source: 0x01 a stored element (``element``), 0x02 refused octets
                  (``rejected_octets``)
    2       1     form: 0x01 jws, 0x02 cose, 0x03 json, 0x04 cbor
    3       1     type: 0x00 unknown, 0x01 offer, 0x02 status
    4       8     first_seen: when the service first received the octets (NumericDate)
    12      32    SHA-256 of the octets exactly as stored (for an element, its handoff
                  digest, profile §1.3)

Never the octets themselves: they may hold personal data, and may be larger than a
tlog-tiles entry (64 KiB). The hash is what binds the leaf to them; the evidence bundle
carries them beside the proof.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from app.log.errors import FormatError

VERSION = 1
SIZE = 44
_LAYOUT = struct.Struct(">BBBBQ32s")


class Source(IntEnum):
    ELEMENT = 1
    REJECTED = 2


FORMS = {"jws": 1, "cose": 2, "json": 3, "cbor": 4}
TYPES: dict[str | None, int] = {None: 0, "offer": 1, "status": 2}
_FORM_NAMES = {v: k for k, v in FORMS.items()}
_TYPE_NAMES = {v: k for k, v in TYPES.items()}


@dataclass(frozen=True, slots=True)
class Leaf:
    source: Source
    form: str
    type: str | None
    first_seen: int
    sha256: bytes

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise FormatError(f"leaf: unknown form {self.form!r}")
        if self.type not in TYPES:
            raise FormatError(f"leaf: unknown type {self.type!r}")
        if not 0 <= self.first_seen < 1 << 63:
            raise FormatError("leaf: first_seen out of range")
        if len(self.sha256) != 32:
            raise FormatError("leaf: the hash must be 32 octets")

    def encode(self) -> bytes:
        return _LAYOUT.pack(
            VERSION,
            int(self.source),
            FORMS[self.form],
            TYPES[self.type],
            self.first_seen,
            self.sha256,
        )

    @classmethod
    def decode(cls, data: bytes) -> Leaf:
        """Raises FormatError for anything but a well-formed version 1 leaf."""
        if len(data) != SIZE:
            raise FormatError(f"leaf: {len(data)} octets, not {SIZE}")
        version, source, form, kind, first_seen, sha = _LAYOUT.unpack(data)
        if version != VERSION:
            raise FormatError(f"leaf: unknown version {version}")
        try:
            src = Source(source)
        except ValueError:
            raise FormatError(f"leaf: unknown source {source}") from None
        if form not in _FORM_NAMES or kind not in _TYPE_NAMES:
            raise FormatError("leaf: unknown form or type")
        return cls(src, _FORM_NAMES[form], _TYPE_NAMES[kind], first_seen, sha)
