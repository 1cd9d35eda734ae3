"""API tokens may expire.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30

Written by hand to match ``TokenRow.expires_at`` in app/store/models.py;
tests/store/test_migrations.py checks that the two agree on both SQLite and PostgreSQL.
Existing tokens keep ``expires_at`` NULL: they never expire, as when they were made.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIME = sa.BigInteger()  # NumericDate seconds


def upgrade() -> None:
    # batch_alter_table: SQLite cannot drop a column in place, so the downgrade needs it;
    # the upgrade uses it too so both directions take the same path.
    with op.batch_alter_table("api_token") as batch:
        batch.add_column(sa.Column("expires_at", TIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_token") as batch:
        batch.drop_column("expires_at")
