"""``handoff-trace rederive``, ``export`` and ``import``: re-derive a store from its signed
octets and receipts, and move a store between databases (SQLite <-> PostgreSQL)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from app.cli.common import (
    EXIT_OK,
    EXIT_REJECT,
    UsageError,
    add_db_option,
    add_now_option,
    first_line,
    load_settings,
    open_engine,
    print_table,
    store_trust,
)
from app.ingest.pipeline import Pipeline
from app.ingest.rederive import Rederived, Replayed, rederive, replay
from app.ingest.verifying import load_objects
from app.settings import Settings
from app.store import db
from app.store.derive import sweep
from app.store.transfer import (
    TransferError,
    export_records,
    header,
    holds_elements,
    read_jsonl,
    write_jsonl,
)

_TRUST_HELP = "trust configuration to judge the receipts under (default: HANDOFF_TRACE_TRUST_FILE)"
_OBJECTS_HELP = "objects for ref checks, as `verify --objects` (default: none available)"


def add_transfer_commands(sub: Any) -> None:
    p = sub.add_parser(
        "rederive",
        help="rebuild hops, links, verdicts and flags from the stored octets",
        description="Replay every stored receipt, in ingest order, through the ingest "
        "pipeline into a scratch store that holds only the signed octets, compare what that "
        "derives (chain receipts, links, verdicts and ref outcomes, replay memory, hops, "
        "flags) with what is stored, and replace the stored derived state with it. Flags "
        "keep their workflow (status, assignee, note, snooze) and audit log. Exit 0: "
        "nothing differed; 1: differences were found (and replaced, unless --dry-run).",
    )
    add_db_option(p)
    add_now_option(p)
    _add_judging(p)
    p.add_argument("--dry-run", action="store_true", help="only report the differences")
    p.set_defaults(func=cmd_rederive)

    p = sub.add_parser(
        "export",
        help="write the element store to a file (JSON Lines)",
        description="Stream the element store to JSON Lines: a header line naming the "
        "format and its version, then the signed octets (elements and refused octets), the "
        "receipts as ingested, and operators' state (flag workflow and audit log). Derived "
        "tables are left out: `import` re-derives them. API tokens and dashboard users "
        "(their hashes are credentials) only with --include-secrets.",
    )
    add_db_option(p)
    p.add_argument("--out", metavar="FILE", default="-", help="output file ('-': stdout)")
    p.add_argument(
        "--include-secrets",
        action="store_true",
        help="also export API token hashes and dashboard users' password hashes",
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "import",
        help="load an export into an empty database and re-derive it",
        description="Load a file written by `export` into an empty database (any "
        "supported one: SQLite or PostgreSQL): the octets as they are, every receipt "
        "through the ingest pipeline in its original order and at its original ingest "
        "clock, then operators' state onto the flags by condition.",
    )
    add_db_option(p)
    add_now_option(p)
    _add_judging(p)
    p.add_argument("file", metavar="FILE", help="the export ('-': stdin)")
    p.set_defaults(func=cmd_import)


def _add_judging(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trust", metavar="FILE", help=_TRUST_HELP)
    p.add_argument("--objects", metavar="DIR", help=_OBJECTS_HELP)


def _pipeline_for(args: argparse.Namespace, settings: Settings, store: Engine) -> Any:
    trust_file = args.trust or settings.trust_file
    if trust_file is None:
        raise UsageError("no trust file: pass --trust FILE or set HANDOFF_TRACE_TRUST_FILE")
    # The key history is the store's (``store``), whatever engine the pipeline writes to
    # (rederive replays into a scratch store).
    trust = store_trust(str(trust_file), store)
    objects = load_objects(Path(args.objects)) if args.objects else None
    options = settings.verify_options(at=int(time.time()))

    def make(engine: Engine) -> Pipeline:
        extra = {} if objects is None else {"objects": objects}
        return Pipeline(engine, trust, options, timing=settings.timing, **extra)

    return make


def _now(args: argparse.Namespace) -> int:
    return int(time.time()) if args.now is None else int(args.now)


def cmd_rederive(args: argparse.Namespace) -> int:
    settings = load_settings()
    engine = open_engine(args, settings)
    try:
        pipeline_for = _pipeline_for(args, settings, engine)
        done = rederive(engine, pipeline_for, now=_now(args), dry_run=args.dry_run)
    except SQLAlchemyError as exc:
        raise UsageError(f"database error: {first_line(exc)}") from exc
    finally:
        engine.dispose()
    _print_rederived(done)
    return EXIT_REJECT if done.differs else EXIT_OK


def _print_rederived(done: Rederived) -> None:
    table = [("TABLE", "STORED", "REDERIVED", "MISSING", "EXTRA", "CHANGED")]
    for d in done.diffs:
        counts = (d.stored, d.rederived, len(d.missing), len(d.extra), len(d.changed))
        table.append((d.table, *map(str, counts)))
    print_table(table)
    _print_replayed(done.replayed)
    for d in done.diffs:
        for what, keys in (("missing", d.missing), ("extra", d.extra), ("changed", d.changed)):
            for key in keys[:5]:
                print(f"  {d.table} {what}: {_key(key)}")
    if not done.differs:
        print("\nthe stored derived state is what the octets give")
    elif done.applied:
        print("\ndifferences found; the stored derived state was replaced")
    elif done.replayed.incomplete_chains:
        print("\ndifferences found; nothing changed: some carried chains are not fully stored")
    else:
        print("\ndifferences found; nothing changed (--dry-run)")


def _key(key: Any) -> str:
    parts = key if isinstance(key, tuple) else (key,)
    return " ".join(p.hex()[:16] if isinstance(p, bytes) else str(p)[:60] for p in parts)


def _print_replayed(r: Replayed) -> None:
    print(
        f"\nreplayed {r.receipts} receipts and {r.refused} receipts of refused octets; "
        f"{r.incomplete_chains} carried a chain the store holds only in part (chain "
        f"elements that failed verification are not kept); {len(r.errors)} item errors"
    )
    for error in r.errors[:10]:
        print(f"  {error}", file=sys.stderr)


@contextmanager
def _output(name: str) -> Iterator[IO[str]]:
    if name == "-":
        yield sys.stdout
        return
    with open(name, "w", encoding="utf-8") as out:
        yield out


def cmd_export(args: argparse.Namespace) -> int:
    engine = open_engine(args, load_settings())
    try:
        first = header(
            schema=db.current_revision(engine), now=int(time.time()), secrets=args.include_secrets
        )
        with db.transaction(db.read_only(engine)) as session, _output(args.out) as out:
            n = write_jsonl(first, export_records(session, secrets=args.include_secrets), out)
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc.strerror}") from exc
    except SQLAlchemyError as exc:
        raise UsageError(f"database error: {first_line(exc)}") from exc
    finally:
        engine.dispose()
    print(f"exported {n} records", file=sys.stderr)
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    settings = load_settings()
    engine = open_engine(args, settings)
    try:
        pipeline_for = _pipeline_for(args, settings, engine)
        with db.transaction(engine) as session:
            if holds_elements(session):
                raise UsageError("the database already holds elements: import into an empty one")
        with _input(args.file) as lines:
            _first, records = read_jsonl(lines)
            done = replay(pipeline_for(engine), records)
        now = _now(args)
        db.run(engine, lambda session: sweep(session, now=now, timing=settings.timing))
    except TransferError as exc:
        raise UsageError(f"{args.file}: {exc}") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from exc
    except SQLAlchemyError as exc:
        raise UsageError(f"database error: {first_line(exc)}") from exc
    finally:
        engine.dispose()
    rows = ", ".join(f"{n} {kind}" for kind, n in sorted(done.rows.items())) or "no rows"
    print(f"imported {rows}; {done.flags_restored} flags with operators' state")
    _print_replayed(done)
    return EXIT_REJECT if done.errors else EXIT_OK


@contextmanager
def _input(name: str) -> Iterator[IO[str]]:
    if name == "-":
        yield sys.stdin
        return
    with open(name, encoding="utf-8") as lines:
        yield lines
