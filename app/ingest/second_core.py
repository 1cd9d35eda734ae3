"""The second core for bulk ingest: the forked signature helper of ``verify``
(``app.ingest.forked``) verifying an ingest's signatures ahead of it.

SQLite has one writer, so in bulk ingest the second core was idle, and the thread pool
(``app.ingest.signatures``) barely uses it: its threads wait for the GIL the judging thread
holds. The forked child has a GIL of its own. It reads the same capture files, verifies the
signatures of items a batch or more ahead of the parent, and sends back the digests that
verified; before judging each batch the parent marks them in the batch's signature cache
(``SecondCore.mark``), so the in-order checks find them there, and whatever has not arrived
they verify themselves. Verdicts are byte-identical with or without it (the helper's
module docstring says why).

Only a caller that runs one thread may fork (the ``ingest`` command with files, never the
HTTP service, whose ``/ingest`` runs inside a server with threads): ``ingest(fork=True)``.
A live pipe gets no helper (the child could not read it again), nor does a small input
or a machine without an idle second core (``forked.idle_core``).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO

from handoff_context import SignatureCache, TrustStore

from app.capture.carriers import Carried, CarrierError
from app.ingest.forked import Helper
from app.ingest.live import is_pipe

if TYPE_CHECKING:
    from app.ingest.build import Pipeline

Capture = bytes | BinaryIO


class _OwnReader(io.BufferedReader):
    """A second reader of a capture file, with an offset of its own (opened anew through
    ``/proc/self/fd``, so the parent's reads and the child's never move each other), whose
    ``len`` is the file's size: the helper weighs its inputs by their octets."""

    def __len__(self) -> int:
        return os.fstat(self.fileno()).st_size


def _own_reader(data: BinaryIO) -> _OwnReader | None:
    """``data`` opened again at its current offset; None when it is not a regular file."""
    try:
        fd, offset = data.fileno(), data.tell()
        raw = io.FileIO(f"/proc/self/fd/{fd}", "rb")
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None
    reader = _OwnReader(raw)
    reader.seek(offset)
    return reader


class SecondCore:
    """The helper of one ingest, and the index of the first item of the next batch."""

    def __init__(self, helper: Helper) -> None:
        self.helper = helper
        self.position = 0

    @classmethod
    def start(
        cls,
        inputs: Sequence[tuple[str, Capture]],
        *,
        trust: TrustStore,
        max_element: int,
        skew: int,
        content_type: str | None,
    ) -> SecondCore | None:
        """Fork the helper over ``inputs``, or None where it cannot or would not help."""
        readers: list[_OwnReader] = []
        own: list[tuple[str, bytes]] = []
        for name, data in inputs:
            if isinstance(data, bytes):
                own.append((name, data))
                continue
            reader = None if is_pipe(data) else _own_reader(data)
            if reader is None:
                _close(readers)
                return None
            readers.append(reader)
            # The helper reads bytes or a file alike (``read_capture``); it weighs each
            # input by ``len``, which the reader answers with the file's size.
            own.append((name, reader))  # type: ignore[arg-type]
        try:
            helper = Helper.start(
                own, trust=trust, max_element=max_element, skew=skew, content_type=content_type
            )
        finally:
            _close(readers)  # the child has its own copies
        return None if helper is None else cls(helper)

    def mark(self, cache: SignatureCache) -> None:
        """Before a batch is judged: what the child verified so far, marked in ``cache``."""
        self.helper.before(self.position, cache)

    def judged(self, batch: Sequence[Carried | CarrierError]) -> None:
        self.position += len(batch)

    def stop(self) -> None:
        self.helper.stop()


def _close(readers: list[_OwnReader]) -> None:
    for reader in readers:
        with contextlib.suppress(OSError):
            reader.close()


@contextlib.contextmanager
def second_core(
    pipeline: Pipeline,
    inputs: Iterable[tuple[str, Capture]],
    content_type: str | None,
    *,
    fork: bool,
) -> Iterator[tuple[list[tuple[str, Capture]], SecondCore | None]]:
    """The inputs as a list, and with ``fork`` the helper over them (or None), stopped
    when the ingest ends, however it ends."""
    listed = list(inputs)
    second = None
    if fork:
        options = pipeline.options
        second = SecondCore.start(
            listed,
            trust=pipeline.trust,
            max_element=options.max_element_bytes,
            skew=options.skew,
            content_type=content_type,
        )
    try:
        yield listed, second
    finally:
        if second is not None:
            second.stop()
