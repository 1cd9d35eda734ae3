"""Time as observed, observation ids, host task states without an element.

Revision ID: 0009_live
Revises: 0008_instances
Create Date: 2026-12-01

Written by hand to match app/store/models.py (``ObservationRow.received_exact`` and
``observation_key``, ``HostStateRow``); tests/store/test_migrations.py checks that the two
agree on both SQLite and PostgreSQL. Existing observations keep ``received_exact`` NULL (their
fraction was never kept) and have no observation id. Host task states already stored on
observations are copied into ``host_state``, so hops keep what they showed.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_live"
down_revision: str | None = "0008_instances"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIME = sa.BigInteger()  # NumericDate seconds
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # batch_alter_table: SQLite cannot drop a column in place, so the downgrade needs it;
    # the upgrade uses it too so both directions take the same path.
    with op.batch_alter_table("observation") as batch:
        batch.add_column(sa.Column("received_exact", sa.Double(), nullable=True))
        batch.add_column(sa.Column("observation_key", sa.String(160), nullable=True))
        batch.create_unique_constraint(
            "uq_observation_observation_key", ["observation_key"]
        )
    op.create_table(
        "host_state",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.Text(), nullable=False),
        sa.Column("task_state", sa.String(64), nullable=False),
        sa.Column("dialog", sa.Text(), nullable=True),
        sa.Column("received_at", TIME, nullable=False),
        sa.Column("received_exact", sa.Double(), nullable=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("received_by", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("carrier", sa.String(16), nullable=True),
        sa.Column("element", sa.Boolean(), nullable=False),
        sa.Column("ingested_at", TIME, nullable=False),
        sa.Column("observation_key", sa.String(160), nullable=True),
        sa.UniqueConstraint("observation_key"),
    )
    op.create_index("ix_host_state_task_id", "host_state", ["task_id"])
    op.execute(
        "INSERT INTO host_state (task_id, task_state, dialog, received_at, seq, received_by,"
        " source, carrier, element, ingested_at)"
        " SELECT task_id, task_state, dialog, received_at, 0, received_by, source, carrier,"
        " TRUE, ingested_at FROM observation"
        " WHERE task_id IS NOT NULL AND task_state IS NOT NULL ORDER BY id"
    )


def downgrade() -> None:
    op.drop_index("ix_host_state_task_id", table_name="host_state")
    op.drop_table("host_state")
    with op.batch_alter_table("observation") as batch:
        batch.drop_constraint("uq_observation_observation_key", type_="unique")
        batch.drop_column("observation_key")
        batch.drop_column("received_exact")
