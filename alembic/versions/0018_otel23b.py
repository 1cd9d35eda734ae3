"""The hop change sequence the background OTLP exporter walks (``hop.change``, indexed).

Revision ID: 0018_otel23b
Revises: 0017_element_dialog
Create Date: 2026-12-02

Each derivation of a hop writes, in its own transaction, a mark that only grows: on
PostgreSQL the writing transaction's id (``pg_current_xact_id()``), on SQLite one more than
the largest mark (under SQLite's one write lock). The exporter reads the hops whose mark lies
between its last horizon and the current one, every change exactly once, instead of
re-reading a time overlap (app/store/otlp.py, docs/otlp.md "Export"). Existing hops keep no
mark: they were derived before the exporter could have started. Written by hand to match
app/store/models.py; tests/store/test_migrations.py checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_otel23b"
down_revision: str | None = "0017_element_dialog"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("hop", sa.Column("change", sa.BigInteger(), nullable=True))
    op.create_index("ix_hop_change", "hop", ["change"])


def downgrade() -> None:
    op.drop_index("ix_hop_change", table_name="hop")
    # batch_alter_table: SQLite before 3.35 cannot drop a column in place.
    with op.batch_alter_table("hop") as batch:
        batch.drop_column("change")
