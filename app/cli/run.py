"""``handoff-trace run-demo``: the dashboard on the embedded database, with demo data.

What ``make run`` calls. On the first start (a store without hops) it writes a demo run
under ``--dir`` (default ``var/demo``: capture, ref objects and its trust file) and ingests
it through the one pipeline; later starts keep what is stored. Every start first binds its
port (``--port``, else ``HANDOFF_TRACE_PORT``, else 8000; ``make run PORT=8123``), so a port
that is taken is said at once, before anything is loaded or any password printed; then it
gives the admin account ``demo`` a fresh password, prints the URL and that one-time login,
and serves the API and the dashboard like ``serve`` on the socket it bound, with the demo's
trust file.
"""

from __future__ import annotations

import argparse
import errno
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from app.cli.common import UsageError, add_db_option, first_line, load_settings, positive_int
from app.settings import Settings
from app.store import db
from app.store.queries import hop_count
from app.store.tokens import Role
from app.store.users import generate_password, set_password

if TYPE_CHECKING:
    from app.demo import DemoConfig

DEMO_USER = "demo"


def add_run_commands(sub: Any) -> None:
    p = sub.add_parser(
        "run-demo",
        help="serve the dashboard with demo data and print a one-time login",
        description="Serve the API and the dashboard on the embedded database (or --db). "
        "On first start the store is filled with a simulated run (every fault kind); every "
        "start prints the URL and a fresh password for the admin account 'demo'.",
    )
    p.add_argument("--host", help="address to bind (default: HANDOFF_TRACE_HOST, else 127.0.0.1)")
    p.add_argument("--port", type=_port, help="port (default: HANDOFF_TRACE_PORT, else 8000)")
    add_db_option(p)
    p.add_argument("--dir", default="var/demo", metavar="DIR", help="where the demo run is written")
    p.add_argument(
        "--dialogs", type=positive_int, default=40, metavar="N", help="dialogs (default: 40)"
    )
    p.add_argument("--seed", type=int, default=7, help="random seed (default: 7)")
    p.set_defaults(func=cmd_run_demo)


def _port(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number")
    return value


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port``, bound before anything is printed. Raises
    UsageError saying what to do when the port is taken or the address cannot be used."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {host} is taken (another program listens there): stop it, "
                f"or pick another port: `make run PORT=8123`, `run-demo --port 8123` or "
                f"HANDOFF_TRACE_PORT=8123"
            ) from exc
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


def demo_config(*, dialogs: int, seed: int, start: int) -> DemoConfig:
    """The run ``make run`` shows: one envelope case per dialog, so that at the default 40
    dialogs and seed every envelope fault kind is there too (a test holds it to that)."""
    from app.demo import DemoConfig

    return DemoConfig(seed=seed, dialogs=dialogs, fault_rate=0.1, start=start, cases=dialogs)


def _load(settings: Settings, url: str, directory: Path, dialogs: int, seed: int) -> Path:
    """Write and ingest a demo run unless the store holds hops already; the trust file."""
    from app.demo import DemoPaths, write_demo
    from app.demo.load import load_run

    paths = DemoPaths.beside(directory / "capture.jsonl", trust=None, answers=None)
    engine = db.make_engine(url)
    try:
        db.ensure_schema(engine)
        with db.transaction(db.read_only(engine)) as session:
            hops = hop_count(session)
    finally:
        engine.dispose()
    if hops and paths.trust.exists():
        print(f"run-demo: the store holds {hops} hops already; not loading again", file=sys.stderr)
        return paths.trust
    directory.mkdir(parents=True, exist_ok=True)
    # Started five hours ago, so the envelope cases (about two hours long) are over and the
    # lost-outcome and lost-acceptance flags (one hour) are already due.
    config = demo_config(dialogs=dialogs, seed=seed, start=int(time.time()) - 5 * 3600)
    print(f"run-demo: writing {dialogs} demo dialogs and cases to {directory}/", file=sys.stderr)
    write_demo(config, paths)
    if load_run(paths, now=None, settings=settings, url=url) != 0:
        raise UsageError("loading the demo failed (see above)")
    return paths.trust


def _demo_log_key(settings: Settings, directory: Path) -> None:
    """The evidence log's key for the demo (docs/evidence-log.md): the configured one, else
    ``DIR/log.key``, made on first start. Only its verifier key is printed."""
    import os

    from app.log.keys import demo_key

    if settings.log_key_file is not None:
        return
    path = directory / "log.key"
    signer = demo_key(path)
    os.environ["HANDOFF_TRACE_LOG_KEY_FILE"] = str(path)  # read again by `serve`
    print(f"run-demo: evidence log verifier key {signer.verifier.text()}", file=sys.stderr)


def cmd_run_demo(args: argparse.Namespace) -> int:
    settings = load_settings()
    url = settings.store_url(args.db)
    host, port = args.host or settings.host, args.port or settings.port
    sock = bind(host, port)
    try:
        return _run(args, settings, url, sock, host, port)
    finally:
        sock.close()


def _run(
    args: argparse.Namespace,
    settings: Settings,
    url: str,
    sock: socket.socket,
    host: str,
    port: int,
) -> int:
    from app.cli.serve import cmd_serve

    try:
        trust = _load(settings, url, Path(args.dir), args.dialogs, args.seed)
        password = generate_password()
        engine = db.make_engine(url)
        try:
            with db.transaction(engine) as session:
                set_password(
                    session,
                    username=DEMO_USER,
                    role=Role.ADMIN,
                    password=password,
                    now=int(time.time()),
                )
        finally:
            engine.dispose()
    except SQLAlchemyError as exc:
        raise UsageError(f"database error: {first_line(exc)}") from exc
    print(
        f"\n  handoff-trace dashboard: http://{host}:{port}/\n"
        f"  log in as {DEMO_USER!r} with the one-time password {password}\n"
        "  (a new one is printed at every start; make more accounts with "
        "`handoff-trace users create`)\n",
        flush=True,
    )
    _demo_log_key(settings, Path(args.dir))
    serve = argparse.Namespace(host=host, port=port, workers=1, db=url, trust=str(trust), sock=sock)
    return cmd_serve(serve)
