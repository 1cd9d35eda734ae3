"""Alembic environment: runs the migrations on the connection handed over by
``app.store.db.upgrade``, or, from the ``alembic`` command line, on the database named by
``-x db=URL``, else ``DATABASE_URL``, else the embedded SQLite file."""

from __future__ import annotations

import os
from logging.config import fileConfig

from sqlmodel import SQLModel

from alembic import context
from app.store import models  # noqa: F401  (registers the tables on the metadata)
from app.settings import default_store_url
from app.store.db import make_engine

config = context.config
if config.config_file_name is not None:  # the alembic command line: log as alembic.ini says
    fileConfig(config.config_file_name, disable_existing_loggers=False)
target_metadata = SQLModel.metadata


def run_migrations(connection: object) -> None:
    # SQLite cannot ALTER most things in place; batch mode rebuilds the table instead.
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    if context.is_offline_mode():
        raise SystemExit("offline (--sql) migrations are not supported; run them online")
    url = context.get_x_argument(as_dictionary=True).get("db") or os.environ.get("DATABASE_URL")
    engine = make_engine(url or default_store_url())
    with engine.begin() as conn:
        run_migrations(conn)
    engine.dispose()


main()
