"""The top-level parser: one sub-command group per module of this package."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from app import __version__
from app.cli.common import EXIT_OK, EXIT_USAGE, Parser
from app.errors import HandoffTraceError


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="handoff-trace",
        description="Verify and inspect signed handoffs between AI agents "
        "(draft-srivastava-agentproto-handoff-context-01).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Parser
    )
    from app.cli.verify import add_verify

    add_verify(sub)
    from app.cli.keys import add_keys, add_sign

    add_keys(sub)
    add_sign(sub)
    from app.cli.demo import add_demo

    add_demo(sub)
    from app.cli.store import add_store_commands

    add_store_commands(sub)
    from app.cli.serve import add_serve_commands

    add_serve_commands(sub)
    from app.cli.users import add_users_commands

    add_users_commands(sub)
    from app.cli.run import add_run_commands

    add_run_commands(sub)
    from app.cli.transfer import add_transfer_commands

    add_transfer_commands(sub)
    from app.cli.tap import add_tap_command

    add_tap_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except HandoffTraceError as exc:
        # Every error the service raises on purpose (a usage error, a setting, a store
        # refusal) is one line and exit 2, never a traceback.
        print(f"handoff-trace: error: {exc.detail}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (e.g. `| head`); stop quietly like other Unix tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
