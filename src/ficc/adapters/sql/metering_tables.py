"""The metering tables: what each grant's and each token's use was, its signed receipts,
the reconciliation reports and the local tokens' limits.

They share :data:`ficc.adapters.sql.tables.metadata`, so the Alembic migrations build them with
the rest of the schema.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Boolean, Column, Index, Integer, String, Table, Text

from ficc.adapters.sql.tables import TIME, metadata, token_counts

usage_records = Table(
    "usage_records",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("grant_id", String(40), nullable=False),
    Column("side", String(20), nullable=False),
    Column("request_id", String(128), nullable=False),
    Column("operation", String(40), nullable=False),
    Column("service", String(40), nullable=True),
    Column("started_at", TIME, nullable=False),
    Column("ended_at", TIME, nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("request_bytes", BigInteger, nullable=False),
    Column("response_bytes", BigInteger, nullable=False),
    Column("outcome", String(20), nullable=False),
    Column("counted_prompt_tokens", BigInteger, nullable=True),
    Column("counted_completion_tokens", BigInteger, nullable=True),
    Column("told", Boolean, nullable=True),
    # The local token that made the request (the requester's records; None where none did).
    Column("token_id", String(40), nullable=True),
    # The grantor's receipt of this record, signed in its transaction (``receipt_seq`` its
    # place in the grant's chain): one row per request, not one more in usage_receipts.
    Column("receipt_seq", BigInteger, nullable=True),
    Column("receipt_digest", String(64), nullable=True),
    Column("receipt", Text, nullable=True),
)

token_limits = Table(
    "token_limits",
    metadata,
    Column("token_id", String(40), primary_key=True),
    # The restricted token that minted this one: its budgets count this one's use too.
    Column("parent", String(40), nullable=True),
    Column("peers", JSON, nullable=True),
    Column("services", JSON, nullable=True),
    Column("tokens", BigInteger, nullable=True),
    Column("tokens_per_minute", BigInteger, nullable=True),
    Column("requests_per_minute", BigInteger, nullable=True),
    Column("requests_used", BigInteger, nullable=False, server_default="0"),
    *token_counts(),
)

usage_receipts = Table(
    "usage_receipts",
    metadata,
    Column("grant_id", String(40), primary_key=True),
    Column("side", String(20), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("request_id", String(128), nullable=False),
    Column("digest", String(64), nullable=False),
    Column("receipt", Text, nullable=False),
    Column("verified", Boolean, nullable=False),
    Column("problem", String(40), nullable=True),
)
"""Each side's usage receipts by grant and seq; ``receipt`` is its RFC 8785 text as it was
signed or received, so an alteration on disk shows in its digest."""

usage_reports = Table(
    "usage_reports",
    metadata,
    Column("grant_id", String(40), primary_key=True),
    Column("peer_id", String(40), nullable=False),
    Column("at", TIME, nullable=False),
    Column("report", JSON, nullable=False),
)
"""The last reconciliation report of each grant this cluster holds."""

receipt_chains = Table(
    "receipt_chains",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("grant_id", String(40), nullable=False),
    Column("peer_id", String(40), nullable=False),
    Column("after", BigInteger, nullable=True),
)
"""What the requester remembers of a grant's chain beside its copy of the grant: each gap it
noticed (receipts to fetch past ``after``), and (``after`` null) that the grant came from the
peer, once the peer lists it no more. Rows are only inserted, never updated, so transactions
noting one grant at once never conflict."""

Index("receipt_chains_by_grant", receipt_chains.c.grant_id)
Index("usage_by_grant", usage_records.c.grant_id, usage_records.c.seq)
Index("usage_by_token", usage_records.c.token_id, usage_records.c.seq)
_SIGNED = usage_records.c.receipt_seq.isnot(None)
for _name, _column in (("receipt", "receipt_seq"), ("receipt_request", "request_id")):
    # The grantor's signed records alone: a grant's chain by seq, and its receipts by request.
    Index(
        f"usage_records_by_{_name}",
        usage_records.c.grant_id,
        usage_records.c.side,
        usage_records.c[_column],
        unique=_column == "receipt_seq",
        sqlite_where=_SIGNED,
        postgresql_where=_SIGNED,
    )
Index(
    "usage_receipts_by_request",
    usage_receipts.c.grant_id,
    usage_receipts.c.side,
    usage_receipts.c.request_id,
)
