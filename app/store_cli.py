"""``handoff-trace ingest``, ``hops``, ``flags`` and ``db upgrade``: the store from the
command line, with exactly the interface of issue 3 (other tools are built on it).

``--db`` defaults to ``DATABASE_URL``, else the embedded SQLite file; the schema is brought
to head on first use, so the embedded database needs no set-up step. ``--now`` evaluates
time-based states and flags at that clock instead of the wall clock.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from .cli import EXIT_OK, EXIT_REJECT, UsageError, load_trust, nonneg_int, read_inputs, visible
from .ingest import IngestReport, Pipeline, ingest
from .protocol.lifecycle import FlagKind, HopState
from .protocol.refs import ObjectIndex
from .settings import Settings, SettingsError
from .store import db
from .store.derive import sweep
from .store.queries import FlagStatus, list_flags, list_hops
from .verifying import load_objects

# Inputs above these sizes get a progress line on stderr.
_LARGE_BYTES = 1024 * 1024
_LARGE_ITEMS = 1000


def add_store_commands(sub: Any) -> None:
    _add_ingest(sub)
    _add_hops(sub)
    _add_flags(sub)
    _add_db(sub)


def _add_db_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        metavar="URL",
        help="database URL (default: DATABASE_URL, else sqlite:///var/handoff-trace.db)",
    )


def _add_now_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--now",
        type=nonneg_int,
        metavar="SECONDS",
        help="evaluate time-based states and flags at this NumericDate (default: wall clock)",
    )


def _add_ingest(sub: Any) -> None:
    p = sub.add_parser(
        "ingest",
        help="verify capture files and store them",
        description="Verify every element in the capture files (as `verify` does) and store "
        "them: elements, observations, verdicts, hop states and flags. Freshness is judged "
        "at each capture record's received_at.",
    )
    _add_db_option(p)
    p.add_argument(
        "--trust",
        metavar="FILE",
        help="trust configuration (SPEC 4; default: HANDOFF_TRACE_TRUST_FILE)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the SPEC 11 verdicts as one JSON array"
    )
    p.add_argument("files", nargs="+", metavar="FILES", help="capture files, '-' for stdin")
    p.set_defaults(func=cmd_ingest)


def _add_hops(sub: Any) -> None:
    p = sub.add_parser("hops", help="list hops and their states (SPEC 8)")
    _add_db_option(p)
    _add_now_option(p)
    p.add_argument("--state", choices=[s.value for s in HopState], help="only hops in state S")
    p.add_argument(
        "--flag", choices=[k.value for k in FlagKind], help="only hops with a flag of KIND"
    )
    p.add_argument("--dialog", metavar="D", help="only hops of dialog D")
    p.add_argument("--json", action="store_true", help="print one JSON array")
    p.set_defaults(func=cmd_hops)


def _add_flags(sub: Any) -> None:
    p = sub.add_parser("flags", help="list flags: hops that need a person")
    _add_db_option(p)
    _add_now_option(p)
    p.add_argument("--kind", choices=[k.value for k in FlagKind], help="only flags of KIND")
    p.add_argument("--status", choices=[s.value for s in FlagStatus], help="only status S")
    p.add_argument("--json", action="store_true", help="print one JSON array")
    p.set_defaults(func=cmd_flags)


def _add_db(sub: Any) -> None:
    p = sub.add_parser("db", help="database maintenance")
    db_sub = p.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    up = db_sub.add_parser("upgrade", help="run the migrations up to the latest schema")
    _add_db_option(up)
    up.set_defaults(func=cmd_db_upgrade)


# --- configuration ----------------------------------------------------------------------


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc


def _engine(args: argparse.Namespace, settings: Settings, *, migrate: bool = True) -> Engine:
    url = args.db or settings.database_url or db.default_url()
    try:
        engine = db.make_engine(url)
        if migrate:
            db.ensure_schema(engine)
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    except SQLAlchemyError as exc:
        shown = make_url(db.normalise_url(url)).render_as_string(hide_password=True)
        raise UsageError(f"cannot use the database {shown}: {_first_line(exc)}") from exc
    return engine


def _first_line(exc: SQLAlchemyError) -> str:
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]


# --- commands ---------------------------------------------------------------------------


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    engine = _engine(args, _settings(), migrate=False)
    try:
        db.upgrade(engine)
        revision = db.current_revision(engine)
    except SQLAlchemyError as exc:
        raise UsageError(f"migration failed: {_first_line(exc)}") from exc
    finally:
        engine.dispose()
    print(f"database schema at revision {revision}")
    return EXIT_OK


def cmd_ingest(args: argparse.Namespace) -> int:
    settings = _settings()
    trust_file = args.trust or settings.trust_file
    if trust_file is None:
        raise UsageError("no trust file: pass --trust FILE or set HANDOFF_TRACE_TRUST_FILE")
    trust = load_trust(str(trust_file))
    inputs = read_inputs(args.files)
    engine = _engine(args, settings)
    now = int(time.time())
    options = settings.verify_options(at=now)
    pipeline = Pipeline(
        engine=engine,
        trust=trust,
        options=options,
        timing=settings.timing,
        objects=_objects(settings),
        envelope=settings.envelope,
    )
    large = {name for name, data in inputs if len(data) > _LARGE_BYTES}
    try:
        report = ingest(pipeline, inputs, now=now, progress=_Progress(sys.stderr, large))
    finally:
        engine.dispose()
    for error in [*report.errors, *report.envelopes.errors]:
        print(f"handoff-trace: {visible(error.source, 80)}: {error.detail}", file=sys.stderr)
    if args.json:
        json.dump([v.to_json() for v in report.verdicts], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_ingest_summary(report)
    failed = (
        report.errors
        or report.envelopes.errors
        or any(v.outcome.value == "reject" for v in report.verdicts)
    )
    return EXIT_REJECT if failed else EXIT_OK


class _Progress:
    """A progress line on stderr for large inputs: redrawn on a terminal, a line per tenth
    otherwise (so logs stay readable)."""

    def __init__(self, out: TextIO, large: set[str]) -> None:
        self.out, self.large, self.tty = out, large, out.isatty()
        self.step = 0

    def __call__(self, name: str, done: int, total: int) -> None:
        if name not in self.large and total < _LARGE_ITEMS:
            return
        tenth = done * 10 // total
        if self.tty:
            bar = "#" * (done * 30 // total)
            end = "\n" if done == total else ""
            self.out.write(f"\r{visible(name, 40)} [{bar:<30}] {done}/{total}{end}")
        elif tenth > self.step or done == total:
            self.step = tenth if done < total else 0
            self.out.write(f"{visible(name, 40)}: {done}/{total} items\n")
        self.out.flush()


def _print_ingest_summary(report: IngestReport) -> None:
    rejected = [v for v in report.verdicts if v.outcome.value == "reject"]
    if rejected:
        print("REJECTED")
        for v in rejected[:20]:
            reason = v.reason.value if v.reason else "-"
            print(f"  {visible(v.source, 40)}  {reason}  {visible(v.detail, 100)}")
        if len(rejected) > 20:
            print(f"  ... and {len(rejected) - 20} more (--json lists all)")
        print()
    rows: dict[tuple[str, str, str], int] = {}
    for v in report.verdicts:
        key = (v.element or "-", v.outcome.value, v.reason.value if v.reason else "-")
        rows[key] = rows.get(key, 0) + 1
    table = [("ELEMENT", "OUTCOME", "REASON", "COUNT")]
    table += [(*key, str(n)) for key, n in sorted(rows.items())]
    _print_table(table)
    c = report.counts
    print(
        f"\n{c['verdicts']} verdicts, {c['stored']} new elements stored, "
        f"{c['duplicate']} retransmissions, {c['pending']} pending, "
        f"{c['skipped']} items without a handoff, {c['errors']} item errors"
    )
    if c["envelopes"]:
        print(f"{c['envelopes']} envelope items, {c['envelope_errors']} with errors")


def _print_table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _objects(settings: Settings) -> ObjectIndex:
    """The objects held for reference checks (``HANDOFF_TRACE_OBJECTS_DIR``)."""
    if settings.objects_dir is None:
        return ObjectIndex()
    try:
        return load_objects(settings.objects_dir)
    except OSError as exc:
        raise UsageError(
            f"cannot read HANDOFF_TRACE_OBJECTS_DIR {settings.objects_dir}: {exc.strerror}"
        ) from exc


def _swept(args: argparse.Namespace) -> tuple[Engine, int]:
    """The engine, after the sweep has applied the clock (``--now`` or the wall clock)."""
    settings = _settings()
    engine = _engine(args, settings)
    now = int(time.time()) if args.now is None else args.now
    try:
        rules = settings.envelope.rules
        db.run(engine, lambda session: sweep(session, now=now, timing=settings.timing, cases=rules))
    except SQLAlchemyError as exc:
        engine.dispose()
        raise UsageError(f"database error: {_first_line(exc)}") from exc
    return engine, now


def cmd_hops(args: argparse.Namespace) -> int:
    engine, _now = _swept(args)
    try:
        with db.transaction(db.read_only(engine)) as session:
            hops = list_hops(session, state=args.state, flag=args.flag, dialog=args.dialog)
    finally:
        engine.dispose()
    if args.json:
        json.dump([h.to_json() for h in hops], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    table = [("OFFER", "STATE", "A2A", "ISS", "AUD", "DIALOG", "FLAGS")]
    for h in hops:
        j = h.to_json()
        table.append(
            (
                j["offer"][:10],
                j["state"],
                j["a2a_state"] or "-",
                visible(j["iss"], 40),
                visible(j["aud"], 40),
                visible(j["dialog"], 24),
                ",".join(j["flags"]) or "-",
            )
        )
    _print_table(table)
    print(f"\n{len(hops)} hops")
    return EXIT_OK


def cmd_flags(args: argparse.Namespace) -> int:
    engine, now = _swept(args)
    try:
        with db.transaction(db.read_only(engine)) as session:
            flags = list_flags(session, now=now, kind=args.kind, status=args.status)
    finally:
        engine.dispose()
    if args.json:
        json.dump([f.to_json() for f in flags], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    table = [("ID", "KIND", "VARIANT", "SEVERITY", "STATUS", "ISS", "HOP", "EVIDENCE")]
    for f in flags:
        j = f.to_json()
        table.append(
            (
                str(j["id"]),
                j["kind"],
                visible(j["variant"], 20) or "-",
                j["severity"],
                j["status"],
                visible(j["iss"], 40),
                j["hop"][:12],
                str(len(j["evidence"])),
            )
        )
    _print_table(table)
    print(f"\n{len(flags)} flags")
    return EXIT_OK
