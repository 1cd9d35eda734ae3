"""``handoff-trace verify``: judge capture files as a receiver would, store nothing."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from handoff_context import MAX_ELEMENT_OCTETS, RefPolicy

from app.cli.common import (
    EXIT_OK,
    EXIT_REJECT,
    UsageError,
    fewer_collections,
    load_trust,
    nonneg_int,
    positive_int,
    visible,
)
from app.ingest.json_text import array_chunks
from app.ingest.verdict_text import VerdictWriter
from app.ingest.verifying import DEFAULTS, VerifyOptions, load_objects, verify_inputs

VERIFY_EPILOG = """\
INPUT is a capture file (profile §10): JSON, JSON Lines (.jsonl/.ndjson), HAR 1.2 (.har) or CBOR
(.cbor, one object or a CBOR sequence); '-' reads standard input. A payload may be a handoff
or status object, an A2A (1.0 or 0.3) JSON-RPC request/response, a bare A2A Message or Task,
or an MCP tools/call request, CallToolResult or notifications/cancelled, optionally wrapped
in a capture record {"received_at", "received_by", "dialog", "payload"} whose fields
override --at, --receiver and --dialog for that item.

All inputs share one replay memory and one set of known offers, in the order given.
Exit status: 0 no rejection, 1 at least one rejection, 2 usage or configuration error.

example:
  handoff-trace verify --trust trust.json --receiver spiffe://b.example/agent/coder capture.jsonl
"""


def add_verify(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        help="verify captured offers, chains and statuses",
        description="Verify every handoff offer, chain and status found in the inputs exactly "
        "as a careful receiver would, and say why for each (profile §6, §7, §5, §11).",
        epilog=VERIFY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--trust",
        required=True,
        metavar="TRUST.json",
        help="trust configuration (profile §4): identifiers and their public JWKs",
    )
    p.add_argument(
        "--receiver",
        metavar="ID",
        help="the receiver's own identifier for the audience and cycle checks; "
        "without one the audience check is not-checked",
    )
    p.add_argument(
        "--at",
        type=nonneg_int,
        metavar="SECONDS",
        help="receive time as NumericDate seconds for the freshness check (default: now)",
    )
    p.add_argument(
        "--dialog",
        metavar="ID",
        help="host dialog identifier (A2A contextId) when the carrier shows none",
    )
    p.add_argument(
        "--skew",
        type=nonneg_int,
        default=DEFAULTS.skew,
        metavar="SECONDS",
        help=f"allowed clock skew (default: {DEFAULTS.skew})",
    )
    p.add_argument(
        "--max-lifetime",
        type=positive_int,
        default=DEFAULTS.max_lifetime,
        metavar="SECONDS",
        help=f"longest allowed exp - iat (default: {DEFAULTS.max_lifetime})",
    )
    p.add_argument(
        "--max-chain",
        type=positive_int,
        default=DEFAULTS.max_chain,
        metavar="N",
        help=f"most offers in a chain, current one included (default: {DEFAULTS.max_chain})",
    )
    p.add_argument(
        "--max-element-bytes",
        type=element_limit,
        metavar="N",
        help="largest signed element, 1024 to 65536 octets; a larger one is malformed "
        f"(default: {ELEMENT_LIMIT_VARIABLE}, else 65536)",
    )
    p.add_argument(
        "--ref-policy",
        choices=[p.value for p in RefPolicy],
        default="none",
        help="none: report refs not-checked; check-available: check refs whose "
        "objects are in --objects, a mismatch rejects; require: every ref "
        "must verify (default: none)",
    )
    p.add_argument(
        "--objects",
        metavar="DIR",
        help="directory of objects for ref checks, indexed by SHA-256 of content; "
        "NAME.salt beside NAME holds the salt of a salted digest",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the profile §11 verdicts as one JSON array instead of a table",
    )
    p.add_argument(
        "--jobs",
        type=jobs_count,
        default=None,
        metavar="N",
        help="processes that verify signatures: 1 this one alone, 2 or more a forked helper "
        "on a second core as well; auto decides by the input's size and the machine's idle "
        "cores (default: auto)",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="capture files, '-' for stdin")
    p.set_defaults(func=cmd_verify)


# The service's setting, honoured here too so that ``verify`` judges an element as
# ``ingest`` and the HTTP API do (profile §1.2). Only this one variable is read: ``verify``
# stores nothing and needs no other setting (nor the store's imports).
ELEMENT_LIMIT_VARIABLE = "HANDOFF_TRACE_MAX_ELEMENT_BYTES"


def element_limit(text: str) -> int:
    """An element size limit within what the profile allows (1024 to 65536 octets)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1024 <= value <= MAX_ELEMENT_OCTETS:
        raise argparse.ArgumentTypeError(f"must be 1024 to {MAX_ELEMENT_OCTETS}, not {value}")
    return value


def jobs_count(text: str) -> int | None:
    """``auto`` (None) or a positive whole number of processes."""
    if text == "auto":
        return None
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, or auto") from None


def _element_limit_of(args: argparse.Namespace) -> int:
    if args.max_element_bytes is not None:
        return int(args.max_element_bytes)
    text = os.environ.get(ELEMENT_LIMIT_VARIABLE, "").strip()
    if not text:
        return MAX_ELEMENT_OCTETS
    try:
        return element_limit(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{ELEMENT_LIMIT_VARIABLE} {exc}") from None


def cmd_verify(args: argparse.Namespace) -> int:
    trust = load_trust(args.trust)
    objects = None
    if args.objects:
        try:
            objects = load_objects(Path(args.objects))
        except OSError as exc:
            raise UsageError(f"cannot read objects directory {args.objects}: {exc}") from exc
    inputs = read_inputs(args.inputs)
    options = VerifyOptions(
        receiver=args.receiver,
        at=args.at if args.at is not None else int(time.time()),
        dialog=args.dialog,
        skew=args.skew,
        max_lifetime=args.max_lifetime,
        max_chain=args.max_chain,
        ref_policy=RefPolicy(args.ref_policy),
        max_element_bytes=_element_limit_of(args),
    )
    with fewer_collections():
        # ``fork``: this command runs one thread, so a forked child can verify signatures
        # on the second core (app/ingest/forked.py).
        report = verify_inputs(
            inputs, trust=trust, options=options, objects=objects, fork=True, jobs=args.jobs
        )
    if args.json:
        # The text of ``json.dump([v.to_json() ...], indent=2)``, written a few hundred
        # verdicts at a time: the standard library's indented encoder is pure Python and
        # writes each token on its own (a system call each when stdout is unbuffered).
        for chunk in array_chunks(report.verdicts, text_of=VerdictWriter().text):
            sys.stdout.write(chunk)
        sys.stdout.write("\n")
    else:
        _print_table(report.verdicts, report.skipped)
    return EXIT_REJECT if any(v.outcome.value == "reject" for v in report.verdicts) else EXIT_OK


def read_inputs(names: Sequence[str]) -> list[tuple[str, bytes]]:
    inputs = []
    for name in names:
        if name == "-":
            inputs.append(("-", sys.stdin.buffer.read()))
            continue
        try:
            inputs.append((name, Path(name).read_bytes()))
        except OSError as exc:
            raise UsageError(f"cannot read {name}: {exc.strerror or exc}") from exc
    return inputs


def _print_table(verdicts: Sequence[Any], skipped: int) -> None:
    rows = [("SOURCE", "ELEMENT", "OUTCOME", "REASON", "DETAIL")]
    for v in verdicts:
        element = v.element or "-"
        if v.digest is not None:
            element = f"{element} {v.to_json()['digest'][:10]}"
        rows.append(
            (
                visible(v.source, 40),
                element,
                v.outcome.value,
                v.reason.value if v.reason else "-",
                visible(v.detail, 100),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)), r[4])
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.outcome.value] = counts.get(v.outcome.value, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no elements"
    print(f"\n{len(verdicts)} verdicts: {summary}; {skipped} items carried no handoff")
