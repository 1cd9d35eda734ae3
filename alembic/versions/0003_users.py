"""Dashboard operator accounts and their browser sessions.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

Written by hand to match ``UserRow`` and ``WebSessionRow`` in app/store/models.py;
tests/store/test_migrations.py checks that the two agree on both SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIME = sa.BigInteger()  # NumericDate seconds
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # Passwords are stored only as argon2id hashes; session cookies only as SHA-256.
    op.create_table(
        "operator_user",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("username", sa.String(64), nullable=False, unique=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("disabled_at", TIME, nullable=True),
    )
    op.create_table(
        "web_session",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("user_id", ROW_ID, sa.ForeignKey("operator_user.id"), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
    )
    op.create_index("ix_web_session_user_id", "web_session", ["user_id"])
    op.create_index("ix_web_session_expires_at", "web_session", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_web_session_expires_at", table_name="web_session")
    op.drop_index("ix_web_session_user_id", table_name="web_session")
    op.drop_table("web_session")
    op.drop_table("operator_user")
