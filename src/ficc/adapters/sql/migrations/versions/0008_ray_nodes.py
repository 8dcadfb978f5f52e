"""Nodes from a Ray cluster: each node's Ray ID and labels, and whether it is still there.

A node that left stays on record (services may name it) but is marked unavailable with the
reason, so nothing is scheduled on it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("ray_node_id", sa.String(64), nullable=True))
        batch.add_column(sa.Column("labels", sa.JSON, nullable=True))
        batch.add_column(
            sa.Column("available", sa.Boolean, nullable=False, server_default=sa.true())
        )
        batch.add_column(sa.Column("unavailable_reason", sa.String(500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("unavailable_reason")
        batch.drop_column("available")
        batch.drop_column("labels")
        batch.drop_column("ray_node_id")
