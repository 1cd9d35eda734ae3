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
  again after a backoff that doubles up to ``max_backoff``, with full jitter. A batch the
  service refuses outright (any other 4xx) is dropped and counted as ``refused``, because
  sending it again cannot succeed.
- **Bounded**: the queue holds at most ``max_queue`` observations. When the service is down
  long enough for it to fill, the oldest are dropped, counted in ``stats.dropped`` and
  logged (at most one warning per ``interval`` of dropping).
- **Observation ids**: each record carries a random ``id``. A batch retried because its
  answer was lost is stored once: the service stores each id once and counts a repeat as
  ``redelivered``, never as a retransmission (``duplicate``).
- **Flush**: ``flush()`` waits (up to a timeout) until everything queued was delivered or
  given up; the reporter flushes at interpreter exit too. ``close()`` flushes and stops.
  A process ended by a signal's default action runs no exit handlers: uvicorn, after a
  graceful shutdown on SIGTERM, raises SIGTERM again. Call ``close()`` in the server's
  shutdown (an ASGI lifespan handler), or make SIGTERM an exit (``handoff-trace tap`` does).

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
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

# The carrying keys, named here too for the agents that know them from here.
from handoff_context.carry import A2A_EXTENSION_URI as A2A_EXTENSION_URI
from handoff_context.carry import MCP_META_KEY as MCP_META_KEY
from handoff_context.carry import Unreadable, find_all, is_bare_object

__all__ = ["Reporter", "ReporterStats", "to_plain"]

log = logging.getLogger("handoff_context.reporter")

INGEST_PATH = "/api/v1/ingest"
_RETRY_STATUS = frozenset({408, 425, 429})


@dataclass(frozen=True)
class ReporterStats:
    """What became of the observations so far.

    ``observed``: queued for sending; ``ignored``: messages without anything to report;
    ``delivered``: accepted by the service; ``dropped``: the oldest, pushed out of a full
    queue; ``refused``: in a batch the service refused (4xx); ``errors``: messages that
    could not be read at all; ``retries``: failed posts retried; ``queued``: waiting now.
    """

    observed: int = 0
    ignored: int = 0
    delivered: int = 0
    dropped: int = 0
    refused: int = 0
    errors: int = 0
    retries: int = 0
    queued: int = 0


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
    receives. ``post`` replaces the HTTP call (``(url, body, headers, timeout) -> status``)
    for tests and embedders; it may raise OSError. Never raises after construction.
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
        post: Callable[[str, bytes, Mapping[str, str], float], int] | None = None,
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
        self._state = _State()
        mutex = threading.Lock()
        self._lock = threading.Condition(mutex)  # new work, or a flush hurrying the sender
        self._settled = threading.Condition(mutex)  # a batch settled
        self._thread = threading.Thread(target=self._run, name="handoff-reporter", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

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
        """Flush, then stop the background thread. Returns whether the flush completed."""
        done = self.flush(timeout)
        with self._lock:
            self._state.closed = True
            self._lock.notify_all()
        self._thread.join(timeout=self._timeout + 1)
        atexit.unregister(self._at_exit)
        return done

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

    def _send(self, batch: list[_Record]) -> str:
        body = b"\n".join(r.line for r in batch) + b"\n"
        try:
            status = self._post(self.endpoint, body, self._headers, self._timeout)
        except (OSError, ValueError) as exc:  # refused, reset, timed out, a bad URL
            log.info("handoff reporter: posting %d observations failed: %s", len(batch), exc)
            return "retry"
        if 200 <= status < 300:
            return "delivered"
        if status in _RETRY_STATUS or status >= 500:
            log.info("handoff reporter: the service answered %d; will retry", status)
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


def _urllib_post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        exc.close()
        return int(exc.code)


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
