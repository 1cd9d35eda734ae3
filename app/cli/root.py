"""The top-level parser: one sub-command group per module of this package.

A command's module is imported only when that command runs (or when the whole parser is
built, ``build_parser()``, for the docs tests): the modules import the store, the web stack
or the signing code, and a script that runs ``handoff-trace --version`` or ``verify`` once
per message must not pay for all of them (issue 15, item 7). So the top level lists every
command from ``COMMANDS`` alone; ``tests/cli/test_start.py`` checks that this table says
what the modules' own parsers say, and what each start imports.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from app import __version__
from app.cli.common import EXIT_OK, EXIT_USAGE, Parser, UsageError

# Every command, in the order ``--help`` lists them: the module and function that add it
# (a function may add a group of commands), and its one-line help.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "verify": ("verify", "add_verify", "verify captured offers, chains and statuses"),
    "keys": ("keys", "add_keys", "make signing keys and trust files"),
    "sign": ("keys", "add_sign", "build signed offers and statuses"),
    "demo": ("demo", "add_demo", "generate simulated multi-agent traffic with known faults"),
    "ingest": ("store", "add_store_commands", "verify capture files and store them"),
    "hops": ("store", "add_store_commands", "list hops and their states (SPEC 8)"),
    "flags": ("store", "add_store_commands", "list flags: hops that need a person"),
    "db": ("store", "add_store_commands", "database maintenance"),
    "serve": (
        "serve",
        "add_serve_commands",
        "run the service: the JSON API and the dashboard (uvicorn)",
    ),
    "tokens": ("serve", "add_serve_commands", "API bearer tokens (stored hashed)"),
    "users": (
        "users",
        "add_users_commands",
        "dashboard operator accounts (argon2-hashed passwords)",
    ),
    "run-demo": (
        "run",
        "add_run_commands",
        "serve the dashboard with demo data and print a one-time login",
    ),
    "rederive": (
        "transfer",
        "add_transfer_commands",
        "rebuild hops, links, verdicts and flags from the stored octets",
    ),
    "export": (
        "transfer",
        "add_transfer_commands",
        "write the element store to a file (JSON Lines)",
    ),
    "import": (
        "transfer",
        "add_transfer_commands",
        "load an export into an empty database and re-derive it",
    ),
}
Adder = Callable[["argparse._SubParsersAction[Parser]"], None]


def _adder(name: str) -> Adder:
    module, function, _ = COMMANDS[name]
    adder: Adder = getattr(importlib.import_module(f"app.cli.{module}"), function)
    return adder


def build_parser(command: str | None = None, *, everything: bool = True) -> Parser:
    """The parser. With ``everything`` every command's module is imported and adds its
    parser; without, only ``command``'s does, and the others are listed by name and help
    (enough for ``--help`` and for argparse to name the choices)."""
    parser = Parser(
        prog="handoff-trace",
        description="Verify and inspect signed handoffs between AI agents "
        "(draft-srivastava-agentproto-handoff-context-01).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Parser
    )
    group = COMMANDS[command][:2] if command in COMMANDS else None
    wanted = [c for c in COMMANDS if everything or COMMANDS[c][:2] == group]
    added: set[tuple[str, str]] = set()
    for name in COMMANDS:
        if name in sub.choices:
            continue  # added by the group function of an earlier command
        module, function, help_text = COMMANDS[name]
        if name in wanted and (module, function) not in added:
            added.add((module, function))
            _adder(name)(sub)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is no option (the top level takes
    only ``-h`` and ``--version``, neither with a value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command(words), everything=False)
    args = parser.parse_args(words)
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
