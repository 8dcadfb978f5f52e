"""Security boundaries: who minted each token and whether it is the owner token; offer IDs kept
for ever so a peer can never reuse one, also after ``forget``."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"

TIME = sa.String(40)


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("owner", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("created_by", sa.String(40), nullable=True))
    op.create_table(
        "offer_tombstones",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("hypernet_id", sa.String(64), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
    )
    # Offers already on record keep their IDs for ever as well.
    op.execute(
        "INSERT INTO offer_tombstones (id, hypernet_id, created_at) "
        "SELECT id, service, created_at FROM offers"
    )


def downgrade() -> None:
    op.drop_table("offer_tombstones")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("created_by")
        batch.drop_column("owner")
