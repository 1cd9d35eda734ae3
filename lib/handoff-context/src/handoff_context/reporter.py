"""The reporter: a live feed of what an agent sends and receives, to a handoff-trace service.

```python
from handoff_context.reporter import Reporter

reporter = Reporter("https://trace.example", token, receiver="spiffe://b.example/agent/coder")
reporter.observe_received(message)  # an A2A or MCP message as the SDK built it, or a dict
```

Each observation becomes a capture record (profile §10) ``{"id", "received_at", "received_by",
"dialog", "payload"}``, queued in memory and posted in batches, as JSON Lines, to the
service's ``POST /api/v1/ingest``. What it promises the agent:

- **It never harms the agent.** ``observe_*`` never blocks on the network and never raises:
  it converts the message, appends to a bounded queue and returns. A background thread does
  the rest.
- **Batching**: a batch is posted when ``batch_size`` observations are queued or
  ``interval`` seconds after the oldest one was queued, whichever comes first.
- **Retries**: a batch that fails (no connection, a timeout, HTTP 429 or 5xx) is sent
  again after a backoff that doubles up to ``max_backoff``, with full jitter. The service
  answers 200 only when it stored everything; its 503 says what it did not store (the
  items in ``errors``, every record from ``not_stored_from`` on), and exactly those
  records are sent again, the rest counted ``delivered``. A batch the service refuses
  outright (any other 4xx) is dropped and counted as ``refused``, because sending it
  again cannot succeed.
- **Bounded**: the queue holds at most ``max_queue`` observations. When the service is down
  long enough for it to fill, the oldest are dropped, counted in ``stats.dropped`` and
  logged (at most one warning per ``interval`` of dropping).
- **Observation ids**: each record carries a random ``id``. A batch retried because its
  answer was lost is stored once: the service stores each id once and counts a repeat as
  ``redelivered``, never as a retransmission (``duplicate``).
- **Flush**: ``flush()`` waits (up to a timeout) until everything queued was delivered or
  given up; ``close()`` flushes and stops. The reporter closes itself at interpreter exit
  and on SIGTERM, with no code in the agent: a process ended by a signal's default action
  runs no exit handlers (uvicorn, after a graceful shutdown on SIGTERM, raises SIGTERM
  again with the default action), so the reporter, made in the main thread, chains a
  SIGTERM handler in front of the one it found (uvicorn's, or the default) and closes
  (for at most ``exit_timeout`` seconds) before handing the signal on. What it could not
  deliver is said in one warning log line.
- **Spool** (``spool=PATH``, or the ``HANDOFF_REPORTER_SPOOL`` environment variable): what
  is left undelivered at close is appended to a local file (JSON Lines, the records as
  they would have been posted, mode 0600), and the next reporter made with the same path
  sends it first. Records carry their ids, so one delivered and spooled anyway (its answer
  was lost) is stored once. Worker processes may share the file (it is locked while
  written and read).

It finds the handoff elements itself, with the same reading the service does
(``handoff_context.carry.find_all``): a message is queued when it carries our A2A extension
key or MCP ``_meta`` key where profile §9 puts them, or is an A2A Task or status update (the
host keeps its own task state beside the hop's, profile §8, even when no element rides in
it). Everything else (an A2A ``ListTasks`` answer among them) is counted as ``ignored`` and
not sent. The service does the real reading and every check.

Only the standard library is used for HTTP (``urllib``), so the library keeps its three
dependencies. Sync and asyncio agents are served alike: ``observe_*`` is a cheap call from
either, and ``aflush`` waits without blocking the event loop.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import os
import random
import re
import signal
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

# The carrying keys, named here too for the agents that know them from here.
from handoff_context.carry import A2A_EXTENSION_URI as A2A_EXTENSION_URI
from handoff_context.carry import MCP_META_KEY as MCP_META_KEY
from handoff_context.carry import Unreadable, find_all, is_bare_object

__all__ = ["Reporter", "ReporterStats", "to_plain"]

log = logging.getLogger("handoff_context.reporter")

INGEST_PATH = "/api/v1/ingest"
SPOOL_VARIABLE = "HANDOFF_REPORTER_SPOOL"
_RETRY_STATUS = frozenset({408, 425, 429})
# A record's place in the posted body, as the service names it (JSON Lines: ``request:N``).
_LINE = re.compile(r"request:([0-9]{1,9})")
# What ``post`` answers: a status, or a status and the answer's body.
PostResult = int | tuple[int, bytes]


@dataclass(frozen=True)
class ReporterStats:
    """What became of the observations so far.

    ``observed``: queued for sending; ``ignored``: messages without anything to report;
    ``delivered``: stored by the service; ``dropped``: the oldest, pushed out of a full
    queue; ``refused``: in a batch the service refused (4xx); ``errors``: messages that
    could not be read at all; ``retries``: failed posts retried; ``queued``: waiting now;
    ``spooled``: written to the spool file at close; ``unspooled``: read from it at start.
    """

    observed: int = 0
    ignored: int = 0
    delivered: int = 0
    dropped: int = 0
    refused: int = 0
    errors: int = 0
    retries: int = 0
    queued: int = 0
    spooled: int = 0
    unspooled: int = 0


@dataclass
class _Record:
    number: int
    line: bytes


@dataclass
class _State:
    queue: deque[_Record] = field(default_factory=deque)
    stats: ReporterStats = field(default_factory=ReporterStats)
    next_number: int = 0
    oldest_at: float | None = None  # monotonic time the oldest queued record was queued
    last_drop_log: float = -1e9
    closed: bool = False


class Reporter:
    """Queue observations and post them to a handoff-trace service in the background.

    ``url``: the service's base URL; ``token``: an API token (``handoff-trace tokens
    create``); ``receiver``: this agent's identifier, stamped as ``received_by`` on what it
    receives. ``post`` replaces the HTTP call (``(url, body, headers, timeout) -> status``,
    or ``(status, answer body)`` so that a 503 can say what was stored) for tests and
    embedders; it may raise OSError. ``spool``: a file for what is left undelivered at close
    (default: ``HANDOFF_REPORTER_SPOOL``, else none). ``handle_sigterm``: close on SIGTERM
    (see the module's docstring). Never raises after construction.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        receiver: str,
        batch_size: int = 200,
        interval: float = 0.5,
        max_queue: int = 10_000,
        timeout: float = 5.0,
        max_backoff: float = 30.0,
        exit_timeout: float = 5.0,
        post: Callable[[str, bytes, Mapping[str, str], float], PostResult] | None = None,
        spool: str | os.PathLike[str] | None = None,
        handle_sigterm: bool = True,
    ) -> None:
        if batch_size < 1 or max_queue < batch_size:
            raise ValueError("need 1 <= batch_size <= max_queue")
        self.endpoint = url.rstrip("/") + INGEST_PATH
        self.receiver = receiver
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/x-ndjson",
        }
        self._batch_size = batch_size
        self._interval = interval
        self._max_queue = max_queue
        self._timeout = timeout
        self._max_backoff = max_backoff
        self._exit_timeout = exit_timeout
        self._post = post or _urllib_post
        spool = spool if spool is not None else os.environ.get(SPOOL_VARIABLE) or None
        self._spool = None if spool is None else os.fspath(spool)
        self._state = _State()
        # Re-entrant: the SIGTERM handler runs in the main thread, which may hold it.
        mutex = threading.RLock()
        self._lock = threading.Condition(mutex)  # new work, or a flush hurrying the sender
        self._settled = threading.Condition(mutex)  # a batch settled
        self._unspool()
        self._thread = threading.Thread(target=self._run, name="handoff-reporter", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)
        self._previous_sigterm: Any = None
        if handle_sigterm:
            self._chain_sigterm()

    # --- the agent's side: cheap, never blocking on the network, never raising ----------

    def observe_received(self, message: object, *, dialog: str | None = None) -> None:
        """Report a message this agent received (``received_by`` is its ``receiver``)."""
        self._observe(message, received_by=self.receiver, dialog=dialog)

    def observe_sent(
        self, message: object, *, to: str | None = None, dialog: str | None = None
    ) -> None:
        """Report a message this agent sent; ``to`` is the receiver's identifier when known
        (the service judges audience against it; without it, against its own setting)."""
        self._observe(message, received_by=to, dialog=dialog)

    def _observe(self, message: object, *, received_by: str | None, dialog: str | None) -> None:
        try:
            payload = to_plain(message)
            if not worth_reporting(payload):
                self._count(ignored=1)
                return
            record: dict[str, Any] = {
                "id": uuid.uuid4().hex,
                "received_at": time.time(),
                "payload": payload,
            }
            if received_by is not None:
                record["received_by"] = received_by
            found_dialog = dialog if dialog is not None else dialog_of(payload)
            if found_dialog is not None:
                record["dialog"] = found_dialog
            line = json.dumps(
                record, separators=(",", ":"), allow_nan=False, default=_bytes_as_text
            ).encode()
        except Exception:  # a message we cannot read must never reach the agent as an error
            log.debug("handoff reporter: could not read a message", exc_info=True)
            self._count(errors=1)
            return
        self._enqueue(line)

    def _count(self, **deltas: int) -> None:
        with self._lock:
            self._bump(**deltas)

    def _bump(self, **deltas: int) -> None:
        stats = self._state.stats
        self._state.stats = replace(
            stats, **{name: getattr(stats, name) + n for name, n in deltas.items()}
        )

    def _enqueue(self, line: bytes) -> None:
        with self._lock:
            closed = self._state.closed
        if closed:  # observed during a shutdown, after the reporter closed
            self._keep([_Record(0, line)])
            return
        with self._lock:
            state = self._state
            state.next_number += 1
            if not state.queue:
                state.oldest_at = time.monotonic()
            state.queue.append(_Record(state.next_number, line))
            self._bump(observed=1)
            dropped = 0
            while len(state.queue) > self._max_queue:
                state.queue.popleft()
                dropped += 1
            if dropped:
                self._bump(dropped=dropped)
                self._log_drop()
            # The sender sleeps until there is something (then until it is due) or a
            # batch is full.
            if len(state.queue) in (1, self._batch_size):
                self._lock.notify_all()

    def _log_drop(self) -> None:
        now = time.monotonic()
        if now - self._state.last_drop_log >= max(self._interval, 1.0):
            self._state.last_drop_log = now
            log.warning(
                "handoff reporter: queue full (%d), the service at %s is not taking "
                "observations; dropped the oldest (%d dropped so far)",
                self._max_queue,
                self.endpoint,
                self._state.stats.dropped,
            )

    @property
    def stats(self) -> ReporterStats:
        """The counters now, with ``queued`` filled in."""
        with self._lock:
            return replace(self._state.stats, queued=len(self._state.queue))

    # --- flushing -----------------------------------------------------------------------

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every observation queued so far was delivered, refused or dropped,
        for at most ``timeout`` seconds. Returns whether it got there. Never raises."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            target = self._state.next_number
            self._state.oldest_at = -1e9  # due now
            self._lock.notify_all()
            while self._state.queue and self._state.queue[0].number <= target:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._settled.wait(left)
        return True

    async def aflush(self, timeout: float | None = 10.0) -> bool:
        """``flush`` for asyncio agents: waits in a thread, not on the event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    def close(self, timeout: float | None = 10.0) -> bool:
        """Flush, then stop the background thread. What is left undelivered is written to
        the spool file, when there is one, and said in a warning log line. Returns whether
        the flush completed."""
        done = self.flush(timeout)
        with self._lock:
            self._state.closed = True
            self._lock.notify_all()
        self._thread.join(timeout=self._timeout + 1)
        atexit.unregister(self._at_exit)
        self._unchain_sigterm()
        with self._lock:
            left = list(self._state.queue)
            self._state.queue.clear()
        if left:
            self._keep(left)
        return done

    def _keep(self, left: list[_Record]) -> None:
        """Spool what is left, or say that it is lost."""
        if self._spool is not None:
            try:
                _append(self._spool, [r.line for r in left])
            except OSError as exc:
                log.warning(
                    "handoff reporter: could not deliver %d observations to %s, nor write "
                    "them to the spool %s (%s); they are lost",
                    len(left),
                    self.endpoint,
                    self._spool,
                    exc,
                )
                return
            self._count(spooled=len(left))
            log.warning(
                "handoff reporter: could not deliver %d observations to %s; spooled to %s, "
                "to be sent at the next start",
                len(left),
                self.endpoint,
                self._spool,
            )
            return
        log.warning(
            "handoff reporter: could not deliver %d observations to %s; they are lost (set "
            "spool= or %s to keep them for the next start)",
            len(left),
            self.endpoint,
            SPOOL_VARIABLE,
        )

    def _unspool(self) -> None:
        """Queue what an earlier reporter spooled, before anything new."""
        if self._spool is None:
            return
        try:
            lines = _take(self._spool)
        except OSError as exc:
            log.warning("handoff reporter: could not read the spool %s: %s", self._spool, exc)
            return
        for line in lines:
            self._enqueue(line)
        if lines:
            self._count(unspooled=len(lines))
            log.info("handoff reporter: %d spooled observations queued", len(lines))

    def _chain_sigterm(self) -> None:
        """Close on SIGTERM, then hand the signal to the handler found (uvicorn's, which
        shuts the server down gracefully, or the default action). Only the main thread
        may set a signal handler; elsewhere the reporter relies on ``close`` and atexit."""
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        except (ValueError, OSError):  # an embedded interpreter without signals
            return

    def _unchain_sigterm(self) -> None:
        """Put back the handler found, when ours is still the one set (closed, the
        reporter has nothing left to do on SIGTERM)."""
        if self._previous_sigterm is None:
            return
        if threading.current_thread() is not threading.main_thread():
            return
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, self._previous_sigterm)
                self._previous_sigterm = None

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous_sigterm
        try:
            self.close(self._exit_timeout)
        except Exception:  # nothing may escape into the signal's delivery
            log.debug("handoff reporter: close on SIGTERM failed", exc_info=True)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            # The default action, as it would have been: the process ends by the signal.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _at_exit(self) -> None:
        try:
            self.close(self._exit_timeout)
        except Exception:  # at exit nothing may escape into the interpreter's shutdown
            log.debug("handoff reporter: flush at exit failed", exc_info=True)

    # --- the background thread ----------------------------------------------------------

    def _run(self) -> None:
        attempt = 0
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            outcome = self._send(batch)
            with self._lock:
                if isinstance(outcome, set):
                    self._settle_part(batch, outcome)
                    outcome = "retry"
                else:
                    self._settle(batch, outcome)
                self._settled.notify_all()
            if outcome != "retry":
                attempt = 0
                continue
            with self._lock:
                if self._state.closed:
                    return  # closing with the service away: what is left stays counted
            attempt += 1
            self._back_off(attempt)

    def _next_batch(self) -> list[_Record] | None:
        """Wait until a batch is due (full, or ``interval`` after its oldest record), then
        take it; None when closed with nothing left."""
        with self._lock:
            while True:
                state = self._state
                if state.queue:
                    due = (state.oldest_at or 0.0) + self._interval
                    if len(state.queue) >= self._batch_size or time.monotonic() >= due:
                        return list(state.queue)[: self._batch_size]
                    if state.closed:
                        return list(state.queue)[: self._batch_size]
                    self._lock.wait(max(0.0, due - time.monotonic()))
                elif state.closed:
                    return None
                else:
                    self._lock.wait()

    def _send(self, batch: list[_Record]) -> str | set[int]:
        """``delivered``, ``refused``, ``retry`` (the whole batch), or the numbers of the
        batch's records the service says it did not store (the rest it stored)."""
        body = b"\n".join(r.line for r in batch) + b"\n"
        try:
            answer = self._post(self.endpoint, body, self._headers, self._timeout)
        except (OSError, ValueError) as exc:  # refused, reset, timed out, a bad URL
            log.info("handoff reporter: posting %d observations failed: %s", len(batch), exc)
            return "retry"
        status, content = answer if isinstance(answer, tuple) else (answer, b"")
        if 200 <= status < 300:
            return "delivered"
        if status in _RETRY_STATUS or status >= 500:
            log.info("handoff reporter: the service answered %d; will retry", status)
            if status == 503:
                left = _not_stored(content, len(batch))
                if left is not None:
                    return {batch[i].number for i in left}
            return "retry"
        log.warning(
            "handoff reporter: the service refused %d observations (HTTP %d); dropped",
            len(batch),
            status,
        )
        return "refused"

    def _settle(self, batch: list[_Record], outcome: str) -> None:
        """Take the batch's records off the queue unless it is to be retried. Records of
        the batch dropped meanwhile (a full queue) are gone already."""
        state = self._state
        if outcome == "retry":
            self._bump(retries=1)
            return
        last = batch[-1].number
        settled = 0
        while state.queue and state.queue[0].number <= last:
            state.queue.popleft()
            settled += 1
        self._bump(**{outcome: settled})
        state.oldest_at = time.monotonic() if state.queue else None

    def _settle_part(self, batch: list[_Record], left: set[int]) -> None:
        """Take the batch's stored records off the queue (``delivered``); those in
        ``left`` stay, to be sent again."""
        state = self._state
        sent = {r.number for r in batch}
        kept = deque(r for r in state.queue if r.number not in sent or r.number in left)
        self._bump(delivered=len(state.queue) - len(kept), retries=1)
        state.queue = kept
        state.oldest_at = time.monotonic() if kept else None

    def _back_off(self, attempt: int) -> None:
        # Full jitter (AWS architecture blog, "Exponential Backoff And Jitter"): agents that
        # lost the service together do not come back together.
        # The exponent is capped: past ~1,030 failed attempts (a service away for hours at
        # the default 30 s ceiling) ``interval * 2**attempt`` no longer fits in a float,
        # and the OverflowError would end the sender thread for good.
        delay = random.uniform(0, min(self._max_backoff, self._interval * 2 ** min(attempt, 64)))
        with self._lock:
            if not self._state.closed:
                self._lock.wait(delay)


# An answer longer than this is not read for what was not stored (the whole batch is sent
# again: its records carry ids, so what was stored is stored once).
_MAX_ANSWER = 4 * 1024 * 1024


def _urllib_post(
    url: str, body: bytes, headers: Mapping[str, str], timeout: float
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return int(response.status), b""
    except urllib.error.HTTPError as exc:
        content = exc.read(_MAX_ANSWER + 1)
        exc.close()
        return int(exc.code), content


def _not_stored(content: bytes, n: int) -> set[int] | None:
    """The batch positions (0-based) that a 503 answer of ``POST /api/v1/ingest`` says
    were not stored: those its ``errors`` name and every one from ``not_stored_from`` on.
    None (send the whole batch again) when the answer does not say precisely: not the
    service's JSON, or more errors than it listed."""
    if not content or len(content) > _MAX_ANSWER:
        return None
    try:
        answer = json.loads(content)
        errors = answer["errors"]
        if len(errors) < answer["counts"]["errors"]:
            return None
        sources = [e["source"] for e in errors]
        sources += [e["source"] for e in answer.get("envelope_errors", []) if e.get("not_stored")]
        cut = answer.get("not_stored_from")
    except (ValueError, KeyError, TypeError):
        return None
    left: set[int] = set()
    for source in [*sources, cut] if cut is not None else sources:
        found = _LINE.match(source) if isinstance(source, str) else None
        if found is None:
            return None  # not a line of ours (e.g. "host task states"): all again
        left.add(int(found.group(1)) - 1)
    if cut is not None:
        first = int(_LINE.match(cut).group(1)) - 1  # type: ignore[union-attr]
        left |= set(range(first, n))
    return {i for i in left if 0 <= i < n}


def _append(path: str, lines: list[bytes]) -> None:
    """Append records to the spool, under an exclusive lock, and make them durable."""
    import fcntl

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"".join(line + b"\n" for line in lines))
        os.fsync(fd)
    finally:
        os.close(fd)  # releases the lock


def _take(path: str) -> list[bytes]:
    """Every record of the spool, which is left empty (under an exclusive lock, so two
    processes never both take a record). No file: nothing."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return []
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        os.ftruncate(fd, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    return [line for line in b"".join(chunks).split(b"\n") if line.strip()]


def _bytes_as_text(value: object) -> object:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("ascii", errors="replace")
    raise TypeError(f"{type(value).__name__} is not JSON")


# --- reading messages as the SDKs build them --------------------------------------------
#
# The one place where the reporter knows where A2A and MCP put a handoff (profile §9). It only
# decides whether a message is worth sending; the service reads it again, strictly.


def to_plain(message: object) -> Any:
    """A message as plain JSON values: a dict as it is, a pydantic model (the mcp SDK, the
    a2a-sdk's 0.3 types) by its aliases, a protobuf message (the a2a-sdk 1.x types) in
    protobuf JSON, JSON text or bytes parsed. Raises on anything else."""
    if isinstance(message, Mapping | list):
        return message
    if isinstance(message, str | bytes | bytearray):
        return json.loads(message)
    dump = getattr(message, "model_dump", None)
    if callable(dump):
        return dump(by_alias=True, mode="json", exclude_none=True)
    if hasattr(message, "DESCRIPTOR") and hasattr(message, "SerializeToString"):
        # The a2a-sdk's dependency, not ours: imported only when an agent hands one over.
        from google.protobuf import json_format  # type: ignore[import-untyped,unused-ignore]

        return json_format.MessageToDict(message)
    raise TypeError(f"cannot report a {type(message).__name__}")


def worth_reporting(payload: Any) -> bool:
    """Whether the service would store anything of a payload: a handoff or status object
    (even a malformed one, kept as evidence) or an A2A host task state. The service reads
    payloads with ``carry.find_all`` (an array as a JSON-RPC batch, one level); so does
    this, so that nothing is shipped that the service then skips: an A2A ``ListTasks``
    answer, a Task's history, an unknown task state, a carrying place that holds no object
    (the service only counts it as an error)."""
    items = payload if isinstance(payload, list) else [payload]
    return any(_stored(item) for item in items)


def _stored(item: Any) -> bool:
    if not isinstance(item, Mapping):
        return False
    if "payload" in item and not is_bare_object(item):
        return False  # a capture record inside the record this would be sent in: an error
    return any(not isinstance(found, Unreadable) for found in find_all(item))


def dialog_of(payload: Any) -> str | None:
    """The A2A ``contextId`` a payload names, if any (the record's ``dialog``)."""
    if not isinstance(payload, Mapping):
        return None
    for name in ("contextId", "context_id"):
        if isinstance(payload.get(name), str):
            return str(payload[name])
    for name in ("params", "result", "message", "task", "statusUpdate", "status_update"):
        inner = dialog_of(payload.get(name))
        if inner is not None:
            return inner
    return None
