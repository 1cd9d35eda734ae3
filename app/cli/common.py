"""What every command group shares: exit codes, the usage error, argument types, the
terminal-safe text filter, and opening the settings, the trust file and the store."""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from app.errors import HandoffTraceError

# Only for annotations: every command imports this module, so what it imports at run time
# is paid by ``--version`` too (app.cli.root). The functions below import what they use.
if TYPE_CHECKING:
    from handoff_context import TrustStore
    from sqlalchemy import Engine
    from sqlalchemy.exc import SQLAlchemyError

    from app.settings import Settings

EXIT_OK, EXIT_REJECT, EXIT_USAGE = 0, 1, 2


class UsageError(HandoffTraceError):
    """A usage or configuration problem of the command line: exit 2 with one clear line
    (``main`` prints every ``HandoffTraceError`` that way)."""

    reason = "usage"


class Parser(argparse.ArgumentParser):
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


def load_trust(path: str) -> TrustStore:
    from handoff_context import TrustStore
    from handoff_context.errors import TrustConfigError

    try:
        return TrustStore.load(path)
    except TrustConfigError as exc:
        raise UsageError(str(exc)) from exc


def store_trust(path: str, engine: Any) -> TrustStore:
    """The trust store for a command that works on a store: the trust file's keys and
    sources over the store's key history (``app.trust``), each source fetched once, so the
    command judges as the service does. Raises UsageError for an unusable file."""
    import time

    from app.trust import TrustFileError, load_config, open_trust

    try:
        config = load_config(path)
    except TrustFileError as exc:
        raise UsageError(str(exc)) from exc
    return open_trust(config, engine=engine, clock=lambda: int(time.time()))


def add_db_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        metavar="URL",
        help="database URL (default: DATABASE_URL, else sqlite:///var/handoff-trace.db)",
    )


def load_settings() -> Settings:
    """The settings from the environment, read once per command. Raises SettingsError,
    which ``main`` prints like a usage error."""
    from app.settings import Settings

    return Settings.from_env()


def open_engine(args: argparse.Namespace, settings: Settings, *, migrate: bool = True) -> Engine:
    from sqlalchemy.exc import SQLAlchemyError

    from app.store import db

    url = settings.store_url(args.db)
    try:
        engine = db.make_engine(url)
        if migrate:
            db.ensure_schema(engine)
    except SQLAlchemyError as exc:
        shown = db.shown_url(url)
        raise UsageError(f"cannot use the database {shown}: {first_line(exc)}") from exc
    return engine


def first_line(exc: SQLAlchemyError) -> str:
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]


def add_now_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--now",
        type=nonneg_int,
        metavar="SECONDS",
        help="evaluate time-based states and flags at this NumericDate (default: wall clock)",
    )


def print_table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """The cyclic garbage collector runs its middle and full collections less often while
    the verdicts are made, then as before.

    Every verdict a run makes is kept until it is printed, so with the default thresholds
    each collection of the older generations walks all the verdicts made so far, again and
    again: about a tenth of ``verify``'s time for 8,000 offers (BENCHMARKS.md, issue 13).
    ``ingest`` keeps the rows of a batch and the report's recent verdicts the same way.
    Young objects are still collected as usual, so cyclic garbage (an exception and its
    traceback) is freed within a few tens of thousands of allocations, not kept."""
    before = gc.get_threshold()
    gc.set_threshold(before[0], max(before[1], _OLDER_EVERY), *before[2:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


# Young collections between two collections of the middle generation (Python's default: 10).
_OLDER_EVERY = 100
