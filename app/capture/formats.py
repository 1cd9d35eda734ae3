"""Capture files (profile §10): which format a file is in, and the payloads it holds.

A capture file splits into items (JSON array elements, JSON Lines lines, HAR bodies, CBOR
sequence items), each decoded strictly. Every format has one reader, and it reads a binary
stream (``app.capture.streams``): a file is read as it arrives, and octets in memory are
read through ``io.BytesIO``, so both give the same items, errors and positions. The readers
are ``json_doc``, ``jsonl``, ``har`` and ``cbor_seq``; this module picks one.

This package knows nothing about A2A or MCP; ``app.capture.carriers`` looks inside each
payload. Nothing here raises on bad input: a bad item becomes a ``CarrierError`` naming its
position.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO

from app.capture import cbor_seq, har, json_doc, jsonl, streams
from app.capture.detect import detect_format, stream_head
from app.capture.items import CaptureFormat, CaptureItem, CarrierError, ItemOrError

__all__ = [
    "CaptureFormat",
    "CaptureItem",
    "CarrierError",
    "ItemOrError",
    "detect_format",
    "read_items",
    "read_stream",
    "stream_head",
]


def read_stream(
    stream: BinaryIO,
    head: bytes = b"",
    *,
    name: str,
    fmt: CaptureFormat,
    watch: tuple[bytes, ...] = (),
) -> Iterator[ItemOrError]:
    """Yield the capture's items in file order: a payload, an error, or None (no payload).

    ``head``: the first bytes of the capture, already read from ``stream`` to pick its
    format (``stream_head``); they are read again here. ``watch``: byte strings (the carrier
    keys) that make a HAR body that fails to parse an error instead of a skipped non-JSON
    body. Only one item is held at a time, except for HAR logs and JSON documents that are
    not arrays, which are one document each.
    """
    return _read(streams.buffered(stream, head), name=name, fmt=fmt, watch=watch)


def read_items(
    data: bytes, *, name: str, fmt: CaptureFormat, watch: tuple[bytes, ...] = ()
) -> Iterator[ItemOrError]:
    """``read_stream`` over octets already in memory (through ``io.BytesIO``)."""
    return _read(streams.in_memory(data), name=name, fmt=fmt, watch=watch)


def _read(
    reader: io.BufferedReader, *, name: str, fmt: CaptureFormat, watch: tuple[bytes, ...]
) -> Iterator[ItemOrError]:
    if fmt is CaptureFormat.JSON:
        return json_doc.read(reader, name, watch)
    if fmt is CaptureFormat.JSONL:
        return jsonl.read(reader, name)
    if fmt is CaptureFormat.HAR:
        return har.read(reader, name, watch)
    return cbor_seq.read(reader, name)
