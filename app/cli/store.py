"""``handoff-trace ingest``, ``hops``, ``flags`` and ``db upgrade``: the store from the
command line, with exactly the interface of issue 3 (other tools are built on it).

``--db`` defaults to ``DATABASE_URL``, else the embedded SQLite file; the schema is brought
to head on first use, so the embedded database needs no set-up step. ``--now`` evaluates
time-based states and flags at that clock instead of the wall clock.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from handoff_context import HopState, ObjectIndex, Verdict
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from app.cli.common import (
    EXIT_OK,
    EXIT_REJECT,
    UsageError,
    add_db_option,
    add_now_option,
    fewer_collections,
    first_line,
    load_settings,
    open_engine,
    print_table,
    store_trust,
    visible,
)
from app.envelope.flags import FlagKind
from app.ingest.build import build_pipeline, freeze_start_up, verify_options
from app.ingest.pipeline import IngestReport, ingest
from app.ingest.sweep import sweep
from app.ingest.verifying import load_objects
from app.settings import Settings
from app.store import db
from app.store.queries import FlagStatus, list_flags, list_hops

# Inputs above this size get a progress line on stderr.
_LARGE_BYTES = 1024 * 1024


def add_store_commands(sub: Any) -> None:
    _add_ingest(sub)
    _add_hops(sub)
    _add_flags(sub)
    _add_db(sub)


def _add_ingest(sub: Any) -> None:
    p = sub.add_parser(
        "ingest",
        help="verify capture files and store them",
        description="Verify every element in the capture files (as `verify` does) and store "
        "them: elements, observations, verdicts, hop states and flags. Freshness is judged "
        "at each capture record's received_at.",
    )
    add_db_option(p)
    p.add_argument(
        "--trust",
        metavar="FILE",
        help="trust configuration (profile §4; default: HANDOFF_TRACE_TRUST_FILE)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the profile §11 verdicts as one JSON array"
    )
    p.add_argument("files", nargs="+", metavar="FILES", help="capture files, '-' for stdin")
    p.set_defaults(func=cmd_ingest)


def _add_hops(sub: Any) -> None:
    p = sub.add_parser("hops", help="list hops and their states (profile §8)")
    add_db_option(p)
    add_now_option(p)
    p.add_argument("--state", choices=[s.value for s in HopState], help="only hops in state S")
    p.add_argument(
        "--flag", choices=[k.value for k in FlagKind], help="only hops with a flag of KIND"
    )
    p.add_argument("--dialog", metavar="D", help="only hops of dialog D")
    p.add_argument("--json", action="store_true", help="print one JSON array")
    p.set_defaults(func=cmd_hops)


def _add_flags(sub: Any) -> None:
    p = sub.add_parser("flags", help="list flags: hops that need a person")
    add_db_option(p)
    add_now_option(p)
    p.add_argument("--kind", choices=[k.value for k in FlagKind], help="only flags of KIND")
    p.add_argument("--status", choices=[s.value for s in FlagStatus], help="only status S")
    p.add_argument("--case", metavar="CASE", help="only the flags of envelope case CASE")
    p.add_argument("--json", action="store_true", help="print one JSON array")
    p.set_defaults(func=cmd_flags)


def _add_db(sub: Any) -> None:
    p = sub.add_parser("db", help="database maintenance")
    db_sub = p.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    up = db_sub.add_parser("upgrade", help="run the migrations up to the latest schema")
    add_db_option(up)
    up.set_defaults(func=cmd_db_upgrade)


# --- configuration ----------------------------------------------------------------------


# --- commands ---------------------------------------------------------------------------


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    engine = open_engine(args, load_settings(), migrate=False)
    try:
        db.upgrade(engine)
        revision = db.current_revision(engine)
    except SQLAlchemyError as exc:
        raise UsageError(f"migration failed: {first_line(exc)}") from exc
    finally:
        engine.dispose()
    print(f"database schema at revision {revision}")
    return EXIT_OK


def cmd_ingest(args: argparse.Namespace) -> int:
    settings = load_settings()
    trust_file = args.trust or settings.trust_file
    if trust_file is None:
        raise UsageError("no trust file: pass --trust FILE or set HANDOFF_TRACE_TRUST_FILE")
    with contextlib.ExitStack() as files:
        # Each file is read as a stream: memory does not grow with the capture.
        inputs = _open_inputs(args.files, files)
        engine = open_engine(args, settings)
        files.callback(engine.dispose)
        trust = store_trust(str(trust_file), engine)
        now = int(time.time())
        options = verify_options(settings, at=now)
        pipeline = build_pipeline(
            settings, engine, trust, options=options, objects=_objects(settings)
        )
        large = {name for name, file in inputs if _size(file) > _LARGE_BYTES}
        freeze_start_up(None if "-" in args.files else sum(_size(f) for _, f in inputs))
        summary = _Summary(sys.stdout if args.json else None)
        progress = _Progress(sys.stderr, large)
        try:
            # A pipe may be a live feed: its batches are judged at the clock of each batch
            # (app.ingest.live), not of the command's start.
            clock = None if "-" in args.files else now
            # ``fork``: this command runs one thread, so a forked child may verify the files'
            # signatures ahead on the second core (app/ingest/second_core.py).
            with fewer_collections():  # as ``verify`` does
                report = ingest(
                    pipeline,
                    inputs,
                    now=clock,
                    progress=progress,
                    on_verdict=summary.add,
                    fork=True,
                )
        finally:
            engine.dispose()
            progress.finish()
    summary.close()
    for error in [*report.errors, *report.envelopes.errors]:
        print(f"handoff-trace: {visible(error.source, 80)}: {error.detail}", file=sys.stderr)
    if report.cut is not None:
        print(
            f"handoff-trace: the database could not be written: nothing from "
            f"{visible(report.cut, 80)} on was stored; run the command again",
            file=sys.stderr,
        )
    if not args.json:
        summary.print(report)
    failed = report.errors or report.envelopes.errors or summary.rejected or not report.complete
    return EXIT_REJECT if failed else EXIT_OK


def _open_inputs(names: Sequence[str], files: contextlib.ExitStack) -> list[tuple[str, BinaryIO]]:
    inputs: list[tuple[str, BinaryIO]] = []
    for name in names:
        if name == "-":
            inputs.append((name, sys.stdin.buffer))
            continue
        try:
            file = Path(name).open("rb")  # noqa: SIM115 - closed by ``files``
            inputs.append((name, files.enter_context(file)))
        except OSError as exc:
            raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from exc
    return inputs


def _size(file: BinaryIO) -> int:
    try:
        return os.fstat(file.fileno()).st_size
    except (OSError, ValueError, AttributeError):
        return 0


class _Progress:
    """A progress line on stderr for large inputs: redrawn on a terminal, a line per tenth
    of the file read otherwise (so logs stay readable)."""

    def __init__(self, out: TextIO, large: set[str]) -> None:
        self.out, self.large, self.tty = out, large, out.isatty()
        self.shown: dict[str, int] = {}  # the tenth last shown, per input
        self.drawing: str | None = None  # the input whose line a terminal shows

    def __call__(self, name: str, done: int, fraction: float | None) -> None:
        if name not in self.large or fraction is None:
            return
        tenth = min(10, int(fraction * 10))
        if self.tty:
            if self.drawing not in (None, name):
                self.out.write("\n")
            self.drawing = name
            bar = "#" * min(30, int(fraction * 30))
            self.out.write(f"\r{visible(name, 40)} [{bar:<30}] {done} items")
        elif tenth > self.shown.get(name, 0):
            self.shown[name] = tenth
            self.out.write(f"{visible(name, 40)}: {tenth * 10}% read, {done} items\n")
        self.out.flush()

    def finish(self) -> None:
        """End a terminal's progress line."""
        if self.drawing is not None:
            self.out.write("\n")
            self.out.flush()


class _Summary:
    """What the summary needs of every verdict, kept as counts (and the first rejections),
    not as the verdicts; with ``--json`` each verdict is written out as it comes."""

    SHOWN = 20

    def __init__(self, out: TextIO | None) -> None:
        self.out = out
        self.rows: Counter[tuple[str, str, str]] = Counter()
        self.first_rejected: list[Verdict] = []
        self.rejected = 0
        self.written = 0

    def add(self, v: Verdict) -> None:
        reason = v.reason.value if v.reason else "-"
        self.rows[(v.element or "-", v.outcome.value, reason)] += 1
        if v.outcome.value == "reject":
            self.rejected += 1
            if len(self.first_rejected) < self.SHOWN:
                self.first_rejected.append(v)
        if self.out is not None:
            # Byte for byte what json.dump(verdicts, indent=2) prints, one verdict at a time.
            text = json.dumps(v.to_json(), indent=2).replace("\n", "\n  ")
            self.out.write(("[\n  " if self.written == 0 else ",\n  ") + text)
            self.written += 1

    def close(self) -> None:
        if self.out is not None:
            self.out.write("\n]\n" if self.written else "[]\n")

    def print(self, report: IngestReport) -> None:
        if self.first_rejected:
            print("REJECTED")
            for v in self.first_rejected:
                reason = v.reason.value if v.reason else "-"
                print(f"  {visible(v.source, 40)}  {reason}  {visible(v.detail, 100)}")
            if self.rejected > self.SHOWN:
                print(f"  ... and {self.rejected - self.SHOWN} more (--json lists all)")
            print()
        table = [("ELEMENT", "OUTCOME", "REASON", "COUNT")]
        table += [(*key, str(n)) for key, n in sorted(self.rows.items())]
        print_table(table)
        c = report.counts
        print(
            f"\n{c['verdicts']} verdicts, {c['stored']} new elements stored, "
            f"{c['duplicate']} retransmissions, {c['pending']} pending, "
            f"{c['skipped']} items skipped (nothing to read), {c['errors']} item errors"
        )
        if c["envelopes"]:
            print(f"{c['envelopes']} envelope items, {c['envelope_errors']} with errors")


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
    settings = load_settings()
    engine = open_engine(args, settings)
    now = int(time.time()) if args.now is None else args.now
    try:
        rules = settings.envelope.rules
        db.run(engine, lambda session: sweep(session, now=now, timing=settings.timing, cases=rules))
    except SQLAlchemyError as exc:
        engine.dispose()
        raise UsageError(f"database error: {first_line(exc)}") from exc
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
    print_table(table)
    print(f"\n{len(hops)} hops")
    return EXIT_OK


def cmd_flags(args: argparse.Namespace) -> int:
    engine, now = _swept(args)
    try:
        with db.transaction(db.read_only(engine)) as session:
            flags = list_flags(
                session, now=now, kind=args.kind, status=args.status, case_id=args.case
            )
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
    print_table(table)
    print(f"\n{len(flags)} flags")
    return EXIT_OK
