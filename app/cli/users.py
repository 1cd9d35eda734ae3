"""``handoff-trace users``: the dashboard's operator accounts.

``users create`` without ``--password-stdin`` generates a password and prints it once,
alone on the last line (like ``tokens create``), so a script can take it with ``tail -n 1``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from app.cli.common import (
    EXIT_OK,
    UsageError,
    add_db_option,
    first_line,
    load_settings,
    open_engine,
)
from app.store import db
from app.store.tokens import Role
from app.store.users import (
    USER_ROLES,
    create_user,
    disable_user,
    generate_password,
    list_users,
)


def add_users_commands(sub: Any) -> None:
    p = sub.add_parser("users", help="dashboard operator accounts (argon2-hashed passwords)")
    u_sub = p.add_subparsers(dest="users_command", required=True, metavar="COMMAND")
    create = u_sub.add_parser(
        "create",
        help="make an account; a generated password is printed once, on the last line",
        description="Make a dashboard account. Roles: read (look), operator (look, verify "
        "uploads, acknowledge/assign/resolve flags), admin (everything, including storing "
        "uploads). Without --password-stdin a password is generated and printed once.",
    )
    create.add_argument("--username", required=True, metavar="NAME")
    create.add_argument("--role", required=True, choices=[r.value for r in USER_ROLES])
    create.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of standard input",
    )
    add_db_option(create)
    create.set_defaults(func=cmd_users_create)

    disable = u_sub.add_parser(
        "disable",
        help="disable an account: it cannot log in and its open sessions end at once",
    )
    disable.add_argument("--username", required=True, metavar="NAME")
    add_db_option(disable)
    disable.set_defaults(func=cmd_users_disable)

    listing = u_sub.add_parser("list", help="list accounts (names and roles)")
    listing.add_argument("--json", action="store_true", help="print one JSON array")
    add_db_option(listing)
    listing.set_defaults(func=cmd_users_list)


def cmd_users_create(args: argparse.Namespace) -> int:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        generated = False
    else:
        password, generated = generate_password(), True
    engine = open_engine(args, load_settings())
    try:
        with db.transaction(engine) as session:
            create_user(
                session,
                username=args.username,
                role=Role(args.role),
                password=password,
                now=int(time.time()),
            )
    except SQLAlchemyError as exc:
        raise UsageError(f"database error: {first_line(exc)}") from exc
    finally:
        engine.dispose()
    if generated:
        print(f"user {args.username!r} with role {args.role} created; its password, shown once:")
        print(password)
    else:
        print(f"user {args.username!r} with role {args.role} created")
    return EXIT_OK


def cmd_users_disable(args: argparse.Namespace) -> int:
    engine = open_engine(args, load_settings())
    try:
        with db.transaction(engine) as session:
            ended = disable_user(session, username=args.username, now=int(time.time()))
    except SQLAlchemyError as exc:
        raise UsageError(f"database error: {first_line(exc)}") from exc
    finally:
        engine.dispose()
    print(f"user {args.username!r} disabled; {ended} open session(s) ended")
    return EXIT_OK


def cmd_users_list(args: argparse.Namespace) -> int:
    engine = open_engine(args, load_settings())
    try:
        with db.transaction(db.read_only(engine)) as session:
            rows = list_users(session)
    finally:
        engine.dispose()
    items = [
        {
            "username": r.username,
            "role": r.role,
            "created_at": r.created_at,
            "disabled": r.disabled_at is not None,
        }
        for r in rows
    ]
    if args.json:
        json.dump(items, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for item in items:
            state = " (disabled)" if item["disabled"] else ""
            print(f"{item['username']}  {item['role']}{state}")
        print(f"\n{len(items)} users")
    return EXIT_OK
