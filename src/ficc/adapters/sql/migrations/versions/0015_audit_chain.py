"""The audit log becomes a hash chain: each row carries the digest of the row before it
(``prev``) and its own (``digest``), ``audit_heads`` holds the heads signed with the cluster
key, and a row's content may be deleted only by turning it into a signed tombstone.

Existing rows are chained here in ``seq`` order, from their stored text; no key is at hand in a
migration, so the first server start after it signs the head at the last of them. The append-only
triggers of 0001 (SQLite) and 0007 (PostgreSQL) are replaced by ones that refuse any change but
that one: content to nothing, ``tombstone`` set, ``seq``, ``prev`` and ``digest`` unchanged.
"""

from __future__ import annotations

import json
from typing import Any, Final

import sqlalchemy as sa
from alembic import op

from ficc.base.times import parse_time
from ficc.domain.audit import AuditEntry
from ficc.domain.audit_chain import GENESIS, TOMBSTONE_ACTION, row_digest

revision = "0015_audit_chain"
down_revision = "0014_routes"

TOMBSTONING: Final = (
    "OLD.tombstone IS NULL AND NEW.tombstone IS NOT NULL AND NEW.seq = OLD.seq "
    "AND NEW.prev = OLD.prev AND NEW.digest = OLD.digest AND NEW.project IS NULL "
    "AND NEW.target IS NULL AND NEW.peer_hypernet_id IS NULL "
    "AND NEW.peer_cluster_key IS NULL AND NEW.actor = '' "
    f"AND NEW.action = '{TOMBSTONE_ACTION}'"
)
"""The one change an audit row may take: becoming its tombstone."""

SQLITE_NO_UPDATE: Final = (
    "CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log "
    f"WHEN NOT ({TOMBSTONING} AND NEW.details = '{{}}') "
    "BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END"
)
SQLITE_OLD_NO_UPDATE: Final = (
    "CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log "
    "BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END"
)
POSTGRES_FUNCTION: Final = (
    "CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ BEGIN "
    f"IF TG_OP = 'UPDATE' AND {TOMBSTONING} AND NEW.details::text = '{{}}' THEN RETURN NEW; "
    "END IF; RAISE EXCEPTION 'audit log is append-only'; END $$"
)
POSTGRES_OLD_FUNCTION: Final = (
    "CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'audit log is append-only'; END $$"
)


def _details(value: Any) -> dict[str, Any]:
    parsed = json.loads(value) if isinstance(value, str) else value
    return dict(parsed or {})


def _chain_existing(bind: sa.Connection) -> None:
    log = sa.table(
        "audit_log",
        sa.column("seq", sa.Integer),
        sa.column("at", sa.String(40)),
        sa.column("project", sa.String(63)),
        sa.column("actor", sa.String(200)),
        sa.column("action", sa.String(100)),
        sa.column("target", sa.String(200)),
        sa.column("peer_hypernet_id", sa.String(64)),
        sa.column("peer_cluster_key", sa.String(64)),
        sa.column("details", sa.JSON),
        sa.column("prev", sa.String(64)),
        sa.column("digest", sa.String(64)),
    )
    prev = GENESIS
    rows = bind.execute(sa.select(log).order_by(log.c.seq)).all()
    for expected, row in enumerate(rows, start=1):
        seq = row.seq
        if seq != expected:
            # PostgreSQL's sequence skips the numbers of rolled-back inserts: rows are
            # renumbered, so "each row is numbered one after the row before it" holds, and a
            # dropped row is told from a skipped number.
            bind.execute(sa.update(log).where(log.c.seq == seq).values(seq=expected))
            seq = expected
        entry = AuditEntry(
            action=row.action,
            actor=row.actor,
            project=row.project,
            target=row.target,
            at=parse_time(str(row.at)),
            details=_details(row.details),
            peer_hypernet_id=row.peer_hypernet_id,
            peer_cluster_key=row.peer_cluster_key,
        )
        digest = row_digest(entry, seq=seq, prev=prev, at=str(row.at))
        bind.execute(sa.update(log).where(log.c.seq == seq).values(prev=prev, digest=digest))
        prev = digest


def upgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    op.add_column("audit_log", sa.Column("prev", sa.String(64), nullable=True))
    op.add_column("audit_log", sa.Column("digest", sa.String(64), nullable=True))
    op.add_column("audit_log", sa.Column("tombstone", sa.String(100), nullable=True))
    op.create_table(
        "audit_heads",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("signature", sa.String(100), nullable=False),
    )
    if postgres:
        op.execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_no_change")
    else:
        op.execute("DROP TRIGGER audit_log_no_update")
    _chain_existing(bind)
    op.create_index("audit_by_prev", "audit_log", ["prev"], unique=True)
    if postgres:
        op.execute(POSTGRES_FUNCTION)
        op.execute("ALTER TABLE audit_log ENABLE TRIGGER audit_log_no_change")
    else:
        op.execute(SQLITE_NO_UPDATE)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute(POSTGRES_OLD_FUNCTION)
    else:
        op.execute("DROP TRIGGER audit_log_no_update")
    op.drop_index("audit_by_prev", "audit_log")
    op.drop_table("audit_heads")
    with op.batch_alter_table("audit_log") as batch:
        batch.drop_column("tombstone")
        batch.drop_column("digest")
        batch.drop_column("prev")
    if not postgres:
        op.execute(SQLITE_OLD_NO_UPDATE)
