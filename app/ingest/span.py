"""Where an ingest cut short by an unavailable database starts again, and how far into
its input it got (``app.ingest.pipeline.ingest``'s progress and ``report.cut``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import BinaryIO

from app.capture.carriers import Found
from app.capture.items import CaptureItem
from app.errors import NotStored
from app.ingest.report import IngestReport


class Span:
    """The source of the first capture record read since everything before it was stored:
    where an ingest cut short by an unavailable database says to start again. (The
    signed items, host task states and envelope items of the records read with a batch
    are stored after it, so the span covers all three.)"""

    def __init__(self) -> None:
        self.first: str | None = None

    def reading(self, on_item: Callable[[CaptureItem], bool]) -> Callable[[CaptureItem], bool]:
        def read(item: CaptureItem) -> bool:
            if self.first is None:
                self.first = item.source
            return on_item(item)

        return read


def cut(report: IngestReport, span: Span, batch: Sequence[Found], *, exact: bool) -> bool:
    """Whether the ingest stops here, the database being unavailable; else the span
    starts again (everything read so far was stored or reported). ``exact``: the signed
    items are all that was read and not stored, so the cut is where they stopped."""
    unavailable = report.cut is not None or any(
        isinstance(e, NotStored) and e.unavailable for e in report.envelopes.errors[-1:]
    )
    if not unavailable:
        span.first = None
        return False
    if exact and report.cut is not None:
        return True
    first = span.first or (batch[0].source if batch else None) or report.cut
    report.cut = first or "(the end of the input)"
    return True


def fraction_read(data: bytes | BinaryIO) -> float | None:
    """How far into a seekable file reading has got; None for octets or a pipe."""
    if isinstance(data, bytes):
        return None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        size = os.fstat(data.fileno()).st_size
        return min(1.0, data.tell() / size) if size else None
    return None
