"""Receipt gaps that survive a restart: the requester keeps each gap it noticed in a grant's
chain of usage receipts (the seq after which to fetch), and which peer gave a grant once that
peer lists it no more (a retired grant's chain can still be reconciled)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_receipt_gaps"
down_revision = "0017_token_restrictions"


def upgrade() -> None:
    op.create_table(
        "receipt_chains",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("grant_id", sa.String(40), nullable=False),
        sa.Column("peer_id", sa.String(40), nullable=False),
        sa.Column("after", sa.BigInteger, nullable=True),
    )
    op.create_index("receipt_chains_by_grant", "receipt_chains", ["grant_id"])


def downgrade() -> None:
    op.drop_index("receipt_chains_by_grant", table_name="receipt_chains")
    op.drop_table("receipt_chains")
