"""State shared by every instance: failed logins, upload reports, trust re-judgements.

Revision ID: 0008_instances
Revises: 0007
Create Date: 2026-12-01

Written by hand to match ``LoginFailureRow``, ``UploadReportRow`` and ``TrustRejudgeRow`` in
app/store/models.py; tests/store/test_migrations.py checks that the two agree on both SQLite
and PostgreSQL. All three held per-process state before (or none): nothing to carry over.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_instances"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIME = sa.BigInteger()  # NumericDate seconds
ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "login_failure",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("at", TIME, nullable=False),
    )
    op.create_index("ix_login_failure_key", "login_failure", ["key"])
    op.create_index("ix_login_failure_at", "login_failure", ["at"])
    op.create_table(
        "upload_report",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("user_id", ROW_ID, sa.ForeignKey("operator_user.id"), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
    )
    op.create_index("ix_upload_report_user_id", "upload_report", ["user_id"])
    op.create_index("ix_upload_report_expires_at", "upload_report", ["expires_at"])
    op.create_table(
        "trust_rejudge",
        sa.Column("trust", sa.String(64), primary_key=True),
        sa.Column("started_at", TIME, nullable=False),
        sa.Column("judged", sa.BigInteger(), nullable=False),
        sa.Column("closed", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("trust_rejudge")
    op.drop_index("ix_upload_report_expires_at", table_name="upload_report")
    op.drop_index("ix_upload_report_user_id", table_name="upload_report")
    op.drop_table("upload_report")
    op.drop_index("ix_login_failure_at", table_name="login_failure")
    op.drop_index("ix_login_failure_key", table_name="login_failure")
    op.drop_table("login_failure")
