"""Federation: peers, offers, grants given and grants received."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"

TIME = sa.String(40)


def upgrade() -> None:
    op.create_table(
        "peers",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("project", sa.String(63), sa.ForeignKey("projects.name"), nullable=False),
        sa.Column("label", sa.String(200), nullable=True),
        sa.Column("hypernet_id", sa.String(64), nullable=False),
        sa.Column("cluster_key", sa.String(64), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("offer_id", sa.String(40), nullable=True),
        sa.Column("selected_grant", sa.String(40), nullable=True),
        sa.Column("ticket", sa.Text, nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
    )
    op.create_index("peers_by_hypernet_id", "peers", ["hypernet_id"])
    op.create_table(
        "offers",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("direction", sa.String(20), nullable=False),
        sa.Column("project", sa.String(63), nullable=True),
        sa.Column("service", sa.String(64), nullable=False),
        sa.Column("peer_label", sa.String(200), nullable=True),
        sa.Column("peer_cluster_key", sa.String(64), nullable=True),
        sa.Column("scopes", sa.JSON, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("receipt", sa.JSON, nullable=True),
        sa.Column("ticket", sa.Text, nullable=True),
        sa.Column("peer_id", sa.String(40), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
    )
    op.create_table(
        "grants",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("project", sa.String(63), sa.ForeignKey("projects.name"), nullable=False),
        sa.Column("peer_id", sa.String(40), nullable=False),
        sa.Column("terms", sa.JSON, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
        sa.Column("revoked_at", TIME, nullable=True),
        sa.Column("requests_used", sa.BigInteger, nullable=False),
        sa.Column("transfer_bytes_used", sa.BigInteger, nullable=False),
    )
    op.create_index("grants_by_peer", "grants", ["peer_id"])
    op.create_table(
        "remote_grants",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("peer_id", sa.String(40), nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
        sa.Column("refreshed_at", TIME, nullable=False),
    )
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("created_by_grant", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("created_by_grant")
    for table in ("remote_grants", "grants", "offers", "peers"):
        op.drop_table(table)
