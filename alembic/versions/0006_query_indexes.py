"""Indexes for the dashboard's and the API's reads over a large store.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30

Measured by bench/query_scale.py over 1,000,000 hops in PostgreSQL (BENCHMARKS.md): hop
lists are kept in (iat, iss, hop) order, filtered by state, agent (iss or aud) or time;
search looks hops up by hop id, task id and dialog prefix; the triage queue is in
(opened_at, id) order. Without these indexes each of those reads sorts or scans a whole
table. ``ix_hop_state_iat`` replaces ``ix_hop_state`` (its leading column serves the same
lookups). Written by hand to match ``HopRow`` and ``FlagRow`` in app/store/models.py;
tests/store/test_migrations.py checks that they agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_hop_iat_key", "hop", ["iat", "iss", "hop"])
    op.create_index("ix_hop_state_iat", "hop", ["state", "iat", "iss", "hop"])
    op.drop_index("ix_hop_state", table_name="hop")
    op.create_index("ix_hop_aud", "hop", ["aud"])
    op.create_index("ix_hop_hop", "hop", ["hop"])
    op.create_index("ix_hop_task", "hop", ["task"])
    # LIKE 'prefix%' uses a btree index only under the C collation or with the pattern
    # operator class (PostgreSQL; elsewhere a plain index on the column).
    op.create_index(
        "ix_hop_dialog_prefix",
        "hop",
        ["dialog"],
        postgresql_ops={"dialog": "text_pattern_ops"},
    )
    op.create_index("ix_flag_opened", "flag", ["opened_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_flag_opened", table_name="flag")
    op.drop_index("ix_hop_dialog_prefix", table_name="hop")
    op.drop_index("ix_hop_task", table_name="hop")
    op.drop_index("ix_hop_hop", table_name="hop")
    op.drop_index("ix_hop_aud", table_name="hop")
    op.create_index("ix_hop_state", "hop", ["state"])
    op.drop_index("ix_hop_state_iat", table_name="hop")
    op.drop_index("ix_hop_iat_key", table_name="hop")
