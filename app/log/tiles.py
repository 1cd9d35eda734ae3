"""C2SP tlog-tiles paths and contents.

- ``tile/<L>/<N>[.p/<W>]``: the hashes at tree level ``8 * L``, nodes ``N * 256`` up to
  ``N * 256 + W`` (256 in a full tile), 32 octets each, concatenated.
- ``tile/entries/<N>[.p/<W>]``: the leaves ``N * 256`` up to ``N * 256 + W``, each as a
  big-endian uint16 length and the leaf.
- ``<N>`` is written in groups of three digits, every group but the last prefixed with
  ``x``: 1234067 is ``x001/x234/067``.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from app.log.errors import FormatError

HEIGHT = 8
WIDTH = 1 << HEIGHT
_GROUP = re.compile(r"x[0-9]{3}")
_LAST = re.compile(r"[0-9]{3}")
_MAX_INDEX = 1 << 56


@dataclass(frozen=True, slots=True)
class TileRef:
    level: int  # -1 for an entry bundle
    index: int
    width: int  # WIDTH for a full tile

    @property
    def entries(self) -> bool:
        return self.level < 0

    def path(self) -> str:
        head = "tile/entries" if self.entries else f"tile/{self.level}"
        tail = "" if self.width == WIDTH else f".p/{self.width}"
        return f"{head}/{encode_index(self.index)}{tail}"


def encode_index(n: int) -> str:
    digits = f"{n:03d}"
    digits = "0" * (-len(digits) % 3) + digits
    groups = [digits[i : i + 3] for i in range(0, len(digits), 3)]
    return "/".join([*("x" + g for g in groups[:-1]), groups[-1]])


def parse_path(path: str) -> TileRef:
    """A tile or entry bundle path (after the log's prefix). Raises FormatError."""
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "tile":
        raise FormatError("not a tile path")
    if parts[1] == "entries":
        level = -1
    elif parts[1].isdigit() and len(parts[1]) <= 2 and (parts[1] == "0" or parts[1][0] != "0"):
        level = int(parts[1])
        if level > 63 // HEIGHT:
            raise FormatError("tile level out of range")
    else:
        raise FormatError("the tile level is not a number")
    rest = parts[2:]
    width = WIDTH
    if len(rest) >= 2 and rest[-2].endswith(".p"):
        w = rest[-1]
        if not w.isdigit() or w[0] == "0" or not 1 <= int(w) < WIDTH:
            raise FormatError("a partial tile's width is 1 to 255")
        width = int(w)
        rest = [*rest[:-2], rest[-2][:-2]]
    *groups, last = rest
    if not _LAST.fullmatch(last) or not all(_GROUP.fullmatch(g) for g in groups):
        raise FormatError("the tile index is not in groups of three digits")
    text = "".join(g[1:] for g in groups) + last
    if groups and text.startswith("000"):
        raise FormatError("the tile index has a leading zero group")
    index = int(text)
    if index >= _MAX_INDEX:
        raise FormatError("tile index out of range")
    return TileRef(level, index, width)


def encode_entries(leaves: Iterable[bytes]) -> bytes:
    return b"".join(struct.pack(">H", len(leaf)) + leaf for leaf in leaves)


def decode_entries(data: bytes) -> list[bytes]:
    """Raises FormatError for a truncated bundle."""
    out, at = [], 0
    while at < len(data):
        if at + 2 > len(data):
            raise FormatError("entry bundle: truncated length")
        (n,) = struct.unpack_from(">H", data, at)
        if at + 2 + n > len(data):
            raise FormatError("entry bundle: truncated entry")
        out.append(data[at + 2 : at + 2 + n])
        at += 2 + n
    return out


def tiles_for(size: int) -> list[TileRef]:
    """Every tile and entry bundle of a tree of ``size`` leaves (what a mirror copies)."""
    refs: list[TileRef] = []
    level = 0
    while True:
        count = size >> (HEIGHT * level)
        if count == 0:
            break
        refs += _row(level, count)
        if level == 0:
            refs += _row(-1, count)
        level += 1
    return refs


def _row(level: int, count: int) -> list[TileRef]:
    full, partial = divmod(count, WIDTH)
    refs = [TileRef(level, n, WIDTH) for n in range(full)]
    if partial:
        refs.append(TileRef(level, full, partial))
    return refs
