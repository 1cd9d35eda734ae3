"""API bearer tokens, stored hashed.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01

Written by hand to match ``TokenRow`` in app/store/models.py; tests/store/test_migrations.py
checks that the two agree on both SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIME = sa.BigInteger()  # NumericDate seconds
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # Only the SHA-256 of each token is stored; the token is shown once, when it is made.
    op.create_table(
        "api_token",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("revoked_at", TIME, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("api_token")
