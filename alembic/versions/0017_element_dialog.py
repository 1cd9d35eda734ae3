"""An index on the dialog an element names (``element.dialog``).

Revision ID: 0017_element_dialog
Revises: 0016_ingest20
Create Date: 2026-12-02

The dialog page lists the elements refused in that dialog (``refused_in_dialog`` in
app/store/dashboard.py): a refused offer makes no hop, so only the element row knows its
dialog. Dialog ids are identifiers of at most 2,048 printable ASCII characters (profile
§1.2), within a B-tree entry on PostgreSQL. Written by hand to match app/store/models.py;
tests/store/test_migrations.py checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017_element_dialog"
down_revision: str | None = "0016_ingest20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_element_dialog", "element", ["dialog"])


def downgrade() -> None:
    op.drop_index("ix_element_dialog", table_name="element")
