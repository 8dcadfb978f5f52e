"""Per-project blob references: a catalogue record resolves only to blobs its project owns.

Existing records that were imported or transferred (not created by a peer's grant) keep their
files: their digests are entered into their project's set.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    blob_refs = op.create_table(
        "blob_refs",
        sa.Column("project", sa.String(63), sa.ForeignKey("projects.name"), primary_key=True),
        sa.Column("sha256", sa.String(64), primary_key=True),
    )
    models = sa.table(
        "models",
        sa.column("project", sa.String),
        sa.column("manifest", sa.JSON),
        sa.column("created_by_grant", sa.String),
    )
    rows = op.get_bind().execute(
        sa.select(models.c.project, models.c.manifest).where(models.c.created_by_grant.is_(None))
    )
    owned = {(row.project, str(entry["sha256"])) for row in rows for entry in row.manifest["files"]}
    if owned:
        op.bulk_insert(
            blob_refs, [{"project": project, "sha256": sha256} for project, sha256 in owned]
        )


def downgrade() -> None:
    op.drop_table("blob_refs")
