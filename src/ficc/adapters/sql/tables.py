"""SQLAlchemy Core tables: the schema the Alembic migrations create.

Times are stored as fixed-width RFC 3339 UTC strings (portable across SQLite and PostgreSQL,
and sortable as text: see :class:`StoredTime`); JSON documents as JSON text.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    false,
    true,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

from ficc.base.times import format_stored_time, parse_time

metadata = MetaData()


class StoredTime(TypeDecorator[str]):
    """A time column: every value bound to it, stored or compared, is written in the one
    fixed-width form, so that SQL's text comparisons and ``ORDER BY`` follow time order.

    Takes a datetime or an RFC 3339 string of any form (what ``format_time`` gives); reads
    give the stored text, which ``parse_time`` reads in either form (rows written before
    revision 0010 rewrote them lack the fraction).
    """

    impl = String(40)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        if isinstance(value, str):
            value = parse_time(value)
        if not isinstance(value, datetime):
            raise TypeError(f"a time column takes a datetime or an RFC 3339 string, not {value!r}")
        return format_stored_time(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else str(value)


TIME = StoredTime()

# The columns several tables share, each defined once: a call makes the column anew, since a
# Column belongs to the one table it is given to.


def _id() -> Column[str]:
    """A record's key: its ID (at most 40 characters)."""
    return Column("id", String(40), primary_key=True)


def _project() -> Column[str]:
    """The project a record belongs to (a project's name is at most 63 characters)."""
    return Column("project", String(63), ForeignKey("projects.name"), nullable=False)


def _stamps() -> tuple[Column[str], Column[str]]:
    """When a record was made and when it last changed."""
    return Column("created_at", TIME, nullable=False), Column("updated_at", TIME, nullable=False)


def _credential() -> tuple[Column[str], Column[str]]:
    """A credential's user and its secret's digest: the digest finds it, so no two share one."""
    return (
        Column("user_id", String(40), ForeignKey("users.id"), nullable=False),
        Column("secret_hash", String(64), nullable=False, unique=True),
    )


def token_counts() -> tuple[Column[int], ...]:
    """A metered budget's tokens (a grant's, a restricted token's: ``budgets.BudgetRow``):
    used, and reserved by requests in flight."""
    return tuple(
        Column(name, BigInteger, nullable=False, server_default="0")
        for name in ("prompt_tokens_used", "completion_tokens_used", "tokens_reserved")
    )


projects = Table(
    "projects",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("created_at", TIME, nullable=False),
)

users = Table(
    "users",
    metadata,
    _id(),
    Column("username", String(64), nullable=False, unique=True),
    Column("password_hash", Text, nullable=True),
    Column("is_owner", Boolean, nullable=False),
    Column("scopes", JSON, nullable=False),
    Column("projects", JSON, nullable=False),
    Column("created_at", TIME, nullable=False),
)

api_tokens = Table(
    "api_tokens",
    metadata,
    _id(),
    *_credential(),
    Column("scopes", JSON, nullable=False),
    Column("projects", JSON, nullable=False),
    Column("created_at", TIME, nullable=False),
    Column("expires_at", TIME, nullable=True),
    Column("revoked_at", TIME, nullable=True),
    # The token ``ficc init`` wrote: the only token that is the local owner.
    Column("owner", Boolean, nullable=False, server_default=false()),
    # The token that minted this one (None: the owner session, the socket or ``ficc init``).
    Column("created_by", String(40), nullable=True),
)

web_sessions = Table(
    "web_sessions",
    metadata,
    _id(),
    *_credential(),
    Column("csrf_token", String(64), nullable=False),
    Column("created_at", TIME, nullable=False),
    Column("expires_at", TIME, nullable=False),
)

login_links = Table(
    "login_links",
    metadata,
    _id(),
    *_credential(),
    Column("created_at", TIME, nullable=False),
    Column("expires_at", TIME, nullable=False),
    Column("used_at", TIME, nullable=True),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("at", TIME, nullable=False),
    Column("project", String(63), nullable=True),
    Column("actor", String(200), nullable=False),
    Column("action", String(100), nullable=False),
    Column("target", String(200), nullable=True),
    Column("peer_hypernet_id", String(64), nullable=True),
    Column("peer_cluster_key", String(64), nullable=True),
    Column("details", JSON, nullable=False),
    # The hash chain (migration 0015; see ficc.domain.audit_chain): filled on every row.
    Column("prev", String(64), nullable=True),
    Column("digest", String(64), nullable=True),
    Column("tombstone", String(100), nullable=True),
)

audit_heads = Table(
    "audit_heads",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("digest", String(64), nullable=False),
    Column("signature", String(100), nullable=False),
)

cluster_settings = Table(
    "cluster_settings",
    metadata,
    Column("key", String(100), primary_key=True),
    Column("value", JSON, nullable=False),
)

nodes = Table(
    "nodes",
    metadata,
    _id(),
    Column("name", String(200), nullable=False),
    Column("is_local", Boolean, nullable=False),
    Column("cpu_count", Integer, nullable=False),
    Column("memory_bytes", BigInteger, nullable=False),
    Column("memory_available_bytes", BigInteger, nullable=False),
    Column("gpus", JSON, nullable=False),
    Column("updated_at", TIME, nullable=False),
    Column("ray_node_id", String(64), nullable=True),
    Column("labels", JSON, nullable=True),
    Column("available", Boolean, nullable=False, server_default=true()),
    Column("unavailable_reason", String(500), nullable=True),
)

models = Table(
    "models",
    metadata,
    _id(),
    _project(),
    Column("name", String(200), nullable=False),
    Column("format", String(64), nullable=False),
    Column("manifest", JSON, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("provenance", JSON, nullable=True),
    Column("created_at", TIME, nullable=False),
    Column("created_by_grant", String(40), nullable=True),
)

# The blobs each project may read and run: files imported into it, or fetched and verified
# into it by a transfer. A catalogue record resolves only to blobs of its project's set.
blob_refs = Table(
    "blob_refs",
    metadata,
    Column("project", String(63), ForeignKey("projects.name"), primary_key=True),
    Column("sha256", String(64), primary_key=True),
)

services = Table(
    "services",
    metadata,
    _id(),
    _project(),
    Column("name", String(200), nullable=False),
    Column("model", String(40), nullable=False),
    Column("node", String(40), nullable=False),
    Column("spec", JSON, nullable=False),
    Column("state", String(20), nullable=False),
    Column("desired", String(20), nullable=False, server_default="stopped"),
    Column("revision", Integer, nullable=False),
    Column("error", Text, nullable=True),
    Column("created_by_grant", String(40), nullable=True),
    *_stamps(),
)

replica_attempts = Table(
    "replica_attempts",
    metadata,
    _id(),
    Column("service_id", String(40), ForeignKey("services.id"), nullable=False),
    Column("replica", Integer, nullable=False),
    Column("state", String(20), nullable=False),
    Column("pid", Integer, nullable=True),
    Column("pid_start_ticks", BigInteger, nullable=True),
    Column("port", Integer, nullable=True),
    Column("serve_instance", String(40), nullable=False),
    Column("exit_code", Integer, nullable=True),
    Column("log_tail", Text, nullable=True),
    Column("created_at", TIME, nullable=False),
    Column("ended_at", TIME, nullable=True),
)

mutation_receipts = Table(
    "mutation_receipts",
    metadata,
    Column("scope", String(80), primary_key=True),
    Column("mutation_id", String(32), primary_key=True),
    Column("operation", String(40), nullable=False),
    Column("arguments_sha256", String(64), nullable=False),
    Column("state", String(20), nullable=False),
    Column("result", JSON, nullable=True),
    Column("created_at", TIME, nullable=False),
    Column("completed_at", TIME, nullable=True),
)

peers = Table(
    "peers",
    metadata,
    _id(),
    _project(),
    Column("label", String(200), nullable=True),
    Column("hypernet_id", String(64), nullable=False),
    Column("cluster_key", String(64), nullable=False),
    Column("state", String(20), nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("role", String(20), nullable=False),
    Column("offer_id", String(40), nullable=True),
    Column("selected_grant", String(40), nullable=True),
    Column("ticket", Text, nullable=True),
    *_stamps(),
)

offers = Table(
    "offers",
    metadata,
    _id(),
    Column("direction", String(20), nullable=False),
    Column("project", String(63), nullable=True),
    Column("service", String(64), nullable=False),
    Column("peer_label", String(200), nullable=True),
    Column("peer_cluster_key", String(64), nullable=True),
    Column("scopes", JSON, nullable=False),
    Column("state", String(20), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("receipt", JSON, nullable=True),
    Column("ticket", Text, nullable=True),
    Column("peer_id", String(40), nullable=True),
    Column("created_at", TIME, nullable=False),
    Column("expires_at", TIME, nullable=False),
    # An incoming offer's source address (IPv4, IPv6 /64) or, unknown, the sender's ID.
    Column("source", String(64), nullable=True),
)

# Every offer ID ever received or sent, kept after ``forget``: an ID is never reused.
offer_tombstones = Table(
    "offer_tombstones",
    metadata,
    _id(),
    Column("hypernet_id", String(64), nullable=False),
    Column("created_at", TIME, nullable=False),
)

grants = Table(
    "grants",
    metadata,
    _id(),
    _project(),
    Column("peer_id", String(40), nullable=False),
    Column("terms", JSON, nullable=False),
    Column("state", String(20), nullable=False),
    Column("created_at", TIME, nullable=False),
    Column("expires_at", TIME, nullable=False),
    Column("revoked_at", TIME, nullable=True),
    Column("requests_used", BigInteger, nullable=False),
    Column("transfer_bytes_used", BigInteger, nullable=False),
    *token_counts(),
)

remote_grants = Table(
    "remote_grants",
    metadata,
    _id(),
    Column("peer_id", String(40), nullable=False),
    Column("data", JSON, nullable=False),
    Column("refreshed_at", TIME, nullable=False),
)

transfers = Table(
    "transfers",
    metadata,
    _id(),
    _project(),
    Column("peer_id", String(40), nullable=False),
    Column("remote_model", String(40), nullable=False),
    Column("grant_id", String(40), nullable=False),
    Column("manifest", JSON, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("state", String(20), nullable=False),
    Column("files", JSON, nullable=False),
    Column("local_model", String(40), nullable=True),
    Column("error", Text, nullable=True),
    *_stamps(),
)

# The indexes the migrations create, declared here too so that the two agree exactly.
Index("models_by_sha256", models.c.sha256)
Index("audit_by_project", audit_log.c.project, audit_log.c.seq)
Index("audit_by_prev", audit_log.c.prev, unique=True)
Index("services_by_model", services.c.model)
Index("peers_by_hypernet_id", peers.c.hypernet_id)
Index("grants_by_peer", grants.c.peer_id)
Index("transfers_by_model", transfers.c.project, transfers.c.peer_id, transfers.c.remote_model)

leases = Table(
    "leases",
    metadata,
    Column("name", String(40), primary_key=True),
    Column("holder", String(200), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("acquired_at", TIME, nullable=False),
    Column("expires_at", TIME, nullable=False),
)
routes = Table(
    "routes",
    metadata,
    _id(),
    _project(),
    Column("name", String(63), nullable=False),
    Column("spec", JSON, nullable=False),
    *_stamps(),
)
Index("routes_by_project_name", routes.c.project, routes.c.name, unique=True)
