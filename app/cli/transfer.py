"""``handoff-trace rederive``, ``export`` and ``import``: re-derive a store from its signed
octets and receipts, and move a store between databases (SQLite <-> PostgreSQL)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import IO, Any

from handoff_context import import_private_key
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, OKPKey
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
from app.ingest.build import build_pipeline, verify_options
from app.ingest.pipeline import Pipeline
from app.ingest.rederive import Rederived, Replayed, rederive, replay, replay_trust
from app.ingest.sweep import sweep
from app.ingest.verifying import load_objects
from app.log.checkpoint import open_checkpoint
from app.log.errors import LogError
from app.log.exported import MEMBER, Anchor, Rebuild, check
from app.log.note import Verifier
from app.settings import Settings
from app.store import db
from app.store.transfer import (
    RecordsDigest,
    TransferError,
    check_records,
    copy_store,
    export_records,
    header,
    header_line,
    log_anchor,
    read_header,
    read_records,
    sign_header,
    verify_header,
    write_records,
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
        description="Write the element store as JSON Lines: a signed header line (format, "
        "version, record counts and the digest of the records), then the signed octets "
        "(elements, refused octets, envelope items), the receipts as ingested, and "
        "operators' state (flag workflow, audit log, comments, webhook log). Derived "
        "tables are left out: `import` re-derives them. When the store keeps an evidence "
        "log, the header carries its latest checkpoint (appended to first when "
        "HANDOFF_TRACE_LOG_KEY_FILE is set) and the records rebuild its tree. API tokens "
        "and dashboard users (their hashes are credentials) only with --include-secrets.",
    )
    add_db_option(p)
    p.add_argument("--out", metavar="FILE", default="-", help="output file ('-': stdout)")
    p.add_argument(
        "--include-secrets",
        action="store_true",
        help="also export API token hashes and dashboard users' password hashes",
    )
    p.add_argument(
        "--sign-key",
        required=True,
        metavar="KEY.jwk",
        help="private JWK (`keys new`) that signs the export's header; `import` is given "
        "its public half with --trust-key",
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "import",
        help="load an export into an empty database and re-derive it",
        description="Load a file written by `export` into an empty database (any "
        "supported one: SQLite or PostgreSQL), once its signature, record counts and "
        "digest check out, and, when it carries an evidence-log checkpoint, its elements "
        "and refused octets rebuild that checkpoint's tree: the octets as they are, every "
        "receipt through the ingest pipeline in its original order and at its original "
        "ingest clock, then operators' state onto the flags by condition; all in one "
        "transaction, so a failed import leaves the database as it was.",
    )
    add_db_option(p)
    add_now_option(p)
    _add_judging(p)
    p.add_argument(
        "--trust-key",
        required=True,
        metavar="KEY.jwk",
        help="public JWK of the key the export must be signed with (an unsigned, "
        "truncated, reordered or edited export is refused, and nothing is imported)",
    )
    p.add_argument(
        "--log-key",
        metavar="VKEY",
        help="the exporting deployment's evidence-log verifier key (`log key`): the "
        "checkpoint in the export must be signed by it (without it, the checkpoint is "
        "trusted as part of the signed header); the records must rebuild its tree either way",
    )
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
    options = verify_options(settings, at=int(time.time()))

    def make(engine: Engine) -> Pipeline:
        return build_pipeline(settings, engine, trust, options=options, objects=objects)

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


def _load_key(path: str, *, private: bool) -> Any:
    """A JWK file: the private key ``keys new`` wrote (to sign), or its public half (to
    trust). Raises UsageError."""
    try:
        jwk = json.loads(Path(path).read_bytes())
        if private:
            return import_private_key(jwk)
        if not isinstance(jwk, dict):
            raise ValueError("not a JWK object")
        public = {k: v for k, v in jwk.items() if k != "d"}  # a private JWK's public half
        if public.get("kty") == "EC" and public.get("crv") == "P-256":
            return ECKey.import_key(public)
        if public.get("kty") == "OKP" and public.get("crv") == "Ed25519":
            return OKPKey.import_key(public)
        raise ValueError("unsupported key: EC P-256 or OKP Ed25519 only")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
    except (ValueError, JoseError) as exc:
        # Not chained, and the JOSE library's message left out: a traceback or a message
        # never carries key material.
        why = type(exc).__name__ if isinstance(exc, JoseError) else str(exc)
        raise UsageError(f"{path} is not a usable JWK: {why}") from None


@contextmanager
def _output(name: str) -> Iterator[IO[bytes]]:
    if name == "-":
        yield sys.stdout.buffer
        return
    with open(name, "wb") as out:
        yield out


def cmd_export(args: argparse.Namespace) -> int:
    key = _load_key(args.sign_key, private=True)
    settings = load_settings()
    engine = open_engine(args, settings)
    try:
        schema = db.current_revision(engine)
        if settings.log_key_file is not None:
            # The checkpoint the export is anchored to covers every row, where this
            # process can sign one.
            from app.log.keys import load_signer
            from app.log.sequencer import sequence_all

            sequence_all(engine, load_signer(settings.log_key_file), now=int(time.time()))
        # The records first, to a temporary file: the header, which goes first, holds
        # their counts and digest.
        with tempfile.TemporaryFile() as spool:
            with db.transaction(db.read_only(engine)) as session:
                anchor = log_anchor(session)
                digest = write_records(export_records(session, secrets=args.include_secrets), spool)
            first = header(
                schema=schema, now=int(time.time()), secrets=args.include_secrets,
                counts=digest.counts, records=digest.value, log=anchor,
            )  # fmt: skip
            spool.seek(0)
            with _output(args.out) as out:
                out.write(header_line(sign_header(first, key)))
                shutil.copyfileobj(spool, out)
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc.strerror}") from exc
    except SQLAlchemyError as exc:
        raise UsageError(f"database error: {first_line(exc)}") from exc
    finally:
        engine.dispose()
    print(f"exported {sum(digest.counts.values())} records, signed", file=sys.stderr)
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    settings = load_settings()
    key = _load_key(args.trust_key, private=False)
    log_key = _log_verifier(args.log_key)
    engine = open_engine(args, settings)
    now = _now(args)
    try:
        with _input(args.file) as source, tempfile.TemporaryDirectory(prefix="import-") as tmp:
            # 1. The whole file checked before anything is written: signature, counts,
            # digest, record kinds and their order.
            first = read_header(source.readline())
            verify_header(first, key)
            rebuild = Rebuild() if MEMBER in first else None
            check_records(first, _drain(source, rebuild))
            unanchored = _check_anchor(first, rebuild, log_key)
            # 2. Replayed into a scratch store, the digest checked again as it is read.
            source.seek(0)
            source.readline()
            scratch = db.make_engine(f"sqlite:///{Path(tmp) / 'scratch.db'}")
            try:
                db.ensure_schema(scratch)
                digest = RecordsDigest()
                records = read_records(source, digest)
                # The key history and revocations first: the receipts are judged with them.
                history = replay_trust(scratch, records)
                pipeline_for = _pipeline_for(args, settings, scratch)
                done = replay(
                    pipeline_for(scratch),
                    chain([history.next_record], records)
                    if history.next_record is not None
                    else records,
                )
                done.rows.update(history.rows)
                check_records(first, digest)
                db.run(
                    scratch,
                    lambda session: sweep(
                        session, now=now, timing=settings.timing, cases=settings.envelope.rules
                    ),
                )
                # 3. Into the database in one transaction: all of it or nothing.
                db.run(engine, lambda session: copy_store(scratch, session), attempts=1)
            finally:
                scratch.dispose()
    except (TransferError, LogError) as exc:
        raise UsageError(f"{args.file}: {exc}; nothing was imported") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from exc
    except SQLAlchemyError as exc:
        raise UsageError(f"database error: {first_line(exc)}; nothing was imported") from exc
    finally:
        engine.dispose()
    rows = ", ".join(f"{n} {kind}" for kind, n in sorted(done.rows.items())) or "no rows"
    print(f"imported {rows}; {done.flags_restored} flags with operators' state")
    if unanchored is not None:
        print(
            f"the evidence log: the records rebuild the export's checkpoint"
            f"{' (its signature verified)' if log_key is not None else ''}; "
            f"{unanchored} records were stored after it"
        )
    _print_replayed(done)
    return EXIT_REJECT if done.errors else EXIT_OK


def _drain(source: IO[bytes], rebuild: Rebuild | None) -> RecordsDigest:
    """Read every record (checking each), for their digest and counts, and the leaves of
    the evidence log they make (when the export carries a checkpoint)."""
    digest = RecordsDigest()
    for number, record in enumerate(read_records(source, digest), 2):
        if rebuild is not None:
            rebuild.add(str(record["t"]), record, number)
    return digest


def _log_verifier(text: str | None) -> Verifier | None:
    if text is None:
        return None
    try:
        return Verifier.parse(text)
    except LogError as exc:
        raise UsageError(f"--log-key: {exc}") from exc


def _check_anchor(
    first: dict[str, Any], rebuild: Rebuild | None, log_key: Verifier | None
) -> int | None:
    """The export's records rebuild the tree of the checkpoint in its header (its signature
    checked with ``log_key`` when given): returns how many records came after the
    checkpoint; None when the export carries none (then ``--log-key`` refuses it). Raises
    LogError or TransferError."""
    if rebuild is None:
        if log_key is not None:
            raise TransferError("the export carries no evidence-log checkpoint (--log-key)")
        return None
    anchor = Anchor.from_json(first[MEMBER])
    checkpoint = (
        anchor.unverified() if log_key is None else open_checkpoint(anchor.checkpoint, log_key)
    )
    _, rest = check(anchor, rebuild, checkpoint)
    return rest


@contextmanager
def _input(name: str) -> Iterator[IO[bytes]]:
    """The export as a seekable binary file (standard input spooled to a temporary one:
    it is read twice)."""
    if name == "-":
        with tempfile.TemporaryFile() as spool:
            shutil.copyfileobj(sys.stdin.buffer, spool)
            spool.seek(0)
            yield spool
        return
    with open(name, "rb") as source:
        yield source
