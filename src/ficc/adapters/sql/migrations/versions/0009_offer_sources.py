"""Where an incoming offer came from: the sender's source address (an IPv4 address, an IPv6
/64), so that a full table of waiting offers makes room by evicting the oldest offer of the
source holding the most, not by refusing a newcomer."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    with op.batch_alter_table("offers") as batch:
        batch.add_column(sa.Column("source", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("offers") as batch:
        batch.drop_column("source")
