"""The active lease: which of the ``ficc serve`` processes sharing this database acts (its
holder, the epoch every effect is fenced by, and when it lapses)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_lease"
down_revision = "0012_metering"


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(40), primary_key=True),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", sa.String(40), nullable=False),
        sa.Column("expires_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
