"""The store: elements, observations, verdicts, hops, flags, audit log, replay memory.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Written by hand to match app/store/models.py; tests/store/test_migrations.py checks that
the two agree on both SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DIGEST = sa.LargeBinary(32)  # SHA-256, raw octets
TIME = sa.BigInteger()  # NumericDate seconds, up to 2^53
# Row ids: BIGINT on PostgreSQL; SQLite autoincrements only an INTEGER PRIMARY KEY.
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # The source of truth: each signed element once, octets exactly as received.
    op.create_table(
        "element",
        sa.Column("digest", DIGEST, primary_key=True),
        sa.Column("form", sa.String(8), nullable=False),
        sa.Column("type", sa.String(8), nullable=False),
        sa.Column("octets", sa.LargeBinary(), nullable=False),
        sa.Column("iss", sa.Text(), nullable=False),
        sa.Column("aud", sa.Text(), nullable=False),
        sa.Column("hop", sa.String(64), nullable=False),
        sa.Column("hop_iss", sa.Text(), nullable=False),
        sa.Column("dialog", sa.Text(), nullable=True),
        sa.Column("task", sa.Text(), nullable=True),
        sa.Column("iat", TIME, nullable=False),
        sa.Column("exp", TIME, nullable=True),
        sa.Column("offer", DIGEST, nullable=True),
        sa.Column("state", sa.String(16), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("ref_count", sa.Integer(), nullable=False),
        sa.Column("content", DIGEST, nullable=False),
        sa.Column("first_seen", TIME, nullable=False),
    )
    op.create_index("ix_element_hop", "element", ["hop_iss", "hop"])
    op.create_index("ix_element_offer", "element", ["offer"])

    # Chain links offer -> prev: the dialog trees.
    op.create_table(
        "link",
        sa.Column("offer", DIGEST, sa.ForeignKey("element.digest"), primary_key=True),
        sa.Column("prev", DIGEST, nullable=False),
        sa.Column("dialog", sa.Text(), nullable=False),
    )
    op.create_index("ix_link_prev", "link", ["prev"])
    op.create_index("ix_link_dialog", "link", ["dialog"])

    # Every receipt of an element (append-only; a retransmission adds a row).
    op.create_table(
        "observation",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("digest", DIGEST, sa.ForeignKey("element.digest"), nullable=False),
        sa.Column("received_at", TIME, nullable=False),
        sa.Column("received_by", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("carrier", sa.String(16), nullable=True),
        sa.Column("role", sa.String(32), nullable=True),
        sa.Column("dialog", sa.Text(), nullable=True),
        sa.Column("task_id", sa.Text(), nullable=True),
        sa.Column("task_state", sa.String(64), nullable=True),
        sa.Column("via", DIGEST, nullable=True),
        sa.Column("ingested_at", TIME, nullable=False),
    )
    op.create_index("ix_observation_digest", "observation", ["digest"])

    # One verdict per observation (profile §11), with its replay-independent judgement.
    op.create_table(
        "verdict",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column(
            "observation_id",
            ROW_ID,
            sa.ForeignKey("observation.id"),
            nullable=False,
            unique=True,
        ),
        sa.Column("digest", DIGEST, nullable=False),
        sa.Column("element", sa.String(8), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("checks", sa.JSON(), nullable=False),
        sa.Column("chain", sa.JSON(), nullable=True),
        sa.Column("equivocation_first", DIGEST, nullable=True),
        sa.Column("equivocation_variant", sa.String(16), nullable=True),
        sa.Column("trust", sa.String(64), nullable=False),
        sa.Column("remembered", sa.Boolean(), nullable=False),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("fault", sa.Text(), nullable=True),
        sa.Column("judged_at", TIME, nullable=False),
    )
    op.create_index("ix_verdict_digest", "verdict", ["digest"])
    op.create_index("ix_verdict_outcome", "verdict", ["outcome"])

    op.create_table(
        "ref_outcome",
        sa.Column("verdict_id", ROW_ID, sa.ForeignKey("verdict.id"), primary_key=True),
        sa.Column("index", sa.Integer(), primary_key=True),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
    )

    # Derived hop state (profile §8); the sweep finds due hops by deadline.
    op.create_table(
        "hop",
        sa.Column("iss", sa.Text(), primary_key=True),
        sa.Column("hop", sa.String(64), primary_key=True),
        sa.Column("offer", DIGEST, nullable=False),
        sa.Column("aud", sa.Text(), nullable=False),
        sa.Column("dialog", sa.Text(), nullable=False),
        sa.Column("task", sa.Text(), nullable=True),
        sa.Column("iat", TIME, nullable=False),
        sa.Column("exp", TIME, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("a2a_state", sa.String(32), nullable=True),
        sa.Column("accepted_at", TIME, nullable=True),
        sa.Column("terminal_at", TIME, nullable=True),
        sa.Column("deadline", TIME, nullable=True),
        sa.Column("derived_at", TIME, nullable=False),
    )
    op.create_index("ix_hop_offer", "hop", ["offer"])
    op.create_index("ix_hop_dialog", "hop", ["dialog"])
    op.create_index("ix_hop_state", "hop", ["state"])
    op.create_index("ix_hop_deadline", "hop", ["deadline"])
    op.create_index("ix_hop_derived_at", "hop", ["derived_at"])

    # Flags: one row per condition (unique key), with the operators' workflow columns.
    op.create_table(
        "flag",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(64), nullable=False, unique=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("variant", sa.Text(), nullable=True),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("assignee", sa.Text(), nullable=True),
        sa.Column("snoozed_until", TIME, nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("iss", sa.Text(), nullable=False),
        sa.Column("hop", sa.String(64), nullable=False),
        sa.Column("offer", DIGEST, nullable=True),
        sa.Column("opened_at", TIME, nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
    )
    op.create_index("ix_flag_kind", "flag", ["kind"])
    op.create_index("ix_flag_status", "flag", ["status"])
    op.create_index("ix_flag_hop", "flag", ["iss", "hop"])

    # The audit log of operator (and automatic) actions on flags.
    op.create_table(
        "action",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("flag_id", ROW_ID, sa.ForeignKey("flag.id"), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
    )
    op.create_index("ix_action_flag_id", "action", ["flag_id"])

    # Memories the checks rest on (profile §6.4): primary keys make them safe across workers.
    op.create_table(
        "replay",
        sa.Column("iss", sa.Text(), primary_key=True),
        sa.Column("hop", sa.String(64), primary_key=True),
        sa.Column("digest", DIGEST, nullable=False),
        sa.Column("content", DIGEST, nullable=False),
        sa.Column("recorded_at", TIME, nullable=False),
    )
    op.create_table(
        "seen_status",
        sa.Column("digest", DIGEST, primary_key=True),
        sa.Column("seen_at", TIME, nullable=False),
    )
    op.create_table(
        "signature_cache",
        sa.Column("digest", DIGEST, primary_key=True),
        sa.Column("trust", sa.String(64), primary_key=True),
        sa.Column("verified_at", TIME, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "signature_cache",
        "seen_status",
        "replay",
        "action",
        "flag",
        "hop",
        "ref_outcome",
        "verdict",
        "observation",
        "link",
        "element",
    ):
        op.drop_table(table)
