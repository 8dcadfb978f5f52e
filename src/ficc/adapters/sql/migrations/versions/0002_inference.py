"""Managed inference: services, replica attempts and mutation receipts."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

TIME = sa.String(40)


def upgrade() -> None:
    op.create_table(
        "services",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("project", sa.String(63), sa.ForeignKey("projects.name"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("model", sa.String(40), nullable=False),
        sa.Column("node", sa.String(40), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("created_by_grant", sa.String(40), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
    )
    op.create_index("services_by_model", "services", ["model"])
    op.create_table(
        "replica_attempts",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("service_id", sa.String(40), sa.ForeignKey("services.id"), nullable=False),
        sa.Column("replica", sa.Integer, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("pid", sa.Integer, nullable=True),
        sa.Column("pid_start_ticks", sa.BigInteger, nullable=True),
        sa.Column("port", sa.Integer, nullable=True),
        sa.Column("serve_instance", sa.String(40), nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("log_tail", sa.Text, nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("ended_at", TIME, nullable=True),
    )
    op.create_table(
        "mutation_receipts",
        sa.Column("scope", sa.String(80), primary_key=True),
        sa.Column("mutation_id", sa.String(32), primary_key=True),
        sa.Column("operation", sa.String(40), nullable=False),
        sa.Column("arguments_sha256", sa.String(64), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("result", sa.JSON, nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("completed_at", TIME, nullable=True),
    )


def downgrade() -> None:
    for table in ("mutation_receipts", "replica_attempts", "services"):
        op.drop_table(table)
