"""The evidence log (issue 24, app/log): leaves, tree nodes, the sequencer's state row and
the published checkpoints.

Revision ID: 0013_tlog24
Revises: 0012_trust21
Create Date: 2026-12-01

Written by hand to match app/store/models.py; tests/store/test_migrations.py checks that the
two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_tlog24"
down_revision: str | None = "0012_trust21"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tlog_leaf",
        sa.Column("idx", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("source", sa.SmallInteger(), nullable=False),
        sa.Column("digest", sa.LargeBinary(32), nullable=False),
        sa.Column("leaf", sa.LargeBinary(), nullable=False),
        sa.Column("sequenced_at", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_tlog_leaf_source_digest", "tlog_leaf", ["source", "digest"], unique=True)
    op.create_table(
        "tlog_node",
        sa.Column("level", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("idx", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("hash", sa.LargeBinary(32), nullable=False),
    )
    op.create_table(
        "tlog_state",
        sa.Column("name", sa.String(16), primary_key=True),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("root", sa.LargeBinary(32), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "tlog_checkpoint",
        sa.Column("size", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("root", sa.LargeBinary(32), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("published_at", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tlog_checkpoint")
    op.drop_table("tlog_state")
    op.drop_table("tlog_node")
    op.drop_index("ix_tlog_leaf_source_digest", table_name="tlog_leaf")
    op.drop_table("tlog_leaf")
