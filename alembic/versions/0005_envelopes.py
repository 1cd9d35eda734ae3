"""Envelope handoffs: captured envelope items, the derived case ledger, and case flags.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Written by hand to match ``EnvelopeItemRow``, ``CaseRow`` and ``FlagRow.case_id`` in
app/store/models.py; tests/store/test_migrations.py checks that the two agree on both
SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIME = sa.BigInteger()  # NumericDate seconds
DIGEST = sa.LargeBinary(32)


def upgrade() -> None:
    # Evidence first: every envelope item as received, valid or not (docs/envelopes.md).
    op.create_table(
        "envelope_item",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("digest", DIGEST, nullable=False),
        sa.Column("octets", sa.LargeBinary(), nullable=False),
        sa.Column("format", sa.String(8), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("case_id", sa.Text(), nullable=True),
        sa.Column("handoff_id", sa.Text(), nullable=True),
        sa.Column("agent", sa.Text(), nullable=True),
        sa.Column("to_agent", sa.Text(), nullable=True),
        sa.Column("epoch", TIME, nullable=True),
        sa.Column("at", TIME, nullable=False),
        sa.Column("received_by", sa.Text(), nullable=True),
        sa.Column("media_type", sa.Text(), nullable=True),
        sa.Column("message_id", sa.Text(), nullable=True),
        sa.Column("context_id", sa.Text(), nullable=True),
        sa.Column("task_id", sa.Text(), nullable=True),
        sa.Column("action", sa.String(16), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("envelope", sa.JSON(), nullable=True),
        sa.Column("errors", sa.JSON(), nullable=False),
        sa.Column("drift", sa.JSON(), nullable=False),
        sa.Column("references", sa.JSON(), nullable=False),
        sa.Column("text_bytes", sa.Integer(), nullable=False),
        sa.Column("ingested_at", TIME, nullable=False),
    )
    op.create_index("ix_envelope_item_digest", "envelope_item", ["digest"])
    op.create_index("ix_envelope_item_case", "envelope_item", ["case_id", "at"])
    op.create_index("ix_envelope_item_handoff_id", "envelope_item", ["handoff_id"])
    op.create_index("ix_envelope_item_context_id", "envelope_item", ["context_id"])
    # The derived ledger of each case, re-derivable from the items.
    op.create_table(
        "envelope_case",
        sa.Column("case_id", sa.Text(), primary_key=True),
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("epoch", TIME, nullable=True),
        sa.Column("handoffs", sa.Integer(), nullable=False),
        sa.Column("last_at", TIME, nullable=False),
        sa.Column("deadline", TIME, nullable=True),
        sa.Column("derived_at", TIME, nullable=False),
    )
    op.create_index("ix_envelope_case_deadline", "envelope_case", ["deadline"])
    op.create_index("ix_envelope_case_derived_at", "envelope_case", ["derived_at"])
    # Case flags join the triage queue: the flag table names their case.
    with op.batch_alter_table("flag") as batch:
        batch.add_column(sa.Column("case_id", sa.Text(), nullable=True))
    op.create_index("ix_flag_case_id", "flag", ["case_id"])


def downgrade() -> None:
    op.drop_index("ix_flag_case_id", table_name="flag")
    with op.batch_alter_table("flag") as batch:
        batch.drop_column("case_id")
    op.drop_index("ix_envelope_case_derived_at", table_name="envelope_case")
    op.drop_index("ix_envelope_case_deadline", table_name="envelope_case")
    op.drop_table("envelope_case")
    op.drop_index("ix_envelope_item_context_id", table_name="envelope_item")
    op.drop_index("ix_envelope_item_handoff_id", table_name="envelope_item")
    op.drop_index("ix_envelope_item_case", table_name="envelope_item")
    op.drop_index("ix_envelope_item_digest", table_name="envelope_item")
    op.drop_table("envelope_item")
