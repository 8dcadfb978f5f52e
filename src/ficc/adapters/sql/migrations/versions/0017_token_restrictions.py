"""Restricted local tokens: each restricted token's peers, services and budgets (with what it
settled and holds reserved, as a grant's row does), and the local token each usage record on
the requester names."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_token_restrictions"
down_revision = "0016_usage_receipts"


def upgrade() -> None:
    op.create_table(
        "token_limits",
        sa.Column("token_id", sa.String(40), primary_key=True),
        sa.Column("parent", sa.String(40), nullable=True),
        sa.Column("peers", sa.JSON, nullable=True),
        sa.Column("services", sa.JSON, nullable=True),
        sa.Column("tokens", sa.BigInteger, nullable=True),
        sa.Column("tokens_per_minute", sa.BigInteger, nullable=True),
        sa.Column("requests_per_minute", sa.BigInteger, nullable=True),
        sa.Column("requests_used", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("prompt_tokens_used", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("completion_tokens_used", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("tokens_reserved", sa.BigInteger, nullable=False, server_default="0"),
    )
    with op.batch_alter_table("usage_records") as batch:
        batch.add_column(sa.Column("token_id", sa.String(40), nullable=True))
    op.create_index("usage_by_token", "usage_records", ["token_id", "seq"])


def downgrade() -> None:
    op.drop_index("usage_by_token", table_name="usage_records")
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("token_id")
    op.drop_table("token_limits")
