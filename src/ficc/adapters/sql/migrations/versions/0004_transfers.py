"""Model transfers: acquisitions of a peer's model, resumable file by file."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"

TIME = sa.String(40)


def upgrade() -> None:
    op.create_table(
        "transfers",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("project", sa.String(63), sa.ForeignKey("projects.name"), nullable=False),
        sa.Column("peer_id", sa.String(40), nullable=False),
        sa.Column("remote_model", sa.String(40), nullable=False),
        sa.Column("grant_id", sa.String(40), nullable=False),
        sa.Column("manifest", sa.JSON, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("files", sa.JSON, nullable=False),
        sa.Column("local_model", sa.String(40), nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
    )
    op.create_index("transfers_by_model", "transfers", ["project", "peer_id", "remote_model"])


def downgrade() -> None:
    op.drop_table("transfers")
