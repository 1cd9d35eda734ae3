"""JSON Lines captures (profile §10): one payload per line, each line parsed strictly on its own,
so a bad line costs only itself."""

from __future__ import annotations

import io
from collections.abc import Iterator

from handoff_context import strict_json_loads
from handoff_context.errors import MalformedError

from app.capture import streams
from app.capture.items import JSON_SPACE, CaptureItem, CarrierError, ItemOrError


def read(reader: io.BufferedReader, name: str) -> Iterator[ItemOrError]:
    """Yield each line's payload, or a ``CarrierError`` named ``name:N`` (N from 1).

    Blank lines are no items. A line longer than ``streams.MAX_ITEM_OCTETS`` is skipped
    without being held and reported as an error; the next line is read as usual.
    """
    limit = streams.MAX_ITEM_OCTETS
    line_number = 0
    while line := reader.readline(limit + 1):
        line_number += 1
        source = f"{name}:{line_number}"
        if len(line) > limit and not line.endswith(b"\n"):
            while (rest := reader.readline(limit)) and not rest.endswith(b"\n"):
                pass  # skip to the end of the over-long line
            yield CarrierError(source, f"line {line_number} is longer than {limit} bytes")
            continue
        if not line.strip(JSON_SPACE):
            continue
        try:
            value = strict_json_loads(line.rstrip(b"\n"), what=f"line {line_number}")
        except MalformedError as exc:
            yield CarrierError(source, exc.detail)
            continue
        yield CaptureItem(source, value, raw=line)
