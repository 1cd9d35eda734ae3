"""The top-level parser: one sub-command group per module of this package.

A command's module is imported only when that command runs (or when the whole parser is
built, ``build_parser()``, for the docs tests): the modules import the store, the web stack
or the signing code, and a script that runs ``handoff-trace --version`` or ``verify`` once
per message must not pay for all of them (issue 15, item 7). So the top level lists every
command from ``COMMANDS`` alone; ``tests/cli/test_start.py`` checks that this table says
what the modules' own parsers say, and what each start imports.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from app import __version__
from app.cli.common import EXIT_OK, EXIT_USAGE, Parser
from app.errors import HandoffTraceError

# Every command, in the order ``--help`` lists them: the function that adds it (a function
# may add a group of commands), and its one-line help.
COMMANDS: dict[str, tuple[str, str]] = {
    "verify": ("verify", "verify captured offers, chains and statuses"),
    "keys": ("keys", "make signing keys and trust files"),
    "sign": ("sign", "build signed offers and statuses"),
    "demo": ("demo", "generate simulated multi-agent traffic with known faults"),
    "ingest": ("store", "verify capture files and store them"),
    "hops": ("store", "list hops and their states (profile §8)"),
    "flags": ("store", "list flags: hops that need a person"),
    "db": ("store", "database maintenance"),
    "serve": ("serve", "run the service: the JSON API and the dashboard (uvicorn)"),
    "tokens": ("serve", "API bearer tokens (stored hashed)"),
    "users": ("users", "dashboard operator accounts (argon2-hashed passwords)"),
    "run-demo": ("run", "serve the dashboard with demo data and print a one-time login"),
    "rederive": ("transfer", "rebuild hops, links, verdicts and flags from the stored octets"),
    "export": ("transfer", "write the element store to a file (JSON Lines)"),
    "import": ("transfer", "load an export into an empty database and re-derive it"),
    "export-otlp": ("otlp", "export hops as OTLP spans to an OpenTelemetry receiver"),
    "tap": ("tap", "a reverse proxy that reports the handoffs passing to and from an agent"),
    "log": ("log", "the evidence log: its key, an auditor's check, a self-check"),
}
Adder = Callable[[Any], None]


# One function per group, each importing its module only when called: plain imports (not
# importlib), so the import graph stays visible to tests/test_layout.py.
def _verify() -> Adder:
    from app.cli.verify import add_verify

    return add_verify


def _keys() -> Adder:
    from app.cli.keys import add_keys

    return add_keys


def _sign() -> Adder:
    from app.cli.keys import add_sign

    return add_sign


def _demo() -> Adder:
    from app.cli.demo import add_demo

    return add_demo


def _store() -> Adder:
    from app.cli.store import add_store_commands

    return add_store_commands


def _serve() -> Adder:
    from app.cli.serve import add_serve_commands

    return add_serve_commands


def _users() -> Adder:
    from app.cli.users import add_users_commands

    return add_users_commands


def _run() -> Adder:
    from app.cli.run import add_run_commands

    return add_run_commands


def _transfer() -> Adder:
    from app.cli.transfer import add_transfer_commands

    return add_transfer_commands


def _otlp() -> Adder:
    from app.cli.otlp import add_otlp_commands

    return add_otlp_commands


def _tap() -> Adder:
    from app.cli.tap import add_tap_command

    return add_tap_command


def _log() -> Adder:
    from app.cli.log import add_log_commands

    return add_log_commands


_GROUPS: dict[str, Callable[[], Adder]] = {
    "verify": _verify,
    "keys": _keys,
    "sign": _sign,
    "demo": _demo,
    "store": _store,
    "serve": _serve,
    "users": _users,
    "run": _run,
    "transfer": _transfer,
    "otlp": _otlp,
    "tap": _tap,
    "log": _log,
}


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
    group = COMMANDS[command][0] if command in COMMANDS else None
    wanted = [c for c in COMMANDS if everything or COMMANDS[c][0] == group]
    added: set[str] = set()
    for name in COMMANDS:
        if name in sub.choices:
            continue  # added by the group function of an earlier command
        adder, help_text = COMMANDS[name]
        if name in wanted and adder not in added:
            added.add(adder)
            _GROUPS[adder]()(sub)
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
