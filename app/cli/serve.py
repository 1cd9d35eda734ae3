"""``handoff-trace serve`` and ``handoff-trace tokens``: the service from the command line.

``serve`` checks everything the service needs before uvicorn starts (trust file, database,
migrations), so a bad configuration is one line on stderr and exit 2, not a traceback from
each worker. ``tokens create`` prints the new token alone on the last line (profile §12), so a
script can take it with ``tail -n 1``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.cli.common import (
    EXIT_OK,
    UsageError,
    add_db_option,
    first_line,
    load_settings,
    open_engine,
    positive_int,
)
from app.settings import Settings
from app.store import db
from app.store.tokens import Role, create_token, list_tokens, revoke_token


def add_serve_commands(sub: Any) -> None:
    _add_serve(sub)
    _add_tokens(sub)


def _add_serve(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run the service: the JSON API and the dashboard (uvicorn)",
        description="Run the JSON API under /api/v1 and the dashboard with uvicorn. "
        "Migrations run first. "
        "Configuration comes from the environment (DATABASE_URL, HANDOFF_TRACE_*); "
        "--db and --trust override DATABASE_URL and HANDOFF_TRACE_TRUST_FILE.",
    )
    p.add_argument("--host", help="address to bind (default: HANDOFF_TRACE_HOST, else 127.0.0.1)")
    p.add_argument(
        "--port",
        type=_port,
        metavar="PORT",
        help="port (default: HANDOFF_TRACE_PORT, else 8000)",
    )
    p.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="worker processes (default: HANDOFF_TRACE_WORKERS, else 1); several workers "
        "share the database safely",
    )
    add_db_option(p)
    p.add_argument(
        "--trust",
        metavar="FILE",
        help="trust configuration (profile §4; default: HANDOFF_TRACE_TRUST_FILE)",
    )
    p.set_defaults(func=cmd_serve)


_DURATION = re.compile(r"([0-9]{1,9})([smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> int:
    """``3600``, ``90s``, ``45m``, ``12h`` or ``30d`` as seconds (at least 1)."""
    found = _DURATION.fullmatch(text.strip())
    if found is None or int(found.group(1)) == 0:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a duration (seconds, or a number with s, m, h or d: 90d)"
        )
    return int(found.group(1)) * _UNIT_SECONDS[found.group(2)]


def _port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number")
    return value


def _add_tokens(sub: Any) -> None:
    p = sub.add_parser("tokens", help="API bearer tokens (stored hashed)")
    t_sub = p.add_subparsers(dest="tokens_command", required=True, metavar="COMMAND")
    create = t_sub.add_parser(
        "create",
        help="make a token; it is printed once, alone on the last line",
        description="Make an API token. Roles: ingest (POST /ingest, /verify), read (GET), "
        "operator (GET, POST /verify, PATCH /flags), admin (everything). Only its SHA-256 is "
        "stored: copy it now, it cannot be shown again.",
    )
    create.add_argument("--role", required=True, choices=[r.value for r in Role])
    create.add_argument("--name", required=True, metavar="NAME", help="who or what uses it")
    create.add_argument(
        "--expires-in",
        type=duration,
        metavar="DURATION",
        help="stop working after this long: seconds, or a number with s, m, h or d "
        "(90d, 12h); default: never",
    )
    add_db_option(create)
    create.set_defaults(func=cmd_tokens_create)

    listing = t_sub.add_parser("list", help="list tokens (names and roles, never the tokens)")
    add_db_option(listing)
    listing.add_argument("--json", action="store_true", help="print one JSON array")
    listing.set_defaults(func=cmd_tokens_list)

    revoke = t_sub.add_parser("revoke", help="revoke a token; requests with it get 401")
    revoke.add_argument("--name", required=True, metavar="NAME")
    add_db_option(revoke)
    revoke.set_defaults(func=cmd_tokens_revoke)


# --- serve ------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.notify.targets import TargetError, load_targets
    from app.web.logs import log_config
    from app.web.service import load_trust

    settings = load_settings()
    url = settings.store_url(args.db)
    trust_file = Path(args.trust) if args.trust else settings.trust_file
    # Fail closed here, once, with one line (ServiceConfigError, which ``main`` prints): the
    # workers would each fail less clearly.
    load_trust(Settings(trust_file=trust_file))
    try:
        load_targets(settings.webhooks_file, allow_private=settings.webhook_allow_private)
    except TargetError as exc:
        raise UsageError(str(exc)) from exc
    engine = open_engine(args, settings, migrate=False)
    try:
        db.upgrade(engine)
    except SQLAlchemyError as exc:
        raise UsageError(f"migration failed: {first_line(exc)}") from exc
    finally:
        engine.dispose()
    # The workers read their configuration from the environment, like any deployment.
    os.environ["DATABASE_URL"] = url
    os.environ["HANDOFF_TRACE_TRUST_FILE"] = os.path.abspath(str(trust_file))
    os.environ[HEADER_ENV] = str(settings.header_seconds)
    workers = args.workers or settings.workers
    if workers > 1:
        _multiprocess_metrics()
    options: dict[str, Any] = {
        "factory": True,
        "host": args.host or settings.host,
        "port": args.port or settings.port,
        "workers": workers,
        "log_config": log_config(settings.log_level, settings.log_format),
        "access_log": False,  # one line per request comes from app.web.observe
        # The app believes X-Forwarded-* only from HANDOFF_TRACE_FORWARDED_ALLOW_IPS
        # (app.web.app); uvicorn's own handling would trust 127.0.0.1 whatever it says.
        "proxy_headers": False,
        "server_header": False,
        # h11 with a header-read timeout (HANDOFF_TRACE_HEADER_SECONDS, below).
        "http": HeaderTimeoutProtocol,
    }
    sock = getattr(args, "sock", None)
    if sock is not None:
        # run-demo bound its socket before printing the login: serve on that very socket.
        server = uvicorn.Server(uvicorn.Config("app.web.app:create_app_from_env", **options))
        server.run(sockets=[sock])
        return EXIT_OK
    uvicorn.run("app.web.app:create_app_from_env", **options)
    return EXIT_OK


# prometheus_client's multiprocess directory (named here: importing the client in this
# process before the variable is set is what must not happen in a worker).
_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _multiprocess_metrics() -> None:
    """Several workers write their counters to one directory (prometheus_client's
    multiprocess mode), set before any worker imports the client. An operator's
    PROMETHEUS_MULTIPROC_DIR is used, emptied of a previous run's files; else a new
    temporary directory."""
    chosen = os.environ.get(_MULTIPROC_ENV)
    if chosen:
        directory = Path(chosen)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.db"):
            stale.unlink()
    else:
        directory = Path(tempfile.mkdtemp(prefix="handoff-trace-metrics-"))
    os.environ[_MULTIPROC_ENV] = str(directory)


# --- tokens -----------------------------------------------------------------------------


def cmd_tokens_create(args: argparse.Namespace) -> int:
    engine = open_engine(args, load_settings())
    try:
        with db.transaction(engine) as session:
            token = create_token(
                session,
                name=args.name,
                role=Role(args.role),
                now=int(time.time()),
                expires_in=args.expires_in,
            )
    except SQLAlchemyError as exc:
        raise UsageError(f"database error: {first_line(exc)}") from exc
    finally:
        engine.dispose()
    until = f", expires {_when(int(time.time()) + args.expires_in)}" if args.expires_in else ""
    print(f"token {args.name!r} with role {args.role} created{until}; it is shown only once:")
    print(token)
    return EXIT_OK


def cmd_tokens_list(args: argparse.Namespace) -> int:
    engine = open_engine(args, load_settings())
    try:
        with db.transaction(db.read_only(engine)) as session:
            rows = list_tokens(session)
    finally:
        engine.dispose()
    items = [
        {
            "name": r.name,
            "role": r.role,
            "created_at": r.created_at,
            "revoked_at": r.revoked_at,
            "expires_at": r.expires_at,
        }
        for r in rows
    ]
    if args.json:
        json.dump(items, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    table = [("NAME", "ROLE", "CREATED", "EXPIRES", "REVOKED")]
    for item in items:
        table.append(
            (
                item["name"],
                item["role"],
                _when(item["created_at"]),
                _when(item["expires_at"]) if item["expires_at"] else "never",
                _when(item["revoked_at"]) if item["revoked_at"] else "-",
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(f"\n{len(items)} tokens")
    return EXIT_OK


def _when(seconds: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(seconds))


def cmd_tokens_revoke(args: argparse.Namespace) -> int:
    engine = open_engine(args, load_settings())
    try:
        with db.transaction(engine) as session:
            revoke_token(session, name=args.name, now=int(time.time()))
    finally:
        engine.dispose()
    print(f"token {args.name!r} revoked")
    return EXIT_OK


# --- the HTTP protocol ------------------------------------------------------------------
#
# uvicorn's HTTP protocol with a header-read timeout, for ``handoff-trace serve``.
#
# uvicorn closes a connection that stays idle between requests (``timeout_keep_alive``), but
# not one that sends a request's line and headers slowly: a client trickling one octet a
# second holds its connection, and a worker's file descriptors, for ever (slowloris). Here a
# timer starts with the connection, and again with the first octet of each following request;
# when the headers are not all in after ``HANDOFF_TRACE_HEADER_SECONDS``, the connection is
# closed. The body has no such limit here: the guard middleware counts it against the size
# limit as it arrives (``app.web.guard``).

HEADER_ENV = "HANDOFF_TRACE_HEADER_SECONDS"
DEFAULT_SECONDS = 10.0


class HeaderTimeoutProtocol(H11Protocol):
    """h11 with a header-read deadline (uvicorn's ``http`` option takes the class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_seconds = float(os.environ.get(HEADER_ENV) or DEFAULT_SECONDS)
        self.header_timer: asyncio.TimerHandle | None = None

    def _waiting_for_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _start(self) -> None:
        if self.header_timer is None:
            self.header_timer = self.loop.call_later(self.header_seconds, self._expired)

    def _stop(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _expired(self) -> None:
        self.header_timer = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start()

    def data_received(self, data: bytes) -> None:
        if self._waiting_for_headers():
            self._start()  # a new request begins (a no-op while its timer runs)
        super().data_received(data)
        if not self._waiting_for_headers():
            self._stop()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        super().connection_lost(exc)
