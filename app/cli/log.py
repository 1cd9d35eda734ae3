"""``handoff-trace log``: the evidence log (docs/evidence-log.md).

- ``log key``: print the log's verifier key (``--generate NAME --out FILE`` makes a key
  first); the private key is never printed.
- ``log verify SOURCE --key VKEY``: an auditor's check of a deployment (its ``/api/v1/log`` URL,
  with a read token in ``HANDOFF_TRACE_LOG_TOKEN``), of a mirror directory, or of an
  export file (docs/export.md).
- ``log check``: the store checks itself against its log (exit 1 on any finding).
- ``log sequence``: append what is not yet logged now, rather than wait for the service.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from app.cli.common import (
    EXIT_OK,
    EXIT_REJECT,
    UsageError,
    add_db_option,
    load_settings,
    open_engine,
)

TOKEN_ENV = "HANDOFF_TRACE_LOG_TOKEN"


def add_log_commands(sub: Any) -> None:
    p = sub.add_parser("log", help="the evidence log: its key, an auditor's check, a self-check")
    l_sub = p.add_subparsers(dest="log_command", required=True, metavar="COMMAND")
    key = l_sub.add_parser(
        "key",
        help="print the log's verifier key (HANDOFF_TRACE_LOG_KEY_FILE)",
        description="Print the note verifier key of the log key (NAME+HASH+KEY), what an "
        "auditor checks checkpoints with. With --generate, first write a new key to --out "
        "(mode 600, never overwritten). The private key is never printed.",
    )
    key.add_argument("--generate", metavar="NAME", help="make a new key with this name (origin)")
    key.add_argument("--out", metavar="FILE", help="where --generate writes the key")
    key.set_defaults(func=cmd_log_key)

    verify = l_sub.add_parser(
        "verify",
        help="check a deployment's log: checkpoint, tiles, consistency, inclusion",
        description="Fetch the checkpoint and every tile from SOURCE (the log's URL, e.g. "
        "https://trace.example/api/v1/log, with a read token in HANDOFF_TRACE_LOG_TOKEN; or a "
        "mirror directory; or an `export` file, whose elements and refused octets must "
        "rebuild the tree of the checkpoint it carries, every one of them), check the "
        "checkpoint's signature, rebuild the tree from the "
        "entries and compare it with the root and the tiles, check that the log only grew "
        "since the checkpoint saved in --state (then save the new one there), and find each "
        "--element. Exit 0: everything held; 1: something did not.",
    )
    verify.add_argument("source", metavar="SOURCE")
    verify.add_argument("--key", required=True, metavar="VKEY", help="the log's verifier key")
    verify.add_argument("--state", metavar="FILE", help="checkpoint saved by the last run")
    verify.add_argument(
        "--element", action="append", default=[], metavar="DIGEST", help="a handoff digest"
    )
    verify.set_defaults(func=cmd_log_verify)

    check = l_sub.add_parser(
        "check",
        help="check the store against its log (edited or deleted rows)",
        description="Rebuild every leaf from the octets stored now and the tree from the "
        "leaves, and compare them with the log and its signed checkpoint. Each finding "
        "opens a critical log-mismatch flag. Exit 0: none; 1: findings.",
    )
    add_db_option(check)
    check.set_defaults(func=cmd_log_check)

    sequence = l_sub.add_parser("sequence", help="append what is not yet in the log, now")
    add_db_option(sequence)
    sequence.set_defaults(func=cmd_log_sequence)


def _signer(settings: Any) -> Any:
    from app.log.keys import load_signer

    if settings.log_key_file is None:
        raise UsageError("no log key: set HANDOFF_TRACE_LOG_KEY_FILE")
    return load_signer(settings.log_key_file)


def cmd_log_key(args: argparse.Namespace) -> int:
    from app.log.keys import write_key

    if args.generate is not None:
        if not args.out:
            raise UsageError("--generate needs --out FILE")
        signer = write_key(Path(args.out), args.generate)
    elif args.out:
        raise UsageError("--out goes with --generate")
    else:
        signer = _signer(load_settings())
    print(signer.verifier.text())
    return EXIT_OK


def cmd_log_verify(args: argparse.Namespace) -> int:
    import httpx
    from handoff_context import parse_digest_text
    from handoff_context.errors import MalformedError

    from app.log.audit import DirectoryFetcher, HttpFetcher, audit
    from app.log.note import Verifier

    verifier = Verifier.parse(args.key)
    try:
        elements = [parse_digest_text(e, what="--element") for e in args.element]
    except MalformedError as exc:
        raise UsageError(str(exc)) from exc
    state = Path(args.state) if args.state else None
    saved = state.read_text(encoding="utf-8") if state is not None and state.exists() else None
    if args.source.startswith(("http://", "https://")):
        token = os.environ.get(TOKEN_ENV, "").strip()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with httpx.Client(headers=headers, timeout=30, follow_redirects=False) as client:
            report = audit(
                HttpFetcher(args.source, client), verifier, saved=saved, elements=elements
            )
    elif Path(args.source).is_file():
        report = _verify_export(Path(args.source), verifier, saved=saved, elements=elements)
    else:
        root = Path(args.source)
        if not root.is_dir():
            raise UsageError(
                f"{args.source} is neither an http(s) URL, a directory nor an export file"
            )
        report = audit(DirectoryFetcher(root), verifier, saved=saved, elements=elements)
    for line in report.checked:
        print(f"ok    {line}")
    for line in report.failures:
        print(f"FAIL  {line}")
    if report.ok and state is not None and report.checkpoint is not None:
        state.write_text(report.checkpoint, encoding="utf-8")
        print(f"saved the checkpoint to {state} for the next run")
    return EXIT_OK if report.ok else EXIT_REJECT


def _verify_export(path: Path, verifier: Any, *, saved: str | None, elements: list[bytes]) -> Any:
    """``log verify`` of an export file (docs/export.md): its records, as read, rebuild the
    tree of the checkpoint its header carries; and they are the records its header
    counts and digests."""
    from app.log.audit import AuditReport
    from app.log.exported import verify_export
    from app.store.transfer import (
        RecordsDigest,
        TransferError,
        check_records,
        read_header,
        read_records,
    )

    digest = RecordsDigest()
    try:
        with path.open("rb") as source:
            first = read_header(source.readline())
            records = ((str(r["t"]), r, n) for n, r in enumerate(read_records(source, digest), 2))
            report = verify_export(first, records, verifier, saved=saved, elements=elements)
        if report.ok:
            check_records(first, digest)
            report.checked.append(
                f"records: {sum(digest.counts.values())}, as many and as digested as the "
                "header says"
            )
    except TransferError as exc:
        report = AuditReport(failures=[f"{path}: {exc}"])
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
    return report


def cmd_log_check(args: argparse.Namespace) -> int:
    from app.log.selfcheck import self_check

    settings = load_settings()
    signer = _signer(settings)
    engine = open_engine(args, settings)
    try:
        report = self_check(engine, signer.verifier, now=int(time.time()))
    finally:
        engine.dispose()
    print(
        f"checked {report.checked} of {report.size} leaves; {report.unlogged} rows not yet logged"
    )
    for finding in report.findings:
        print(f"CRITICAL  {finding.line()}")
    if not report.ok:
        print(f"{len(report.findings)} findings, flagged (log-mismatch)", file=sys.stderr)
    return EXIT_OK if report.ok else EXIT_REJECT


def cmd_log_sequence(args: argparse.Namespace) -> int:
    from app.log.sequencer import sequence_all

    settings = load_settings()
    signer = _signer(settings)
    engine = open_engine(args, settings)
    try:
        count = sequence_all(engine, signer, now=int(time.time()))
    finally:
        engine.dispose()
    print(f"appended {count} leaves")
    return EXIT_OK
