"""The one way a capture is read: as a binary stream, one item at a time.

Octets already in memory are read the same way, through ``io.BytesIO``, so every format has
one reader and a file gives the same items, errors and positions whether it was uploaded
whole or streamed from disk.
"""

from __future__ import annotations

import io
from typing import Any, BinaryIO

STREAM_CHUNK = 1 << 16
# One JSON Lines line or one JSON array element at most: far above any carrier message
# (elements are at most 64 KiB by default), so only a broken file meets it; it bounds the
# memory one item can take.
MAX_ITEM_OCTETS = 16 << 20


def in_memory(data: bytes) -> io.BufferedReader:
    """Octets in memory as a stream like ``buffered``'s. ``io.BytesIO`` counts its own
    offsets, so it needs no prefixing layer (which costs a Python call per read)."""
    return io.BufferedReader(io.BytesIO(data), STREAM_CHUNK)


def buffered(stream: BinaryIO, head: bytes = b"") -> io.BufferedReader:
    """``head`` and then the rest of ``stream``, buffered in chunks of ``STREAM_CHUNK``.

    ``tell()`` on the answer counts from the first byte of ``head``, so byte offsets in
    error details are offsets into the capture, whatever was read before.
    """
    return io.BufferedReader(_Prefixed(head, stream), STREAM_CHUNK)


class _Prefixed(io.RawIOBase):
    """``head`` and then the rest of ``stream``, as one raw stream."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head = memoryview(head)
        self._stream = stream
        self._read = 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._read

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            self._read += n
            return n
        data = read_some(self._stream, len(buffer))
        buffer[: len(data)] = data
        self._read += len(data)
        return len(data)


def read_some(stream: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes, returning as soon as some are there: on a pipe fed live (a tap),
    ``read(n)`` would wait for all ``n``."""
    read1 = getattr(stream, "read1", None)
    return bytes(read1(n)) if read1 is not None else stream.read(n)
