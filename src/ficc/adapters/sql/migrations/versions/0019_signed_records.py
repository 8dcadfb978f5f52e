"""The grantor's usage receipt in its usage record's row: signed in the record's transaction,
it took a row of its own in usage_receipts, a second INSERT on every request. Receipts kept
before stay where they are; a chain is read from both tables."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_signed_records"
down_revision = "0018_receipt_gaps"

_SIGNED = sa.text("receipt_seq IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("usage_records") as batch:
        batch.add_column(sa.Column("receipt_seq", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("receipt_digest", sa.String(64), nullable=True))
        batch.add_column(sa.Column("receipt", sa.Text, nullable=True))
    for name, column in (("receipt", "receipt_seq"), ("receipt_request", "request_id")):
        op.create_index(
            f"usage_records_by_{name}",
            "usage_records",
            ["grant_id", "side", column],
            unique=column == "receipt_seq",
            sqlite_where=_SIGNED,
            postgresql_where=_SIGNED,
        )


def downgrade() -> None:
    op.drop_index("usage_records_by_receipt_request", table_name="usage_records")
    op.drop_index("usage_records_by_receipt", table_name="usage_records")
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("receipt")
        batch.drop_column("receipt_digest")
        batch.drop_column("receipt_seq")
