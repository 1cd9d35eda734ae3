"""Identities bound to the provider's subject, and login limits counted before the
password is checked (issue #25).

Revision ID: 0014_sec25
Revises: 0013_tlog24
Create Date: 2026-12-01

- ``operator_user.sso_issuer`` and ``sso_subject``: an account made by a login through an
  OpenID Connect provider is keyed on the ID token's (``iss``, ``sub``), unique together;
  the user name is only a label. Accounts made before this revision by such a login have
  neither: none of them is ever claimed by a later login (nobody can tell whose it was),
  and they keep their audit trail.
- ``login_limit`` replaces ``login_failure``: one row per key (a client address; a user
  name from an address), read and written under its row lock before the password is
  checked (``app.store.limits``). The old failures are dropped: they only ever held five
  minutes of history.

Written by hand to match app/store/models.py; tests/store/test_migrations.py checks that
the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_sec25"
down_revision: str | None = "0013_tlog24"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROW_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIME = sa.BigInteger()


def upgrade() -> None:
    op.add_column("operator_user", sa.Column("sso_issuer", sa.Text(), nullable=True))
    op.add_column("operator_user", sa.Column("sso_subject", sa.Text(), nullable=True))
    op.create_index(
        "ix_operator_user_sso", "operator_user", ["sso_issuer", "sso_subject"], unique=True
    )
    op.drop_index("ix_login_failure_at", table_name="login_failure")
    op.drop_index("ix_login_failure_key", table_name="login_failure")
    op.drop_table("login_failure")
    op.create_table(
        "login_limit",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("started_at", TIME, nullable=False),
        sa.Column("next_at", TIME, nullable=False),
    )
    op.create_index("ix_login_limit_next_at", "login_limit", ["next_at"])


def downgrade() -> None:
    op.drop_index("ix_login_limit_next_at", table_name="login_limit")
    op.drop_table("login_limit")
    op.create_table(
        "login_failure",
        sa.Column("id", ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("at", TIME, nullable=False),
    )
    op.create_index("ix_login_failure_key", "login_failure", ["key"])
    op.create_index("ix_login_failure_at", "login_failure", ["at"])
    op.drop_index("ix_operator_user_sso", table_name="operator_user")
    with op.batch_alter_table("operator_user") as batch:
        batch.drop_column("sso_subject")
        batch.drop_column("sso_issuer")
