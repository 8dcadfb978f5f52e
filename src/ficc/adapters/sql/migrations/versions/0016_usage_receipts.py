"""Usage receipts: each side keeps the receipts of a grant's usage records by seq (the
grantor those it signed, the requester those it received or fetched, with whether they
verified), and the requester the last reconciliation report of each grant."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_usage_receipts"
down_revision = "0015_audit_chain"

TIME_WIDTH = 40


def upgrade() -> None:
    op.create_table(
        "usage_receipts",
        sa.Column("grant_id", sa.String(40), primary_key=True),
        sa.Column("side", sa.String(20), primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("receipt", sa.Text, nullable=False),
        sa.Column("verified", sa.Boolean, nullable=False),
        sa.Column("problem", sa.String(40), nullable=True),
    )
    op.create_index(
        "usage_receipts_by_request", "usage_receipts", ["grant_id", "side", "request_id"]
    )
    op.create_table(
        "usage_reports",
        sa.Column("grant_id", sa.String(40), primary_key=True),
        sa.Column("peer_id", sa.String(40), nullable=False),
        sa.Column("at", sa.String(TIME_WIDTH), nullable=False),
        sa.Column("report", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("usage_reports")
    op.drop_index("usage_receipts_by_request", table_name="usage_receipts")
    op.drop_table("usage_receipts")
