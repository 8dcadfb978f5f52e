"""A service's desired state beside its state: what its owner last asked for (running or
stopped), so that FICC brings running services back after its own restart. A service found
starting or running (its FICC was killed) was asked to run; any other starts as ``stopped``."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_desired_state"
down_revision = "0009"


def upgrade() -> None:
    with op.batch_alter_table("services") as batch:
        batch.add_column(
            sa.Column("desired", sa.String(20), nullable=False, server_default="stopped")
        )
    op.execute("UPDATE services SET desired = 'running' WHERE state IN ('starting', 'running')")


def downgrade() -> None:
    with op.batch_alter_table("services") as batch:
        batch.drop_column("desired")
