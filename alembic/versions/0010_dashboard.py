"""The dashboard's workflow and notifications: a snooze's until time in the audit log,
comments on flags, the notifier's cursor and its webhook delivery log.

Revision ID: 0010_dashboard
Revises: 0007
Create Date: 2026-12-01

Written by hand to match ``ActionRow.until``, ``CommentRow``, ``NotifyCursorRow`` and
``DeliveryRow`` in app/store/models.py;
tests/store/test_migrations.py checks that the two agree on both SQLite and PostgreSQL.
Existing audit entries keep ``until`` NULL: the time of an old snooze was not recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_dashboard"
down_revision: str | None = "0009_live"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIME = sa.BigInteger()  # NumericDate seconds
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # batch_alter_table: SQLite cannot drop a column in place, so the downgrade needs it;
    # the upgrade uses it too so both directions take the same path.
    with op.batch_alter_table("action") as batch:
        batch.add_column(sa.Column("until", TIME, nullable=True))
    op.create_table(
        "flag_comment",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("flag_id", ROW_ID, sa.ForeignKey("flag.id"), nullable=False),
        sa.Column("author", sa.Text(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
    )
    op.create_index("ix_flag_comment_flag_id", "flag_comment", ["flag_id"])
    op.create_table(
        "notify_cursor",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("value", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "webhook_delivery",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("target", sa.String(200), nullable=False),
        sa.Column("flag_id", sa.BigInteger(), nullable=False),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("next_at", TIME, nullable=False),
        sa.Column("delivered_at", TIME, nullable=True),
        sa.Column("response", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )
    op.create_index("ix_webhook_delivery_due", "webhook_delivery", ["status", "next_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_delivery_due", table_name="webhook_delivery")
    op.drop_table("webhook_delivery")
    op.drop_table("notify_cursor")
    op.drop_index("ix_flag_comment_flag_id", table_name="flag_comment")
    op.drop_table("flag_comment")
    with op.batch_alter_table("action") as batch:
        batch.drop_column("until")
