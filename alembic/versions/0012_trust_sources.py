"""Trust sources (issue 21): the key history every instance judges with, operators'
revocations and the trust audit log.

Revision ID: 0012_trust21
Revises: 0011_task_index
Create Date: 2026-12-01

Written by hand to match ``TrustKeyWindowRow``, ``TrustRevocationRow`` and ``TrustEventRow``
in app/store/models.py; tests/store/test_migrations.py checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_trust21"
down_revision: str | None = "0011_task_index"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIME = sa.BigInteger()  # NumericDate seconds
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "trust_key_window",
        sa.Column("source", sa.String(200), primary_key=True),
        sa.Column("kid", sa.String(128), primary_key=True),
        sa.Column("thumbprint", sa.String(64), primary_key=True),
        sa.Column("generation", sa.Integer(), primary_key=True),
        sa.Column("jwk", sa.Text(), nullable=False),
        sa.Column("first_seen", TIME, nullable=False),
        sa.Column("stopped_at", TIME, nullable=True),
    )
    op.create_table(
        "trust_revocation",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("thumbprint", sa.String(64), nullable=False),
        sa.Column("kid", sa.String(128), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
    )
    op.create_index(
        "ux_trust_revocation", "trust_revocation", ["thumbprint", "kid", "at"], unique=True
    )
    op.create_table(
        "trust_event",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("at", TIME, nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("source", sa.String(200), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("keys", sa.JSON(), nullable=False),
    )
    op.create_index("ix_trust_event_at", "trust_event", ["at"])


def downgrade() -> None:
    op.drop_index("ix_trust_event_at", table_name="trust_event")
    op.drop_table("trust_event")
    op.drop_index("ux_trust_revocation", table_name="trust_revocation")
    op.drop_table("trust_revocation")
    op.drop_table("trust_key_window")
