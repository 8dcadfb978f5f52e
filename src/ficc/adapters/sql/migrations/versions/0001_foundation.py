"""Foundation: projects, accounts, audit log, settings, nodes and the model catalogue."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None

TIME = sa.String(40)


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("created_at", TIME, nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("username", sa.String(64), nullable=False, unique=True),
        sa.Column("password_hash", sa.Text, nullable=True),
        sa.Column("is_owner", sa.Boolean, nullable=False),
        sa.Column("scopes", sa.JSON, nullable=False),
        sa.Column("projects", sa.JSON, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("user_id", sa.String(40), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("scopes", sa.JSON, nullable=False),
        sa.Column("projects", sa.JSON, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=True),
        sa.Column("revoked_at", TIME, nullable=True),
    )
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("user_id", sa.String(40), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
    )
    op.create_table(
        "login_links",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("user_id", sa.String(40), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
        sa.Column("used_at", TIME, nullable=True),
    )
    op.create_table(
        "audit_log",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", TIME, nullable=False),
        sa.Column("project", sa.String(63), nullable=True),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("action", sa.String(100), nullable=False),
        sa.Column("target", sa.String(200), nullable=True),
        sa.Column("peer_hypernet_id", sa.String(64), nullable=True),
        sa.Column("peer_cluster_key", sa.String(64), nullable=True),
        sa.Column("details", sa.JSON, nullable=False),
    )
    op.create_table(
        "cluster_settings",
        sa.Column("key", sa.String(100), primary_key=True),
        sa.Column("value", sa.JSON, nullable=False),
    )
    op.create_table(
        "nodes",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("is_local", sa.Boolean, nullable=False),
        sa.Column("cpu_count", sa.Integer, nullable=False),
        sa.Column("memory_bytes", sa.BigInteger, nullable=False),
        sa.Column("memory_available_bytes", sa.BigInteger, nullable=False),
        sa.Column("gpus", sa.JSON, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
    )
    op.create_table(
        "models",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("project", sa.String(63), sa.ForeignKey("projects.name"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("format", sa.String(64), nullable=False),
        sa.Column("manifest", sa.JSON, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("provenance", sa.JSON, nullable=True),
        sa.Column("created_at", TIME, nullable=False),
    )
    op.create_index("models_by_sha256", "models", ["sha256"])
    op.create_index("audit_by_project", "audit_log", ["project", "seq"])
    # The audit log is append-only: the database itself refuses to change or delete an entry.
    if op.get_bind().dialect.name == "sqlite":
        op.execute(
            "CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log "
            "BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END"
        )
        op.execute(
            "CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log "
            "BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END"
        )


def downgrade() -> None:
    for table in (
        "models",
        "nodes",
        "cluster_settings",
        "audit_log",
        "login_links",
        "web_sessions",
        "api_tokens",
        "users",
        "projects",
    ):
        op.drop_table(table)
