"""Pushing hops to an OTLP/HTTP receiver (docs/otlp.md, "Export"): the sender, the bulk
export of ``handoff-trace export-otlp``, and the service's background exporter.

The background exporter never touches ingest: it reads, in read-only transactions of its
own, the hops whose derivation committed since its last round, by the change sequence that
derivation writes (``hop.change``, app/store/otlp.py says why no change is read twice or
passed over, on PostgreSQL with several serve processes too). A round walks the marks from
where the last walk ended up to the horizon the round before took (a change waits one
round, so a hop whose statuses follow close behind its offer is built and sent once),
builds the spans of the hops and posts them in requests of at most ``PAGE`` spans. A hop
derived again to the same row and flags (another item of a later batch touched it) is not
built or sent again (a bounded memory of ``REMEMBERED`` hops); ids are deterministic, so a
span sent twice changes nothing anyway.
When the receiver fails (no connection, a timeout, 408/429/5xx) the walk stays where it is
and is tried again after a delay that doubles up to ``MAX_BACKOFF``, with jitter: the
backlog waits in the database, so memory stays bounded however long the receiver is down.
A request the receiver refuses outright (another 4xx) cannot succeed if sent again: it is
logged and skipped.
"""

from __future__ import annotations

import logging
import random
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from sqlalchemy import Engine

from app import __version__
from app.errors import HandoffTraceError
from app.otlp.spans import export_request, hop_span, new_request
from app.store import db
from app.store.otlp import (
    HopTrace,
    Position,
    change_horizon,
    changed_traces,
    count_changed,
    count_hops_since,
    traces_since,
)

log = logging.getLogger("handoff_trace.otlp")

TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"
TIMEOUT = 10.0
PAGE = 512  # spans per request (the OpenTelemetry SDK's default batch)
PAGES_PER_ROUND = 20  # a round posts at most this many requests; the next goes on
REMEMBERED = 32_768  # hops whose last sent span is remembered
MAX_BACKOFF = 60.0
_RETRY_STATUS = frozenset({408, 429, 502, 503, 504})


class ExportFailed(HandoffTraceError):
    """The receiver did not take a request; ``retry`` says whether sending it again may."""

    reason = "otlp-export"

    def __init__(self, detail: str, *, retry: bool) -> None:
        super().__init__(detail)
        self.retry = retry


def traces_url(endpoint: str) -> str:
    """``HANDOFF_TRACE_OTLP_ENDPOINT`` is the receiver's base URL, as
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is: the traces path is added unless it is there."""
    base = endpoint.rstrip("/")
    return base if base.endswith(TRACES_PATH) else base + TRACES_PATH


def shown(url: str) -> str:
    """The URL as logs and progress show it: no query (it may hold a key)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


class Sender:
    """Posts OTLP/HTTP protobuf requests to one receiver."""

    def __init__(
        self,
        endpoint: str,
        headers: Mapping[str, str] | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = traces_url(endpoint)
        self.client = httpx.Client(
            timeout=TIMEOUT,
            transport=transport,
            follow_redirects=False,
            headers={
                **dict(headers or {}),
                "Content-Type": PROTOBUF,
                "User-Agent": f"handoff-trace/{__version__}",
            },
        )

    def close(self) -> None:
        self.client.close()

    def send(self, spans: Sequence[Span]) -> int:
        """Post ``spans`` as one request; returns how many. Raises ExportFailed."""
        return self.post(export_request(spans).SerializeToString(), len(spans))

    def post(self, body: bytes, count: int) -> int:
        try:
            answer = self.client.post(self.url, content=body)
        except httpx.HTTPError as exc:
            raise ExportFailed(f"{shown(self.url)}: {type(exc).__name__}", retry=True) from exc
        if 200 <= answer.status_code < 300:
            return count
        retry = answer.status_code in _RETRY_STATUS or answer.status_code >= 500
        raise ExportFailed(
            f"{shown(self.url)} answered HTTP {answer.status_code}: {answer.text[:200]!r}",
            retry=retry,
        )


def export_since(
    engine: Engine,
    sender: Sender,
    *,
    since: int,
    progress: Callable[[int, int], None] | None = None,
    page: int = PAGE,
) -> int:
    """Every hop whose offer was issued at ``since`` or later, ``page`` spans a request
    (``handoff-trace export-otlp``). ``progress(done, total)`` after each request. Returns
    how many spans were sent; raises ExportFailed on the first request refused."""
    reader = db.read_only(engine)
    with db.transaction(reader) as session:
        total = count_hops_since(session, since=since)
    done = 0
    with db.transaction(reader) as session:
        for traces in traces_since(session, since=since, limit=page):
            request, into = new_request()
            for t in traces:
                hop_span(t, into.add())
            done += sender.post(request.SerializeToString(), len(into))
            if progress is not None:
                progress(done, max(total, done))
    return done


@dataclass
class ExporterStats:
    spans: int = 0  # spans the receiver took
    unchanged: int = 0  # hops read again but not built: the same as when last sent
    failures: int = 0  # requests that failed (each retried or skipped)
    last_success: int = 0  # the clock when the receiver last took a request (0: never)


@dataclass(frozen=True)
class ExporterStatus:
    """What ``/api/v1/metrics`` says of this process's exporter (docs/otlp.md, "Metrics")."""

    spans: int
    failures: int
    last_success: int
    backlog: int


class Exporter:
    """The service's background exporter; ``run_once`` is one round (the app's lifespan
    calls it every ``HANDOFF_TRACE_OTLP_SECONDS`` from a worker thread). It exports the
    hops that change after it was made."""

    def __init__(
        self,
        engine: Engine,
        sender: Sender,
        *,
        clock: Callable[[], int],
        page: int = PAGE,
        remembered: int = REMEMBERED,
    ) -> None:
        self.engine = engine
        self.reader = db.read_only(engine)
        self.sender = sender
        self.clock = clock
        self.page = page
        self.remembered = remembered
        self.stats = ExporterStats()
        # The walk: hops whose change mark is in [start, end), past ``after`` (``end`` None:
        # no walk under way). A walk ends at the horizon taken when the walk before it
        # began (``settled``): a change waits one round, so a hop that changes again within
        # it (its statuses close behind its offer) is built and sent once, as it is then.
        with db.transaction(self.reader) as session:
            self.start = change_horizon(session)
        self.settled = self.start
        self.end: int | None = None
        self.after: Position | None = None
        self.retry_at = 0.0
        self.attempts = 0
        # Per hop: its row's key (``_row_key``) when its span was last sent.
        self._sent: OrderedDict[tuple[str, str], tuple[Any, ...]] = OrderedDict()
        self._lock = threading.Lock()  # one round at a time

    def close(self) -> None:
        self.sender.close()

    def backlog(self) -> int:
        """How many hops changed and are not exported yet (a read of the change index)."""
        with db.transaction(self.reader) as session:
            return count_changed(session, start=self.start, after=self.after)

    def status(self) -> ExporterStatus:
        """The counters, and the backlog as the database has it now."""
        return ExporterStatus(
            spans=self.stats.spans,
            failures=self.stats.failures,
            last_success=self.stats.last_success,
            backlog=self.backlog(),
        )

    def run_once(self) -> int:
        """Export what changed since the last round; returns how many spans were taken.
        A failing receiver is logged and tried again later; never raises for it."""
        with self._lock:
            now = self.clock()
            if now < self.retry_at:
                return 0
            sent = 0
            for _ in range(PAGES_PER_ROUND):
                with db.transaction(self.reader) as session:
                    if self.end is None:
                        self.end, self.settled = self.settled, change_horizon(session)
                    page = changed_traces(
                        session, start=self.start, end=self.end, after=self.after, limit=self.page
                    )
                # A hop derived again to what was sent is not built again.
                keyed = [(t, _row_key(t)) for t in page]
                fresh = [(t, k) for t, k in keyed if self._sent.get((t.iss, t.hop)) != k]
                self.stats.unchanged += len(page) - len(fresh)
                if not page:
                    # Caught up to the horizon.
                    self.start, self.end, self.after = self.end, None, None
                    break
                try:
                    sent += self._send_changed(fresh)
                except ExportFailed as exc:
                    self.stats.failures += 1
                    if exc.retry:
                        self.attempts += 1
                        delay = min(MAX_BACKOFF, 2.0 ** (self.attempts - 1))
                        self.retry_at = now + random.uniform(delay / 2, delay)
                        log.warning("OTLP export failed, retrying in %.0f s: %s", delay, exc.detail)
                        return sent
                    log.error("OTLP export refused, these spans are skipped: %s", exc.detail)
                self.attempts = 0
                if len(page) < self.page:
                    # The last page of the walk: the next walk starts at its horizon.
                    self.start, self.end, self.after = self.end, None, None
                    break
                last = page[-1]
                self.after = (last.change, last.iss, last.hop)
            return sent

    def _send_changed(self, traces: list[tuple[HopTrace, tuple[Any, ...]]]) -> int:
        """Send the spans of ``traces`` in one request; remember what each hop was."""
        request, into = new_request()
        for t, _ in traces:
            hop_span(t, into.add())
        sent = 0
        if len(into):
            sent = self.sender.post(request.SerializeToString(), len(into))
            self.stats.spans += sent
            self.stats.last_success = self.clock()
        for t, row_key in traces:
            key = (t.iss, t.hop)
            self._sent[key] = row_key
            self._sent.move_to_end(key)
        while len(self._sent) > self.remembered:
            self._sent.popitem(last=False)
        return sent


def _row_key(t: HopTrace) -> tuple[Any, ...]:
    """What tells a hop apart from the one last exported, read from its row and its flags:
    a hop derived again to the same state, times and flags (another item of a later batch
    touched it) is not built again. *[choice]* A verified status that changes none of them
    (a second party's copy) reaches the span with the hop's next change, or with
    ``export-otlp``."""
    return (t.offer, t.state, t.accepted_at, t.terminal_at, t.exp, t.task, t.flag_mark)
