"""Alembic environment: always run on a connection FICC passes in (online mode only)."""

from __future__ import annotations

from alembic import context

from ficc.adapters.sql import metering_tables  # noqa: F401  (registers its tables on the metadata)
from ficc.adapters.sql.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
