"""Metered grants: the tokens each grant settled (prompt and completion) and holds reserved
for requests in flight, and one usage record per federated request on each side."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_metering"
down_revision = "0011_stored_times"

TIME_WIDTH = 40


def upgrade() -> None:
    with op.batch_alter_table("grants") as batch:
        for name in ("prompt_tokens_used", "completion_tokens_used", "tokens_reserved"):
            batch.add_column(sa.Column(name, sa.BigInteger, nullable=False, server_default="0"))
    op.create_table(
        "usage_records",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("grant_id", sa.String(40), nullable=False),
        sa.Column("side", sa.String(20), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("operation", sa.String(40), nullable=False),
        sa.Column("service", sa.String(40), nullable=True),
        sa.Column("started_at", sa.String(TIME_WIDTH), nullable=False),
        sa.Column("ended_at", sa.String(TIME_WIDTH), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
        sa.Column("completion_tokens", sa.BigInteger, nullable=False),
        sa.Column("request_bytes", sa.BigInteger, nullable=False),
        sa.Column("response_bytes", sa.BigInteger, nullable=False),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("counted_prompt_tokens", sa.BigInteger, nullable=True),
        sa.Column("counted_completion_tokens", sa.BigInteger, nullable=True),
        sa.Column("told", sa.Boolean, nullable=True),
    )
    op.create_index("usage_by_grant", "usage_records", ["grant_id", "seq"])


def downgrade() -> None:
    op.drop_index("usage_by_grant", table_name="usage_records")
    op.drop_table("usage_records")
    with op.batch_alter_table("grants") as batch:
        for name in ("tokens_reserved", "completion_tokens_used", "prompt_tokens_used"):
            batch.drop_column(name)
