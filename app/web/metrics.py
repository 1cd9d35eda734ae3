"""``GET /api/v1/metrics``: Prometheus metrics with ``prometheus_client``.

- Counters and histograms are this process's, in prometheus_client's registry: HTTP requests
  by route template, method and status (500s included, counted by ``app.web.observe``),
  request latency by route, ingest items by route and outcome (``error``: an item that
  could not be stored), and on SQLite the time write transactions waited for and held the
  file's one write lock. Every known label combination is present from the start, zeros
  included, so a rate never starts from a missing series.
- With several workers (``serve --workers N``), ``serve`` points ``PROMETHEUS_MULTIPROC_DIR``
  at an empty directory before the workers start; each worker writes its counters there and
  a scrape of any worker sums them all (``MultiProcessCollector``), so scrapes of one port
  no longer alternate between workers.
- Gauges are read from the database at scrape time (stored elements, receipts, verdicts,
  hops by state, flags by kind and status, open flags by kind and severity), so every
  instance and every worker reports the same values.
- Process metrics (CPU, memory, open files) are those of the process that answered, and so
  are the trust sources' (``handoff_trace_trust_source_stale`` and its neighbours): each
  instance fetches its sources itself. So are the OTLP exporter's (``handoff_trace_otlp_*``,
  present when ``HANDOFF_TRACE_OTLP_ENDPOINT`` is set): each process exports for itself;
  its backlog is read from the database at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from handoff_context import SEVERITY, FlagKind, HopState, Outcome
from handoff_context.sources import SourceState
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from app.otlp.export import ExporterStatus
from app.store.queries import StoreCounts

# The text format generate_latest writes, as this route always answered.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
INGEST_ROUTES = ("ingest", "verify")
ITEM_OUTCOMES = (*(o.value for o in Outcome), "error")

REQUESTS = Counter(
    "handoff_trace_http_requests",
    "HTTP requests answered, by route template, method and status.",
    ["route", "method", "status"],
)
LATENCY = Histogram(
    "handoff_trace_http_request_duration_seconds",
    "Time to answer an HTTP request, by route template and method.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
INGEST_REQUESTS = Counter(
    "handoff_trace_ingest_requests",
    "POST /ingest and /verify requests, by route and status.",
    ["route", "status"],
)
INGEST_ITEMS = Counter(
    "handoff_trace_ingest_items",
    "Verdicts answered by POST /ingest and /verify, by route and outcome "
    "(error: an item that could not be stored).",
    ["route", "outcome"],
)
# SQLite's one write lock: where several writers queue (``app.store.db._sqlite_writer``).
# Held most of the time means the writers, not the cores, bound ingest: PostgreSQL then.
WRITE_LOCK_WAIT = Counter(
    "handoff_trace_sqlite_write_lock_wait_seconds",
    "Time write transactions waited for the SQLite file's write lock (0 on PostgreSQL).",
)
WRITE_LOCK_HELD = Counter(
    "handoff_trace_sqlite_write_lock_held_seconds",
    "Time write transactions held the SQLite file's write lock (0 on PostgreSQL).",
)
WRITE_TRANSACTIONS = Counter(
    "handoff_trace_sqlite_write_transactions",
    "Write transactions that took the SQLite file's write lock (0 on PostgreSQL).",
)
for _route in INGEST_ROUTES:
    for _outcome in ITEM_OUTCOMES:
        INGEST_ITEMS.labels(route=_route, outcome=_outcome)
    INGEST_REQUESTS.labels(route=_route, status="200")


class _Store(Collector):
    """The database's gauges, as counted for this scrape."""

    def __init__(self, counts: StoreCounts) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        c = self.counts
        elements = GaugeMetricFamily(
            "handoff_trace_elements", "Signed elements stored, by type.", labels=["type"]
        )
        for kind in ("offer", "status"):
            elements.add_metric([kind], c.elements.get(kind, 0))
        yield elements
        yield GaugeMetricFamily(
            "handoff_trace_observations",
            "Receipts of elements stored (retransmissions included).",
            value=c.observations,
        )
        verdicts = GaugeMetricFamily(
            "handoff_trace_verdicts", "Stored verdicts, by outcome.", labels=["outcome"]
        )
        for outcome in Outcome:
            verdicts.add_metric([outcome.value], c.verdicts.get(outcome.value, 0))
        yield verdicts
        hops = GaugeMetricFamily("handoff_trace_hops", "Hops, by derived state.", labels=["state"])
        for state in sorted({*(s.value for s in HopState), *c.hops}):
            hops.add_metric([state], c.hops.get(state, 0))
        yield hops
        flags = GaugeMetricFamily(
            "handoff_trace_flags", "Flags, by kind and status.", labels=["kind", "status"]
        )
        for (kind, status), n in sorted(c.flags.items()):
            flags.add_metric([kind, status], n)
        yield flags
        open_flags = GaugeMetricFamily(
            "handoff_trace_open_flags",
            "Open flags (snoozes that ran out included), by kind and severity.",
            labels=["kind", "severity"],
        )
        known = {(k.value, SEVERITY[k].value) for k in FlagKind}
        for kind, severity in sorted(known | set(c.open_flags)):
            open_flags.add_metric([kind, severity], c.open_flags.get((kind, severity), 0))
        yield open_flags


class _Sources(Collector):
    """This instance's trust sources (issue 21): each instance fetches for itself, so each
    says whether its own key set is stale."""

    def __init__(self, sources: Sequence[SourceState]) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        stale = GaugeMetricFamily(
            "handoff_trace_trust_source_stale",
            "1 when a trust source's key set is not what it says now (never fetched, or the "
            "latest fetch failed or was refused: the last good set is in use).",
            labels=["source"],
        )
        success = GaugeMetricFamily(
            "handoff_trace_trust_source_last_success_timestamp_seconds",
            "When a trust source last answered with a key set that was accepted (0: never).",
            labels=["source"],
        )
        failures = GaugeMetricFamily(
            "handoff_trace_trust_source_failures",
            "Fetches of a trust source that failed or were refused since its last good one.",
            labels=["source"],
        )
        for s in self.sources:
            stale.add_metric([s.name], 1 if s.stale else 0)
            success.add_metric([s.name], s.last_success or 0)
            failures.add_metric([s.name], s.failures)
        yield stale
        yield success
        yield failures


class _Otlp(Collector):
    """This process's background OTLP exporter (app/otlp/export.py, docs/otlp.md)."""

    def __init__(self, status: ExporterStatus) -> None:
        self.status = status

    def collect(self) -> Iterator[Metric]:
        s = self.status
        yield CounterMetricFamily(
            "handoff_trace_otlp_spans_exported",
            "Spans the OTLP receiver took from this process's exporter.",
            value=s.spans,
        )
        yield CounterMetricFamily(
            "handoff_trace_otlp_export_failures",
            "Export requests that failed (retried later, or skipped when refused outright).",
            value=s.failures,
        )
        yield GaugeMetricFamily(
            "handoff_trace_otlp_last_success_timestamp_seconds",
            "When the OTLP receiver last took a request from this exporter (0: never).",
            value=s.last_success,
        )
        yield GaugeMetricFamily(
            "handoff_trace_otlp_backlog",
            "Hops changed and not yet exported by this exporter (read from the database).",
            value=s.backlog,
        )


class _Forward(Collector):
    """This process's own registry, in a single-process service."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def exposition(
    counts: StoreCounts,
    *,
    workers: bool,
    sources: Sequence[SourceState] = (),
    otlp: ExporterStatus | None = None,
) -> bytes:
    """The scrape: counters (summed over the workers when ``workers``: prometheus_client's
    multiprocess mode), process metrics, the database's gauges, the trust sources' and the
    OTLP exporter's (``otlp``, when one runs)."""
    registry = CollectorRegistry()
    if workers:
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        ProcessCollector(registry=registry)
    else:
        registry.register(_Forward())  # the default registry holds the process collector
    registry.register(_Store(counts))
    registry.register(_Sources(sources))
    if otlp is not None:
        registry.register(_Otlp(otlp))
    return generate_latest(registry)


def count_request(route: str, method: str, status: int, seconds: float) -> None:
    REQUESTS.labels(route=route, method=method, status=str(status)).inc()
    LATENCY.labels(route=route, method=method).observe(seconds)


def count_ingest(route: str, status: int, outcomes: dict[str, int] | None = None) -> None:
    INGEST_REQUESTS.labels(route=route, status=str(status)).inc()
    for outcome, n in (outcomes or {}).items():
        INGEST_ITEMS.labels(route=route, outcome=outcome).inc(n)


def count_write_lock(waited: float, held: float) -> None:
    """One write transaction on an SQLite file (``app.store.db.observe_write_lock``)."""
    WRITE_LOCK_WAIT.inc(waited)
    WRITE_LOCK_HELD.inc(held)
    WRITE_TRANSACTIONS.inc()
