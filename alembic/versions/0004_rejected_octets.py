"""Octets refused before they could become an element, kept as evidence.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Written by hand to match ``RejectedOctetsRow`` and ``RejectedObservationRow`` in
app/store/models.py; tests/store/test_migrations.py checks that the two agree on both SQLite
and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DIGEST = sa.LargeBinary(32)  # SHA-256, raw octets
TIME = sa.BigInteger()  # NumericDate seconds
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # A malformed element, a key in a header, an object that is none: kept, never modified.
    op.create_table(
        "rejected_octets",
        sa.Column("digest", DIGEST, primary_key=True),
        sa.Column("form", sa.String(8), nullable=False),
        sa.Column("type", sa.String(8), nullable=True),
        sa.Column("octets", sa.LargeBinary(), nullable=False),
        sa.Column("iss", sa.Text(), nullable=True),
        sa.Column("aud", sa.Text(), nullable=True),
        sa.Column("hop", sa.String(64), nullable=True),
        sa.Column("hop_iss", sa.Text(), nullable=True),
        sa.Column("first_seen", TIME, nullable=False),
    )
    op.create_index("ix_rejected_octets_hop", "rejected_octets", ["hop_iss", "hop"])
    # Every receipt of them, with the verdict it got.
    op.create_table(
        "rejected_observation",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("digest", DIGEST, sa.ForeignKey("rejected_octets.digest"), nullable=False),
        sa.Column("received_at", TIME, nullable=False),
        sa.Column("received_by", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("carrier", sa.String(16), nullable=True),
        sa.Column("role", sa.String(32), nullable=True),
        sa.Column("dialog", sa.Text(), nullable=True),
        sa.Column("task_id", sa.Text(), nullable=True),
        sa.Column("task_state", sa.String(64), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("verdict", sa.JSON(), nullable=False),
        sa.Column("ingested_at", TIME, nullable=False),
    )
    op.create_index("ix_rejected_observation_digest", "rejected_observation", ["digest"])


def downgrade() -> None:
    op.drop_index("ix_rejected_observation_digest", table_name="rejected_observation")
    op.drop_table("rejected_observation")
    op.drop_index("ix_rejected_octets_hop", table_name="rejected_octets")
    op.drop_table("rejected_octets")
