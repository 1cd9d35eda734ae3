"""``GET /api/v1/metrics`` in the Prometheus text exposition format (version 0.0.4).

Store gauges (elements, observations, verdicts, hops, flags) are counted in the database,
so every worker answers the same. Request counters are per process: with several workers a
scrape sees one worker's counts (sum them with the ``instance`` label, or run one worker).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from app.store.queries import StoreCounts
from app.web.service import Service

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(
    name: str, kind: str, help_text: str, samples: Iterable[tuple[Mapping[str, str], int]]
) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        if labels:
            inside = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{inside}}} {value}")
        else:
            lines.append(f"{name} {value}")
    return lines


def render(service: Service, counts: StoreCounts) -> str:
    lines: list[str] = []
    lines += _family(
        "handoff_trace_elements",
        "gauge",
        "Signed elements stored, by type.",
        (({"type": t}, counts.elements.get(t, 0)) for t in ("offer", "status")),
    )
    lines += _family(
        "handoff_trace_observations",
        "gauge",
        "Receipts of elements stored (retransmissions included).",
        [({}, counts.observations)],
    )
    lines += _family(
        "handoff_trace_verdicts",
        "gauge",
        "Stored verdicts, by outcome.",
        (({"outcome": o}, n) for o, n in sorted(counts.verdicts.items())),
    )
    lines += _family(
        "handoff_trace_hops",
        "gauge",
        "Hops, by derived state.",
        (({"state": s}, n) for s, n in sorted(counts.hops.items())),
    )
    lines += _family(
        "handoff_trace_flags",
        "gauge",
        "Flags, by kind and status.",
        (({"kind": k, "status": s}, n) for (k, s), n in sorted(counts.flags.items())),
    )
    request_counts, item_counts = service.counters()
    requests, items = sorted(request_counts.items()), sorted(item_counts.items())
    lines += _family(
        "handoff_trace_ingest_requests_total",
        "counter",
        "POST /ingest and /verify requests answered by this process, by route and status.",
        (({"route": r, "status": s}, n) for (r, s), n in requests),
    )
    lines += _family(
        "handoff_trace_ingest_items_total",
        "counter",
        "Verdicts answered by this process, by route and outcome (error: not stored).",
        (({"route": r, "outcome": o}, n) for (r, o), n in items),
    )
    return "\n".join(lines) + "\n"
