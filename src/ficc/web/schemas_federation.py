"""Response shapes of the Federation API and of usage (grants, usage pages, reconciliation,
offers, peers, transfers), for the OpenAPI document only: see :mod:`ficc.web.schemas_responses`.
"""

from __future__ import annotations

from typing import Any, Literal

from ficc.web.schemas_responses import Shape, Time


class Remaining(Shape):
    requests: int
    transfer_bytes: int
    tokens: int | None


class Used(Shape):
    requests: int
    prompt_tokens: int
    completion_tokens: int
    transfer_bytes: int


class WindowState(Shape):
    used: int
    remaining: int
    reset_seconds: float


class Windows(Shape):
    """The rolling 60 s windows of a grant (null where the grant sets no such rule)."""

    requests_per_minute: WindowState | None
    tokens_per_minute: WindowState | None


class Grant(Shape):
    """A grant this cluster gave: its terms, state and what is left of its allowances."""

    id: str
    peer: str
    state: str
    scopes: list[str]
    services: list[str]
    models: list[str]
    nodes: list[str]
    lifetime: int
    concurrent: int
    requests: int
    transfer_bytes: int
    request_bytes: int
    response_bytes: int
    stop_on_revoke: bool
    tokens: int | None
    tokens_per_minute: int | None
    requests_per_minute: int | None
    created_at: Time
    expires_at: Time
    revoked_at: Time | None
    in_flight: int
    remaining: Remaining
    used: Used
    windows: Windows
    created_services: list[str]
    created_models: list[str]


class UsageRecord(Shape):
    """One federated request as this side saw it (``counted``: the requester's own count;
    ``token``: on the requester, the local token that made it). A restricted token's use of
    a local service has ``grant`` null."""

    request: str
    grant: str | None
    operation: str
    service: str | None
    started_at: Time
    ended_at: Time
    prompt_tokens: int
    completion_tokens: int
    request_bytes: int
    response_bytes: int
    outcome: Literal["completed", "cancelled", "revoked", "failed", "refused"]
    counted: dict[str, int | None] | None = None
    told: bool | None = None
    token: str | None = None
    receipt: dict[str, Any] | None = None
    """Its signed usage receipt: always shown on the requester, on the grantor when asked."""
    verified: bool | None = None
    receipt_problem: str | None = None


class TokenUsagePage(Shape):
    token: str
    records: list[UsageRecord]
    totals: dict[str, Any]
    next: str | None


class UsagePage(Shape):
    grant: str
    side: Literal["grantor", "requester"]
    records: list[UsageRecord]
    totals: dict[str, Any]
    next: str | None


class ReceiptFinding(Shape):
    seq: int
    reason: str


class MissingReceipt(Shape):
    request: str
    outcome: str


class ChainHead(Shape):
    seq: int
    digest: str


class GrantReconciliation(Shape):
    grant: str
    head: ChainHead
    matched: bool
    fetched: int
    missing: list[MissingReceipt]
    invalid: list[ReceiptFinding]


class Reconciliation(Shape):
    grants: list[GrantReconciliation]


class Offer(Shape):
    id: str
    direction: str
    service: str | None
    requester: str | None
    label: str | None
    cluster_key: str | None
    scopes: list[str]
    state: str
    revision: int
    receipt: dict[str, Any] | None
    expires_at: Time
    peer: str | None
    project: str | None


class Peer(Shape):
    id: str
    label: str | None
    hypernet_id: str
    cluster_key: str
    state: str
    role: str
    generation: int
    remote_grants: list[dict[str, Any]]
    selected: str | None
    created_at: Time
    updated_at: Time


class TransferFile(Shape):
    path: str
    size: int
    sha256: str
    bytes_done: int
    verified: bool


class Transfer(Shape):
    id: str
    peer: str
    model: str
    grant: str
    sha256: str
    state: str
    bytes_done: int
    bytes_total: int
    rate_bytes_per_second: int
    files: list[TransferFile]
    local_model: str | None
    error: str | None
    created_at: Time
    updated_at: Time


class Companion(Shape):
    configured: bool
    state: str
    agent_directory: str | None
    hypernet_id: str | None
    addresses: list[str]
    error: str | None


class Identity(Shape):
    label: str
    cluster_key: str
    hypernet_id: str | None
    ticket: str | None


class FederationOverview(Shape):
    companion: Companion
    identity: Identity
    project: str
    peers: list[Peer]
    offers: list[Offer]
    offers_next: str | None
    grants: list[Grant]
    transfers: list[Transfer]
