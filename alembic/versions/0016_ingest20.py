"""An observation id on refused receipts (``rejected_observation.observation_key``), and
the ``write_probe`` table that ``/readyz`` writes to.

Revision ID: 0016_ingest20
Revises: 0015_ui26
Create Date: 2026-12-01

A capture record whose item was refused (malformed, or a key in its header) and then sent
again by a shipper that never saw the answer was stored once per delivery: refused receipts
had no observation id, unlike elements (``observation.observation_key``, 0009). Existing
receipts keep it NULL. Written by hand to match app/store/models.py;
tests/store/test_migrations.py checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0016_ingest20"
down_revision: str | None = "0015_ui26"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "write_probe",
        sa.Column("name", sa.String(160), primary_key=True),
        sa.Column("at", sa.BigInteger(), nullable=False),
    )
    with op.batch_alter_table("rejected_observation") as batch:
        batch.add_column(sa.Column("observation_key", sa.String(160), nullable=True))
        batch.create_unique_constraint(
            "uq_rejected_observation_observation_key", ["observation_key"]
        )


def downgrade() -> None:
    op.drop_table("write_probe")
    with op.batch_alter_table("rejected_observation") as batch:
        batch.drop_constraint("uq_rejected_observation_observation_key", type_="unique")
        batch.drop_column("observation_key")
