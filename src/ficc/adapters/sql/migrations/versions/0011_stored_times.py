"""Times are stored in one fixed width, microseconds always present: rows written before
lacked the fraction when it was zero (``12:00:00Z``), which sorts after ``12:00:00.5Z`` as
text, so SQL comparisons such as ``expires_at > now`` could be wrong by up to a second.

Every time column is rewritten to the new form, so comparisons between old rows and new
values hold. The audit log is left as it is: it is append-only (a trigger refuses changes on
both backends), it is ordered by ``seq`` and no query compares its times; its rows read in
either form. The downgrade changes nothing: older code reads the new form too.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

import sqlalchemy as sa
from alembic import op

revision = "0011_stored_times"
down_revision = "0010_desired_state"

WIDTH: Final = len("2026-11-29T12:00:00.000000Z")

TIME_COLUMNS: Final = {
    "mutation_receipts": ("created_at", "completed_at"),
    "nodes": ("updated_at",),
    "offer_tombstones": ("created_at",),
    "offers": ("created_at", "expires_at"),
    "projects": ("created_at",),
    "remote_grants": ("refreshed_at",),
    "users": ("created_at",),
    "api_tokens": ("created_at", "expires_at", "revoked_at"),
    "grants": ("created_at", "expires_at", "revoked_at"),
    "login_links": ("created_at", "expires_at", "used_at"),
    "models": ("created_at",),
    "peers": ("created_at", "updated_at"),
    "services": ("created_at", "updated_at"),
    "transfers": ("created_at", "updated_at"),
    "web_sessions": ("created_at", "expires_at"),
    "replica_attempts": ("created_at", "ended_at"),
}
"""Every time column but ``audit_log.at``, as of this revision."""


def _stored(text: str) -> str | None:
    """The fixed-width form of a stored time, or None for text that is no time (left alone)."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def upgrade() -> None:
    bind = op.get_bind()
    for table_name, column_names in TIME_COLUMNS.items():
        for column_name in column_names:
            column = sa.column(column_name, sa.String(40))
            table = sa.table(table_name, column)
            odd = sa.or_(
                sa.func.length(column) != WIDTH,
                sa.func.substr(column, 20, 1) != ".",
                sa.func.substr(column, WIDTH, 1) != "Z",
            )
            query = sa.select(column).where(column.is_not(None), odd).distinct()
            for (old,) in bind.execute(query).all():
                new = _stored(old)
                if new is not None and new != old:
                    bind.execute(sa.update(table).where(column == old).values({column_name: new}))


def downgrade() -> None:
    pass
