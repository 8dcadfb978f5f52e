"""Routes: a project's model names over ordered targets (local services, peers' granted
services), each with its policy; the spec is kept as the API shows it."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_routes"
down_revision = "0013_lease"

TIME = sa.String(40)


def upgrade() -> None:
    op.create_table(
        "routes",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("project", sa.String(63), sa.ForeignKey("projects.name"), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
    )
    op.create_index("routes_by_project_name", "routes", ["project", "name"], unique=True)


def downgrade() -> None:
    op.drop_index("routes_by_project_name", table_name="routes")
    op.drop_table("routes")
