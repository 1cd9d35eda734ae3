"""The ``handoff-trace`` command line: verify captures, make keys, sign bundles.

Exit status: 0 when no verdict is ``reject``, 1 when any is, 2 for a usage or configuration
error (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from . import __version__
from .protocol.errors import TrustConfigError
from .protocol.refs import RefPolicy
from .protocol.trust import TrustStore
from .verifying import VerifyOptions, load_objects, verify_inputs

EXIT_OK, EXIT_REJECT, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A usage or configuration problem: exit 2 with one clear line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def nonneg_int(text: str) -> int:
    """argparse type: a whole number >= 0, with a message that names the bad value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def positive_int(text: str) -> int:
    value = nonneg_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


VERIFY_EPILOG = """\
INPUT is a capture file (SPEC 10): JSON, JSON Lines (.jsonl/.ndjson), HAR 1.2 (.har) or CBOR
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


def _add_verify(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        help="verify captured offers, chains and statuses",
        description="Verify every handoff offer, chain and status found in the inputs exactly "
        "as a careful receiver would, and say why for each (SPEC 6, 7, 5, 11).",
        epilog=VERIFY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--trust",
        required=True,
        metavar="TRUST.json",
        help="trust configuration (SPEC 4): identifiers and their public JWKs",
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
        default=60,
        metavar="SECONDS",
        help="allowed clock skew (default: 60)",
    )
    p.add_argument(
        "--max-lifetime",
        type=positive_int,
        default=300,
        metavar="SECONDS",
        help="longest allowed exp - iat (default: 300)",
    )
    p.add_argument(
        "--max-chain",
        type=positive_int,
        default=16,
        metavar="N",
        help="most offers in a chain, current one included (default: 16)",
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
        help="print the SPEC 11 verdicts as one JSON array instead of a table",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="capture files, '-' for stdin")
    p.set_defaults(func=cmd_verify)


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
    )
    report = verify_inputs(inputs, trust=trust, options=options, objects=objects)
    if args.json:
        json.dump([v.to_json() for v in report.verdicts], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_table(report.verdicts, report.skipped)
    return EXIT_REJECT if any(v.outcome.value == "reject" for v in report.verdicts) else EXIT_OK


def load_trust(path: str) -> TrustStore:
    try:
        return TrustStore.load(path)
    except TrustConfigError as exc:
        raise UsageError(str(exc)) from exc


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


# Bidirectional formatting characters (Unicode UAX #9): they reorder the text after them.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def visible(text: str | None, width: int) -> str:
    """Escape control and bidi characters so a hostile detail cannot reshape the table."""
    if not text:
        return ""
    out = "".join(
        ch if ch.isprintable() and ch not in _BIDI else f"\\u{ord(ch):04x}" for ch in text
    )
    return out if len(out) <= width else out[: width - 1] + "…"


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="handoff-trace",
        description="Verify and inspect signed handoffs between AI agents "
        "(draft-srivastava-agentproto-handoff-context-01).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    _add_verify(sub)
    from .keys_cli import add_keys, add_sign

    add_keys(sub)
    add_sign(sub)
    from .demo_cli import add_demo

    add_demo(sub)
    from .store_cli import add_store_commands

    add_store_commands(sub)
    from .serve_cli import add_serve_commands

    add_serve_commands(sub)
    from .users_cli import add_users_commands

    add_users_commands(sub)
    from .run_cli import add_run_commands

    add_run_commands(sub)
    from .transfer_cli import add_transfer_commands

    add_transfer_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"handoff-trace: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (e.g. `| head`); stop quietly like other Unix tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
