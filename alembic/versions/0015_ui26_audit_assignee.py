"""The audit log records whom a flag was assigned to: ``action.assignee``.

Revision ID: 0015_ui26
Revises: 0014_sec25
Create Date: 2026-12-01

An ``assign`` entry used to say only that someone assigned the flag, not to whom; the
dashboard's assignee picker writes the name here (NULL on an unassign and on every other
action). Written by hand to match ``ActionRow.assignee`` in app/store/models.py;
tests/store/test_migrations.py checks that the two agree. Existing entries keep NULL: the
name of an old assignment was not recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_ui26"
down_revision: str | None = "0014_sec25"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # batch_alter_table: SQLite cannot drop a column in place, so the downgrade needs it;
    # the upgrade uses it too so both directions take the same path.
    with op.batch_alter_table("action") as batch:
        batch.add_column(sa.Column("assignee", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("action") as batch:
        batch.drop_column("assignee")
