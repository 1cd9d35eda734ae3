"""Indexes on the host task an element rides in: ``element.task`` and
``observation.task_id``.

Revision ID: 0011_task_index
Revises: 0010_dashboard
Create Date: 2026-12-01

Ingest finds the hops a batch's host task states touch by task id (``hops_of_tasks`` in
app/store/host.py); without these indexes each batch scanned both tables, so ingest slowed
as the store grew (0.18 s a batch at 500,000 elements, BENCHMARKS.md #13). Written by hand to
match app/store/models.py; tests/store/test_migrations.py checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011_task_index"
down_revision: str | None = "0010_dashboard"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_element_task", "element", ["task"])
    op.create_index("ix_observation_task_id", "observation", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_observation_task_id", table_name="observation")
    op.drop_index("ix_element_task", table_name="element")
