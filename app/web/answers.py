"""Bounded answers for ``POST /api/v1/ingest`` and ``/verify`` (issue 20).

Whatever a request holds, its JSON answer stays under a few megabytes: every verdict in
input order while there are at most ``MAX_LISTED`` of them in at most ``MAX_LISTED_BYTES``;
past either bound only the verdicts that are not ``accept`` are listed, up to the same
bounds, and ``verdicts_omitted`` counts the rest (``counts`` always covers every verdict).
Item errors are listed up to ``MAX_ERRORS``. The answer is built as bytes in the worker
thread that ran the ingest, never on the event loop; a client that wants every verdict
asks for NDJSON (``Accept: application/x-ndjson``), one verdict a line as they are made.
"""

from __future__ import annotations

import json
import queue
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson
from handoff_context import Outcome, Verdict

from app.errors import HandoffTraceError, ItemProblem, NotStored

MAX_LISTED = 1000  # verdicts listed in one JSON answer
MAX_LISTED_BYTES = 1024 * 1024  # bytes of verdicts listed in one JSON answer
MAX_ERRORS = 1000  # item errors (and envelope errors) listed in one answer
NDJSON = "application/x-ndjson"
_CHUNK = 64 * 1024  # NDJSON bytes handed to the event loop at a time


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def verdict_line(shown: dict[str, Any]) -> bytes:
    """A verdict's JSON (``Verdict.to_json``, ``item`` perhaps added) as ``_dumps`` writes
    it, by ``orjson`` (a tenth of ``json.dumps``'s instructions, once per verdict of every
    answer). A verdict holds text, integers, booleans, null, lists and objects, never a
    float (which ``orjson`` would write differently), and for those ``orjson`` writes
    exactly ``json.dumps``'s compact text with ``ensure_ascii=False``, as the stored
    envelope octets rely on (``app.ingest.envelope.payload_octets``). What ``orjson``
    refuses (a lone surrogate, an integer beyond 64 bits) goes to ``_dumps``, which decides
    as it always did (a lone surrogate raises ``UnicodeEncodeError``)."""
    try:
        return orjson.dumps(shown)
    except orjson.JSONEncodeError:
        return _dumps(shown)


class Listing:
    """The verdicts one answer lists, within the bounds (``MAX_LISTED`` verdicts and
    ``MAX_LISTED_BYTES`` unless given), and the count of all of them. ``numbered``: each
    listed verdict carries ``item``, its position among all verdicts (from 1), since past a
    bound the list skips the accepted ones."""

    def __init__(
        self,
        *,
        max_listed: int = MAX_LISTED,
        max_bytes: int = MAX_LISTED_BYTES,
        numbered: bool = False,
    ) -> None:
        self.lines: list[tuple[bool, bytes]] = []  # (accept, the verdict's JSON)
        self.size = 0
        self.only_refused = False
        self.omitted = 0
        self.outcomes: Counter[str] = Counter()
        self.max_listed, self.max_bytes, self.numbered = max_listed, max_bytes, numbered

    def add(self, verdict: Verdict) -> None:
        self.outcomes[verdict.outcome.value] += 1
        accept = verdict.outcome is Outcome.ACCEPT
        if (accept and self.only_refused) or (self.only_refused and self._full()):
            self.omitted += 1  # cannot be listed: not even serialised
            return
        shown = verdict.to_json()
        if self.numbered:
            shown["item"] = sum(self.outcomes.values())
        line = verdict_line(shown)
        if not self._fits(line) and not self.only_refused:
            # Past a bound: only what is not ``accept`` is listed from now on.
            self.only_refused = True
            kept = [(a, b) for a, b in self.lines if not a]
            self.omitted += len(self.lines) - len(kept)
            self.lines, self.size = kept, sum(len(b) + 1 for _, b in kept)
            if accept:
                self.omitted += 1
                return
        if not self._fits(line):
            self.omitted += 1
            return
        self.lines.append((accept, line))
        self.size += len(line) + 1

    def _full(self) -> bool:
        return len(self.lines) >= self.max_listed or self.size >= self.max_bytes

    def _fits(self, line: bytes) -> bool:
        return len(self.lines) < self.max_listed and self.size + len(line) + 1 <= self.max_bytes

    def counts(self, skipped: int) -> dict[str, int]:
        """Verdicts by outcome (every outcome present), plus totals (profile §12)."""
        counts = {o.value: self.outcomes[o.value] for o in Outcome}
        return {**counts, "verdicts": sum(self.outcomes.values()), "skipped": skipped}

    def body(self, rest: dict[str, Any]) -> bytes:
        """The JSON answer: ``verdicts`` listed, ``verdicts_omitted``, then ``rest``."""
        listed = b",".join(b for _, b in self.lines)
        tail = _dumps({"verdicts_omitted": self.omitted, **rest})
        return b'{"verdicts":[' + listed + b"]," + tail[1:]


def problems(found: Sequence[ItemProblem], *, mark: bool = False) -> list[dict[str, Any]]:
    """Item errors as the answer lists them, at most ``MAX_ERRORS``. ``mark``: those the
    database did not store say ``"not_stored": true`` (envelope errors, most of which are
    invalid items kept as evidence)."""
    listed: list[dict[str, Any]] = []
    for e in found[:MAX_ERRORS]:
        one: dict[str, Any] = {"source": e.source, "detail": e.detail}
        if mark and isinstance(e, NotStored):
            one["not_stored"] = True
        listed.append(one)
    return listed


class Lines:
    """NDJSON verdict lines made in a worker thread, read by the event loop in chunks;
    the worker waits while the client reads slowly (a bounded queue), and gives up when
    the client went away (``close``)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self._buffer: list[bytes] = []
        self._size = 0
        self._gone = threading.Event()

    def add(self, line: bytes) -> None:
        self._buffer.append(line + b"\n")
        self._size += len(line) + 1
        if self._size >= _CHUNK:
            self._put(b"".join(self._buffer))
            self._buffer, self._size = [], 0

    def verdict(self, verdict: Verdict) -> None:
        self.add(verdict_line(verdict.to_json()))

    def end(self, last: object) -> None:
        self.add(_dumps(last))
        self._put(b"".join(self._buffer))
        self._buffer = []
        self._put(None)

    def _put(self, chunk: bytes | None) -> None:
        while not self._gone.is_set():
            try:
                self._queue.put(chunk, timeout=0.5)
                return
            except queue.Full:
                continue
        raise ClientGone("the client stopped reading the answer")

    def next_chunk(self) -> bytes | None:
        return self._queue.get()

    def close(self) -> None:
        self._gone.set()


class ClientGone(HandoffTraceError):
    """The NDJSON client stopped reading: the worker ends its work early."""

    reason = "client-gone"
