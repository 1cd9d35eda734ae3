"""``handoff-trace export-otlp``: every hop since a time as OTLP spans, pushed to an
OpenTelemetry receiver (docs/otlp.md), with progress on stderr."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app.cli.common import (
    EXIT_OK,
    EXIT_REJECT,
    UsageError,
    add_db_option,
    load_settings,
    nonneg_int,
    open_engine,
)
from app.otlp.export import ExportFailed, Sender, export_since, shown
from app.settings import check_otlp


def add_otlp_commands(sub: Any) -> None:
    p = sub.add_parser(
        "export-otlp",
        help="export hops as OTLP spans to an OpenTelemetry receiver",
        description="Push every hop whose offer was issued at --since or later to an "
        "OTLP/HTTP receiver (Jaeger, Tempo, Phoenix, an OpenTelemetry Collector) as one "
        "span each, with the ids, attributes and events of docs/otlp.md. The ids are "
        "derived from the dialog and the offer digests, so exporting again changes "
        "nothing. Exit 0: every span was taken; 1: the receiver refused or failed.",
    )
    add_db_option(p)
    p.add_argument(
        "--since",
        type=nonneg_int,
        default=0,
        metavar="SECONDS",
        help="only hops whose offer was issued at this NumericDate or later (default: all)",
    )
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help="the receiver's base URL; /v1/traces is added (default: HANDOFF_TRACE_OTLP_ENDPOINT)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_export_otlp)


def cmd_export_otlp(args: argparse.Namespace) -> int:
    settings = load_settings()
    endpoint = args.endpoint or settings.otlp_endpoint
    if endpoint is None:
        raise UsageError("no receiver: pass --endpoint URL or set HANDOFF_TRACE_OTLP_ENDPOINT")
    if args.endpoint:
        from dataclasses import replace

        check_otlp(replace(settings, otlp_endpoint=args.endpoint))
    engine = open_engine(args, settings)
    sender = Sender(endpoint, dict(settings.otlp_headers))

    def progress(done: int, total: int) -> None:
        if not args.quiet:
            print(f"\rexported {done} of {total} hops", end="", file=sys.stderr, flush=True)

    try:
        done = export_since(engine, sender, since=args.since, progress=progress)
    except ExportFailed as exc:
        if not args.quiet:
            print(file=sys.stderr)
        print(f"handoff-trace: export-otlp: {exc.detail}", file=sys.stderr)
        return EXIT_REJECT
    finally:
        sender.close()
        engine.dispose()
    if not args.quiet:
        print(file=sys.stderr)
    print(f"{done} spans exported to {shown(sender.url)}")
    return EXIT_OK


__all__ = ["add_otlp_commands", "cmd_export_otlp"]
