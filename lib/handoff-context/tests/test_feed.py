"""What the taps read of a compressed body: the same messages as of the plain one; never
more than a bound of output; nothing for an encoding they cannot undo."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import pytest
from handoff_context.taps._feed import MAX_BODY, Inflater, ResponseReader, request_message

MESSAGE = {"jsonrpc": "2.0", "id": 1, "result": {"statusUpdate": {"taskId": "t"}}}
BODY = json.dumps(MESSAGE).encode()


def read(chunks: list[bytes], media: str, encoding: str | None) -> list[Any]:
    seen: list[Any] = []
    reader = ResponseReader(media, seen.append, encoding)
    for chunk in chunks:
        reader.feed(chunk)
    reader.close()
    return seen


def in_pieces(octets: bytes, size: int = 7) -> list[bytes]:
    return [octets[i : i + size] for i in range(0, len(octets), size)]


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("identity", lambda b: b),
        ("deflate, gzip", lambda b: gzip.compress(zlib.compress(b))),
    ],
)
def test_a_compressed_answer_reads_as_the_plain_one(encoding: str, encode: Any) -> None:
    assert read(in_pieces(encode(BODY)), "application/json", encoding) == [MESSAGE]
    events = b"data: " + BODY + b"\r\n\r\n" + b"data: " + BODY + b"\r\n\r\n"
    assert read(in_pieces(encode(events)), "text/event-stream", encoding) == [MESSAGE] * 2
    assert request_message("/", encode(BODY), encoding) == MESSAGE


@pytest.mark.parametrize(
    ("encoding", "octets"),
    [
        ("br", BODY),  # not undone here: not reported
        ("gzip", b"not gzip at all"),
        ("gzip", gzip.compress(BODY)[:-8] + b"\x00" * 8),  # a wrong checksum
    ],
)
def test_what_cannot_be_undone_is_not_reported(encoding: str, octets: bytes) -> None:
    assert read(in_pieces(octets), "application/json", encoding) == []
    assert request_message("/", octets, encoding) is None


def test_a_compression_bomb_stops_at_the_bound() -> None:
    bomb = gzip.compress(b" " * (MAX_BODY + 1024))  # 8 MiB of spaces in a few KiB
    whole = Inflater("gzip")
    assert whole.feed(bomb) == b"" and whole.failed  # one small chunk cannot balloon
    assert request_message("/", bomb, "gzip") is None
    # In pieces, the answer's reader stops keeping it past the bound: nothing reported.
    assert read(in_pieces(bomb, 4096), "application/json", "gzip") == []
