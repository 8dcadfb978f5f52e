"""A dict-backed unit of work for the fast tier: every repository of ``ficc.services.ports``.

It behaves as the SQL one does where a service can tell (``tests/unit/contracts/`` runs the
same checks against both): what is not committed is gone, transactions run one at a time (as
on SQLite, which has one writer), unique keys are refused twice, JSON values come back as
JSON would, and lists come back in the order the SQL orders them. Foreign keys are not
checked.

A test may read and write :class:`FakeStore` directly between transactions.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from ficc.base.times import format_stored_time, parse_time
from ficc.domain.accounts import ApiToken, LoginLink, User, WebSession
from ficc.domain.audit import AuditEntry
from ficc.domain.audit_chain import (
    GENESIS,
    TOMBSTONE_ACTION,
    ChainRow,
    SignedHead,
    head_due,
    row_digest,
    sign_head,
    sign_tombstone,
)
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.grants import Grant, GrantState
from ficc.domain.inference import ServiceState
from ficc.domain.lease import Lease
from ficc.domain.metering import (
    HOUR_CHARS,
    GrantStanding,
    UsageQuery,
    UsageRecord,
    bucketed,
    empty_totals,
)
from ficc.domain.mutations import MutationReceipt
from ficc.domain.nodes import Node
from ficc.domain.offers import PURGEABLE_STATES, Offer, OfferDirection, OfferState
from ficc.domain.peers import Peer
from ficc.domain.routes import Route
from ficc.domain.service_records import AttemptRecord, ServiceRecord
from ficc.domain.token_limits import TokenLimit, TokenRestrictions
from ficc.domain.transfers import Transfer
from ficc.domain.usage_receipts import EMPTY_HEAD, Head, StoredReceipt, head_after
from ficc.protocol.signing import Signer
from ficc.services.ports import (
    AttemptsRepository,
    AuditRepository,
    CommitGuard,
    GrantsRepository,
    LeasesRepository,
    LoginLinksRepository,
    ModelsRepository,
    ModelUsage,
    NodesRepository,
    OffersRepository,
    PeersRepository,
    ProjectsRepository,
    ReceiptChainsRepository,
    ReceiptsRepository,
    RemoteGrantsRepository,
    RoutesRepository,
    ServicesRepository,
    SessionsRepository,
    SettingsRepository,
    TokenLimitsRepository,
    TokensRepository,
    TransfersRepository,
    UsageReceiptsRepository,
    UsageRepository,
    UsersRepository,
)


class IntegrityError(Exception):
    """A unique key taken twice: what a database's constraint refuses."""


def _json(value: Any) -> Any:
    """``value`` as a JSON column gives it back: a copy, tuples as lists."""
    return json.loads(json.dumps(value))


@dataclass
class FakeStore:
    """The committed state every fake unit of work starts from: one field per table."""

    users: dict[str, User] = field(default_factory=dict)
    tokens: dict[str, ApiToken] = field(default_factory=dict)
    sessions: dict[str, WebSession] = field(default_factory=dict)
    login_links: dict[str, LoginLink] = field(default_factory=dict)
    projects: dict[str, datetime] = field(default_factory=dict)
    audit_rows: list[ChainRow] = field(default_factory=list)
    """The audit log as stored: content, links and tombstones (see :attr:`audit`)."""
    audit_heads: dict[int, SignedHead] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    models: dict[str, CatalogueModel] = field(default_factory=dict)
    blob_refs: set[tuple[str, str]] = field(default_factory=set)
    services: dict[str, ServiceRecord] = field(default_factory=dict)
    attempts: dict[str, AttemptRecord] = field(default_factory=dict)
    receipts: dict[tuple[str, str], MutationReceipt] = field(default_factory=dict)
    peers: dict[str, Peer] = field(default_factory=dict)
    offers: dict[str, Offer] = field(default_factory=dict)
    offer_tombstones: set[str] = field(default_factory=set)
    grants: dict[str, Grant] = field(default_factory=dict)
    remote_grants: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    """By grant ID: the peer it came from and what the peer said of it."""
    transfers: dict[str, Transfer] = field(default_factory=dict)
    leases: dict[str, Lease] = field(default_factory=dict)
    routes: dict[str, Route] = field(default_factory=dict)
    usage: list[UsageRecord] = field(default_factory=list)
    token_limits: dict[str, TokenLimit] = field(default_factory=dict)
    usage_receipts: dict[tuple[str, str, int], StoredReceipt] = field(default_factory=dict)
    """By (grant, side, seq)."""
    usage_reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    receipt_chains: list[tuple[str, str, int | None]] = field(default_factory=list)
    """(grant, peer, after) as inserted: gaps noticed, and (after None) a grant's peer."""
    state_changes: list[tuple[ServiceState, ServiceState]] = field(default_factory=list)
    """Every committed change of a service's state, as (from, to): the state tables' test."""
    commits: int = field(default=0, metadata={"kept": True})
    receipt_reads: list[int] = field(default_factory=list, metadata={"kept": True})
    """Receipt reads of each transaction, in the order they ended."""
    writer: asyncio.Lock = field(default_factory=asyncio.Lock, metadata={"kept": True})

    @property
    def audit(self) -> list[AuditEntry]:
        """The audit log's entries, a tombstone as an entry of action ``audit.tombstone``."""
        return [_entry_of(row) for row in self.audit_rows]

    def snapshot(self) -> dict[str, Any]:
        """The tables as they are now, to go back to on rollback."""
        tables = [f.name for f in fields(self) if "kept" not in f.metadata]
        return {name: copy.copy(getattr(self, name)) for name in tables}

    def restore(self, snapshot: dict[str, Any]) -> None:
        for name, value in snapshot.items():
            setattr(self, name, value)


def _entry_of(row: ChainRow) -> AuditEntry:
    if row.entry is not None:
        return row.entry
    return AuditEntry(
        action=TOMBSTONE_ACTION,
        actor="",
        project=None,
        target=None,
        at=parse_time(row.at),
        seq=row.seq,
    )


class _Repository:
    def __init__(self, store: FakeStore) -> None:
        self._s = store


class FakeUsers(_Repository):
    async def add(self, user: User) -> None:
        taken = {u.username for u in self._s.users.values()}
        if user.id in self._s.users or user.username in taken:
            raise IntegrityError(user.id)
        self._s.users[user.id] = user

    async def get(self, user_id: str) -> User | None:
        return self._s.users.get(user_id)

    async def by_username(self, username: str) -> User | None:
        return next((u for u in self._s.users.values() if u.username == username), None)

    async def owner(self) -> User | None:
        return next((u for u in self._s.users.values() if u.is_owner), None)

    async def set_password_hash(self, user_id: str, password_hash: str) -> None:
        if (user := self._s.users.get(user_id)) is not None:
            self._s.users[user_id] = replace(user, password_hash=password_hash)


class FakeTokens(_Repository):
    async def add(self, token: ApiToken) -> None:
        hashes = {t.secret_hash for t in self._s.tokens.values()}
        if token.id in self._s.tokens or token.secret_hash in hashes:
            raise IntegrityError(token.id)
        self._s.tokens[token.id] = token

    async def get(self, token_id: str) -> ApiToken | None:
        return self._s.tokens.get(token_id)

    async def by_secret_hash(self, secret_hash: str) -> ApiToken | None:
        return next((t for t in self._s.tokens.values() if t.secret_hash == secret_hash), None)

    async def list(self) -> list[ApiToken]:
        return sorted(self._s.tokens.values(), key=lambda t: t.created_at)

    async def revoke(self, token_id: str, at: datetime) -> None:
        token = self._s.tokens.get(token_id)
        if token is not None and token.revoked_at is None:
            self._s.tokens[token_id] = replace(token, revoked_at=at)

    async def revoke_minted_by(self, token_id: str, at: datetime) -> Sequence[str]:
        revoked: list[str] = []
        seen = {token_id}
        level = [token_id]
        while level:
            children = sorted(
                (t for t in self._s.tokens.values() if t.created_by in level and t.id not in seen),
                key=lambda t: (t.created_at, t.id),
            )
            live = [t.id for t in children if t.revoked_at is None]
            for child in live:
                self._s.tokens[child] = replace(self._s.tokens[child], revoked_at=at)
            revoked += live
            level = [t.id for t in children]
            seen.update(level)
        return revoked

    async def lock(self, token_id: str) -> None:
        """One writer at a time already: nothing more to hold."""

    async def mark_owner(self, secret_hash: str) -> bool:
        token = await self.by_secret_hash(secret_hash)
        if token is None or token.revoked_at is not None or token.owner:
            return False
        self._s.tokens[token.id] = replace(token, owner=True)
        return True


class FakeSessions(_Repository):
    async def add(self, session: WebSession) -> None:
        hashes = {s.secret_hash for s in self._s.sessions.values()}
        if session.id in self._s.sessions or session.secret_hash in hashes:
            raise IntegrityError(session.id)
        self._s.sessions[session.id] = session

    async def by_secret_hash(self, secret_hash: str) -> WebSession | None:
        return next((s for s in self._s.sessions.values() if s.secret_hash == secret_hash), None)

    async def delete(self, session_id: str) -> None:
        self._s.sessions.pop(session_id, None)

    async def delete_for_user(self, user_id: str, *, keep: str | None) -> int:
        ended = [s.id for s in self._s.sessions.values() if s.user_id == user_id and s.id != keep]
        for session_id in ended:
            del self._s.sessions[session_id]
        return len(ended)

    async def purge(self, *, now: datetime) -> int:
        ended = [s.id for s in self._s.sessions.values() if s.expires_at <= now]
        for session_id in ended:
            del self._s.sessions[session_id]
        return len(ended)


class FakeLoginLinks(_Repository):
    async def add(self, link: LoginLink) -> None:
        hashes = {k.secret_hash for k in self._s.login_links.values()}
        if link.id in self._s.login_links or link.secret_hash in hashes:
            raise IntegrityError(link.id)
        self._s.login_links[link.id] = link

    async def by_secret_hash(self, secret_hash: str) -> LoginLink | None:
        links = self._s.login_links.values()
        return next((k for k in links if k.secret_hash == secret_hash), None)

    async def mark_used(self, link_id: str, at: datetime) -> bool:
        link = self._s.login_links.get(link_id)
        if link is None or link.used_at is not None:
            return False
        self._s.login_links[link_id] = replace(link, used_at=at)
        return True

    async def purge(self, *, now: datetime) -> int:
        links = self._s.login_links.values()
        ended = [k.id for k in links if k.used_at is not None or k.expires_at <= now]
        for link_id in ended:
            del self._s.login_links[link_id]
        return len(ended)


class FakeProjects(_Repository):
    async def add(self, name: str, at: datetime) -> None:
        if name in self._s.projects:
            raise IntegrityError(name)
        self._s.projects[name] = at

    async def exists(self, name: str) -> bool:
        return name in self._s.projects

    async def list(self) -> list[tuple[str, datetime]]:
        return sorted(self._s.projects.items())


class FakeAudit(_Repository):
    """The chain as SQL keeps it: the writer lock serialises appends, as on SQLite."""

    def __init__(self, store: FakeStore, signer: Signer | None) -> None:
        super().__init__(store)
        self._signer = signer

    def _last(self) -> tuple[int, str]:
        rows = self._s.audit_rows
        return (0, GENESIS) if not rows else (rows[-1].seq, rows[-1].digest or "")

    async def append(self, entry: AuditEntry) -> int:
        last_seq, prev = self._last()
        seq = last_seq + 1
        if any(row.prev == prev for row in self._s.audit_rows):
            raise IntegrityError(f"an audit row follows {prev} already")
        at = format_stored_time(entry.at)
        stored = replace(entry, seq=seq, at=parse_time(at), details=_json(entry.details))
        digest = row_digest(stored, seq=seq, prev=prev, at=at)
        self._s.audit_rows.append(ChainRow(seq, at, prev, digest, stored))
        if self._signer is not None and head_due(seq):
            self._s.audit_heads[seq] = SignedHead(
                seq, digest, sign_head(seq, digest, self._signer.sign)
            )
        return seq

    async def chain(self, *, after_seq: int, limit: int) -> Sequence[ChainRow]:
        return [row for row in self._s.audit_rows if row.seq > after_seq][:limit]

    async def end(self) -> int:
        return self._last()[0]

    async def heads(self) -> Sequence[SignedHead]:
        return [self._s.audit_heads[seq] for seq in sorted(self._s.audit_heads)]

    async def naming(self, project: str, targets: Collection[str]) -> Sequence[int]:
        return [
            row.seq
            for row in self._s.audit_rows
            if row.entry is not None
            and row.entry.project in (project, None)
            and row.entry.target in targets
        ]

    async def tombstone(self, seqs: Collection[int], at: datetime) -> Sequence[int]:
        signer = self._required()
        stamp = format_stored_time(at)
        done = []
        for index, row in enumerate(self._s.audit_rows):
            if row.seq in seqs and row.tombstone is None:
                assert row.prev is not None
                assert row.digest is not None
                signature = sign_tombstone(
                    seq=row.seq, prev=row.prev, digest=row.digest, at=stamp, sign=signer.sign
                )
                self._s.audit_rows[index] = ChainRow(
                    row.seq, stamp, row.prev, row.digest, None, tombstone=signature
                )
                done.append(row.seq)
        return done

    async def seal(self) -> int | None:
        signer = self._required()
        seq, digest = self._last()
        if self._s.audit_heads or seq == 0:
            return None
        self._s.audit_heads[seq] = SignedHead(seq, digest, sign_head(seq, digest, signer.sign))
        return seq

    def _required(self) -> Signer:
        if self._signer is None:
            raise RuntimeError("this unit of work has no cluster key to sign the audit log with")
        return self._signer

    async def list(
        self, *, project: str | None, after_seq: int, limit: int, cluster_wide: bool = True
    ) -> list[AuditEntry]:
        entries = [
            entry for entry in self._s.audit if entry.seq is not None and entry.seq > after_seq
        ]
        if project is not None:
            entries = [
                e for e in entries if e.project == project or (cluster_wide and e.project is None)
            ]
        return entries[:limit]


class FakeSettings(_Repository):
    async def get(self, key: str) -> Any | None:
        return _json(self._s.settings[key]) if key in self._s.settings else None

    async def put(self, key: str, value: Any) -> None:
        self._s.settings[key] = _json(value)

    async def lock(self, key: str) -> None:
        return None  # one transaction at a time


class FakeNodes(_Repository):
    async def upsert(self, node: Node) -> None:
        self._s.nodes[node.id] = node

    async def get(self, node_id: str) -> Node | None:
        return self._s.nodes.get(node_id)

    async def list(self) -> list[Node]:
        return sorted(self._s.nodes.values(), key=lambda node: node.name)


class FakeModels(_Repository):
    async def add(self, model: CatalogueModel) -> None:
        if model.id in self._s.models:
            raise IntegrityError(model.id)
        self._s.models[model.id] = model

    async def get(self, model_id: str) -> CatalogueModel | None:
        return self._s.models.get(model_id)

    async def list(self, project: str) -> list[CatalogueModel]:
        mine = [m for m in self._s.models.values() if m.project == project]
        return sorted(mine, key=lambda m: (m.created_at, m.id))

    async def delete(self, model_id: str) -> None:
        self._s.models.pop(model_id, None)

    async def blob_in_use(self, sha256: str) -> bool:
        return any(sha256 in m.blob_digests() for m in self._s.models.values())

    async def own_blobs(self, project: str, digests: Sequence[str]) -> None:
        self._s.blob_refs.update((project, digest) for digest in digests)

    async def owns_blobs(self, project: str, digests: Sequence[str]) -> bool:
        return all((project, digest) in self._s.blob_refs for digest in digests)

    async def release_blobs(self, project: str, digests: Sequence[str]) -> None:
        named = {
            digest
            for m in self._s.models.values()
            if m.project == project and m.created_by_grant is None
            for digest in m.blob_digests()
        }
        self._s.blob_refs.difference_update((project, d) for d in digests if d not in named)


class FakeModelUsage(_Repository):
    async def users_of_model(self, model_id: str) -> Sequence[str]:
        return [s.id for s in self._s.services.values() if s.spec.model == model_id]


class FakeServices(_Repository):
    async def add(self, service: ServiceRecord) -> None:
        if service.id in self._s.services:
            raise IntegrityError(service.id)
        self._s.services[service.id] = service

    async def get(self, service_id: str) -> ServiceRecord | None:
        return self._s.services.get(service_id)

    async def list_all(self) -> list[ServiceRecord]:
        return sorted(self._s.services.values(), key=lambda s: s.created_at)

    async def list(self, project: str) -> list[ServiceRecord]:
        mine = [s for s in self._s.services.values() if s.project == project]
        return sorted(mine, key=lambda s: (s.created_at, s.id))

    async def update(self, service: ServiceRecord) -> None:
        before = self._s.services.get(service.id)
        if before is not None:
            if before.state is not service.state:
                self._s.state_changes.append((before.state, service.state))
            self._s.services[service.id] = service

    async def delete(self, service_id: str) -> None:
        self._s.services.pop(service_id, None)


class FakeAttempts(_Repository):
    async def add(self, attempt: AttemptRecord) -> None:
        if attempt.id in self._s.attempts:
            raise IntegrityError(attempt.id)
        self._s.attempts[attempt.id] = attempt

    async def get(self, attempt_id: str) -> AttemptRecord | None:
        return self._s.attempts.get(attempt_id)

    async def for_service(self, service_id: str) -> list[AttemptRecord]:
        mine = [a for a in self._s.attempts.values() if a.service_id == service_id]
        return sorted(mine, key=lambda a: a.created_at)

    async def update(self, attempt: AttemptRecord) -> None:
        if attempt.id in self._s.attempts:
            self._s.attempts[attempt.id] = attempt

    async def delete_for_service(self, service_id: str) -> None:
        for attempt in await self.for_service(service_id):
            del self._s.attempts[attempt.id]

    async def delete(self, attempt_id: str) -> None:
        self._s.attempts.pop(attempt_id, None)


class FakeReceipts(_Repository):
    """Counts its reads, so a test can hold a service to "read once per transaction"."""

    reads = 0

    async def get(self, scope: str, mutation_id: str) -> MutationReceipt | None:
        self.reads += 1
        return self._s.receipts.get((scope, mutation_id))

    async def put(self, receipt: MutationReceipt) -> None:
        result = None if receipt.result is None else _json(receipt.result)
        self._s.receipts[(receipt.scope, receipt.mutation_id)] = replace(receipt, result=result)

    async def delete_scope(self, scope: str) -> None:
        for key in [key for key in self._s.receipts if key[0] == scope]:
            del self._s.receipts[key]

    async def delete(self, scope: str, mutation_id: str) -> None:
        self._s.receipts.pop((scope, mutation_id), None)

    async def count(self, scope: str, operation: str, state: str) -> int:
        return sum(
            1
            for (s, _), r in self._s.receipts.items()
            if s == scope and r.operation == operation and r.state == state
        )


class FakePeers(_Repository):
    async def add(self, peer: Peer) -> None:
        if peer.id in self._s.peers:
            raise IntegrityError(peer.id)
        self._s.peers[peer.id] = peer

    async def update(self, peer: Peer) -> None:
        if peer.id in self._s.peers:
            self._s.peers[peer.id] = peer

    async def get(self, peer_id: str) -> Peer | None:
        return self._s.peers.get(peer_id)

    async def by_hypernet_id(self, hypernet_id: str) -> list[Peer]:
        return [p for p in self._s.peers.values() if p.hypernet_id == hypernet_id]

    async def in_project(self, project: str) -> list[Peer]:
        mine = [p for p in self._s.peers.values() if p.project == project]
        return sorted(mine, key=lambda p: p.created_at)

    async def delete(self, peer_id: str) -> None:
        self._s.peers.pop(peer_id, None)


class FakeOffers(_Repository):
    async def add(self, offer: Offer) -> None:
        if offer.id in self._s.offers or offer.id in self._s.offer_tombstones:
            raise IntegrityError(offer.id)
        self._s.offers[offer.id] = offer
        self._s.offer_tombstones.add(offer.id)

    async def update(self, offer: Offer) -> None:
        if offer.id in self._s.offers:
            self._s.offers[offer.id] = offer

    async def get(self, offer_id: str) -> Offer | None:
        return self._s.offers.get(offer_id)

    async def lock(self, offer_id: str) -> None:
        return None  # one transaction at a time

    async def visible_to(
        self, project: str, *, after: str | None = None, limit: int | None = None
    ) -> list[Offer]:
        seen = [o for o in self._s.offers.values() if o.project in (project, None)]
        seen.sort(key=lambda o: (o.created_at, o.id))
        start = None if after is None else self._s.offers.get(after)
        if start is not None:
            seen = [o for o in seen if (o.created_at, o.id) > (start.created_at, start.id)]
        return seen if limit is None else seen[:limit]

    async def of_peer(self, peer_id: str) -> list[Offer]:
        return [o for o in self._s.offers.values() if o.peer_id == peer_id]

    async def delete(self, offer_id: str) -> None:
        self._s.offers.pop(offer_id, None)

    async def ever_used(self, offer_id: str) -> bool:
        return offer_id in self._s.offer_tombstones

    def _waiting(self, now: datetime, service: str | None, source: str | None) -> list[Offer]:
        """Incoming offers not yet approved nor expired, of ``service``/``source`` if given,
        oldest first."""
        waiting = [
            o
            for o in self._s.offers.values()
            if o.direction == OfferDirection.INCOMING
            and o.state == OfferState.RECEIVED
            and o.expires_at > now
            and (service is None or o.other_hypernet_id == service)
            and (source is None or (o.source or o.other_hypernet_id) == source)
        ]
        return sorted(waiting, key=lambda o: (o.created_at, o.id))

    async def count_received(
        self, *, now: datetime, service: str | None = None, source: str | None = None
    ) -> int:
        return len(self._waiting(now, service, source))

    async def oldest_received(
        self, *, now: datetime, service: str | None = None, source: str | None = None
    ) -> Offer | None:
        return next(iter(self._waiting(now, service, source)), None)

    async def busiest_source(self, *, now: datetime) -> str | None:
        waiting = self._waiting(now, None, None)
        counts = Counter(o.source or o.other_hypernet_id for o in waiting)
        first: dict[str, datetime] = {}
        for offer in waiting:
            first.setdefault(offer.source or offer.other_hypernet_id, offer.created_at)
        return min(counts, key=lambda s: (-counts[s], first[s]), default=None)

    async def purge(self, *, expired_before: datetime) -> int:
        gone = [
            o.id
            for o in self._s.offers.values()
            if o.state in PURGEABLE_STATES and o.expires_at < expired_before
        ]
        for offer_id in gone:
            del self._s.offers[offer_id]
        return len(gone)


class FakeGrants(_Repository):
    def _load(self, grant: Grant) -> Grant:
        """The grant with the records it created, as the SQL reads them."""
        return replace(
            grant,
            created_services=frozenset(
                s.id for s in self._s.services.values() if s.created_by_grant == grant.id
            ),
            created_models=frozenset(
                m.id for m in self._s.models.values() if m.created_by_grant == grant.id
            ),
        )

    def _sorted(self, grants: list[Grant]) -> list[Grant]:
        return [self._load(g) for g in sorted(grants, key=lambda g: g.created_at)]

    async def add(self, grant: Grant) -> None:
        if grant.id in self._s.grants:
            raise IntegrityError(grant.id)
        self._s.grants[grant.id] = replace(
            grant, created_services=frozenset(), created_models=frozenset()
        )

    async def get(self, grant_id: str) -> Grant | None:
        grant = self._s.grants.get(grant_id)
        return None if grant is None else self._load(grant)

    async def of_peer(self, peer_id: str) -> list[Grant]:
        return self._sorted([g for g in self._s.grants.values() if g.peer_id == peer_id])

    async def in_project(self, project: str) -> list[Grant]:
        return self._sorted([g for g in self._s.grants.values() if g.project == project])

    async def set_state(self, grant_id: str, state: GrantState, at: datetime | None) -> None:
        grant = self._s.grants.get(grant_id)
        if grant is not None:
            revoked_at = grant.revoked_at if at is None else at
            self._s.grants[grant_id] = replace(grant, state=state, revoked_at=revoked_at)

    async def charge_request(self, grant_id: str, *, requests: int) -> bool:
        grant = self._s.grants.get(grant_id)
        if grant is None or grant.requests_used >= requests:
            return False
        self._s.grants[grant_id] = replace(grant, requests_used=grant.requests_used + 1)
        return True

    async def charge(self, grant_id: str, *, requests: int, transfer_bytes: int) -> None:
        grant = self._s.grants.get(grant_id)
        if grant is not None:
            self._s.grants[grant_id] = replace(
                grant,
                requests_used=grant.requests_used + requests,
                transfer_bytes_used=grant.transfer_bytes_used + transfer_bytes,
            )

    async def lock(self, grant_id: str) -> None:
        return None  # one transaction at a time

    async def delete(self, grant_id: str) -> None:
        self._s.grants.pop(grant_id, None)


class FakeRemoteGrants(_Repository):
    async def replace_for_peer(
        self, peer_id: str, grants: list[dict[str, Any]], at: datetime
    ) -> None:
        await self.delete_for_peer(peer_id)
        for grant in grants:
            if grant["id"] in self._s.remote_grants:
                raise IntegrityError(grant["id"])
            self._s.remote_grants[grant["id"]] = (peer_id, _json(grant))

    async def of_peer(self, peer_id: str) -> list[dict[str, Any]]:
        return [_json(data) for owner, data in self._s.remote_grants.values() if owner == peer_id]

    async def delete_for_peer(self, peer_id: str) -> None:
        for grant_id in [k for k, (owner, _) in self._s.remote_grants.items() if owner == peer_id]:
            del self._s.remote_grants[grant_id]


class FakeTransfers(_Repository):
    async def add(self, transfer: Transfer) -> None:
        if transfer.id in self._s.transfers:
            raise IntegrityError(transfer.id)
        self._s.transfers[transfer.id] = transfer

    async def update(self, transfer: Transfer) -> None:
        if transfer.id in self._s.transfers:
            self._s.transfers[transfer.id] = transfer

    async def get(self, transfer_id: str) -> Transfer | None:
        return self._s.transfers.get(transfer_id)

    async def of_model(self, project: str, peer_id: str, remote_model: str) -> Transfer | None:
        matching = [
            t
            for t in self._s.transfers.values()
            if (t.project, t.peer_id, t.remote_model) == (project, peer_id, remote_model)
        ]
        return max(matching, key=lambda t: t.created_at, default=None)

    async def in_project(self, project: str) -> list[Transfer]:
        mine = [t for t in self._s.transfers.values() if t.project == project]
        return sorted(mine, key=lambda t: t.created_at)

    async def in_state(self, state: str) -> list[Transfer]:
        return [t for t in self._s.transfers.values() if t.state == state]


class FakeLeases(_Repository):
    """Transactions run one at a time here: holding the row is holding the writer."""

    async def get(self, name: str, *, for_update: bool = False) -> Lease | None:
        return self._s.leases.get(name)

    async def put(self, lease: Lease, *, expected_epoch: int | None) -> bool:
        stored = self._s.leases.get(lease.name)
        if (None if stored is None else stored.epoch) != expected_epoch:
            return False
        self._s.leases = {**self._s.leases, lease.name: lease}
        return True


class FakeRoutes(_Repository):
    async def add(self, route: Route) -> None:
        if route.id in self._s.routes or await self.by_name(route.project, route.name):
            raise IntegrityError(f"route {route.id} or its name exists")
        self._s.routes[route.id] = route

    async def get(self, route_id: str) -> Route | None:
        return self._s.routes.get(route_id)

    async def by_name(self, project: str, name: str) -> Route | None:
        for route in self._s.routes.values():
            if route.project == project and route.name == name:
                return route
        return None

    async def list(self, project: str) -> list[Route]:
        mine = [r for r in self._s.routes.values() if r.project == project]
        return sorted(mine, key=lambda r: r.name)

    async def update(self, route: Route) -> None:
        other = await self.by_name(route.project, route.name)
        if other is not None and other.id != route.id:
            raise IntegrityError(f"route name {route.name} exists")
        if route.id in self._s.routes:
            self._s.routes[route.id] = route

    async def delete(self, route_id: str) -> None:
        self._s.routes.pop(route_id, None)


class FakeUsage(_Repository):
    """Reservations on the grant records, and the usage records in order of arrival."""

    async def reserve_tokens(self, grant_id: str, tokens: int, *, limit: int | None) -> bool:
        grant = self._s.grants.get(grant_id)
        if grant is None:
            return False
        if limit is not None and grant.tokens_used + grant.tokens_reserved + tokens > limit:
            return False
        self._s.grants[grant_id] = replace(grant, tokens_reserved=grant.tokens_reserved + tokens)
        return True

    async def settle_tokens(
        self, grant_id: str, *, reserved: int, prompt_tokens: int, completion_tokens: int
    ) -> None:
        grant = self._s.grants.get(grant_id)
        if grant is not None:
            self._s.grants[grant_id] = replace(
                grant,
                tokens_reserved=max(grant.tokens_reserved - reserved, 0),
                prompt_tokens_used=grant.prompt_tokens_used + prompt_tokens,
                completion_tokens_used=grant.completion_tokens_used + completion_tokens,
            )

    async def settle_and_stand(
        self, grant_id: str, *, reserved: int, prompt_tokens: int, completion_tokens: int
    ) -> GrantStanding | None:
        await self.settle_tokens(
            grant_id,
            reserved=reserved,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
        return await self.standing(grant_id)

    async def clear_reservations(self) -> None:
        for grant_id, grant in list(self._s.grants.items()):
            if grant.tokens_reserved:
                self._s.grants[grant_id] = replace(grant, tokens_reserved=0)

    async def standing(self, grant_id: str) -> GrantStanding | None:
        grant = self._s.grants.get(grant_id)
        if grant is None:
            return None
        return GrantStanding(
            requests_used=grant.requests_used,
            transfer_bytes_used=grant.transfer_bytes_used,
            prompt_tokens_used=grant.prompt_tokens_used,
            completion_tokens_used=grant.completion_tokens_used,
            tokens_reserved=grant.tokens_reserved,
        )

    async def add(self, record: UsageRecord) -> None:
        self._s.usage = [*self._s.usage, replace(record, seq=len(self._s.usage) + 1)]

    async def of_requests(
        self, grant_id: str, side: str, requests: list[str]
    ) -> dict[str, UsageRecord]:
        wanted = set(requests)
        found: dict[str, UsageRecord] = {}
        for r in reversed(self._s.usage):
            if r.grant == grant_id and r.side == side and r.request in wanted:
                found[r.request] = r
        return found

    async def page(
        self, query: UsageQuery, *, after: int | None = None, limit: int
    ) -> list[UsageRecord]:
        found = [r for r in self._s.usage if query.holds(r)]
        return [r for r in found if after is None or r.seq > after][:limit]

    async def totals(self, query: UsageQuery) -> dict[str, Any]:
        return _totals([r for r in self._s.usage if query.holds(r)])


def _totals(records: list[UsageRecord]) -> dict[str, Any]:
    """Sums over ``records``, per hour, per day and whole, as the SQL groups them."""
    hours: dict[str, dict[str, int]] = {}
    for r in records:
        key = format_stored_time(r.started_at)[:HOUR_CHARS]
        sums = hours.setdefault(key, empty_totals())
        sums["requests"] += 1
        sums["prompt_tokens"] += r.prompt_tokens
        sums["completion_tokens"] += r.completion_tokens
        sums["request_bytes"] += r.request_bytes
        sums["response_bytes"] += r.response_bytes
    return bucketed(sorted(hours.items()))


class FakeTokenLimits(_Repository):
    """Restricted tokens' rows, reserved and settled as the grants' are."""

    async def add(self, token_id: str, restrictions: TokenRestrictions) -> None:
        if token_id in self._s.token_limits:
            raise IntegrityError(f"token_limits.token_id {token_id}")
        self._s.token_limits = {
            **self._s.token_limits,
            token_id: TokenLimit(token_id, restrictions, GrantStanding(0, 0, 0, 0, 0)),
        }

    async def get(self, token_id: str) -> TokenLimit | None:
        return self._s.token_limits.get(token_id)

    async def of_tokens(self, token_ids: Collection[str]) -> dict[str, TokenLimit]:
        return {i: self._s.token_limits[i] for i in token_ids if i in self._s.token_limits}

    def _put(self, row: TokenLimit, standing: GrantStanding) -> None:
        self._s.token_limits = {
            **self._s.token_limits,
            row.token_id: replace(row, standing=standing),
        }

    async def reserve_tokens(self, token_id: str, tokens: int, *, limit: int | None) -> bool:
        row = self._s.token_limits.get(token_id)
        if row is None:
            return False
        s = row.standing
        used = s.prompt_tokens_used + s.completion_tokens_used + s.tokens_reserved
        if limit is not None and used + tokens > limit:
            return False
        self._put(row, replace(s, tokens_reserved=s.tokens_reserved + tokens))
        return True

    async def settle_tokens(
        self, token_id: str, *, reserved: int, prompt_tokens: int, completion_tokens: int
    ) -> None:
        row = self._s.token_limits.get(token_id)
        if row is not None:
            s = row.standing
            self._put(
                row,
                replace(
                    s,
                    requests_used=s.requests_used + 1,
                    tokens_reserved=max(s.tokens_reserved - reserved, 0),
                    prompt_tokens_used=s.prompt_tokens_used + prompt_tokens,
                    completion_tokens_used=s.completion_tokens_used + completion_tokens,
                ),
            )

    async def standing(self, token_id: str) -> GrantStanding | None:
        row = self._s.token_limits.get(token_id)
        return None if row is None else row.standing

    async def clear_reservations(self) -> None:
        for row in list(self._s.token_limits.values()):
            if row.standing.tokens_reserved:
                self._put(row, replace(row.standing, tokens_reserved=0))

    async def usage_page(
        self, token_id: str, *, after: int | None = None, limit: int
    ) -> list[UsageRecord]:
        found = [r for r in self._s.usage if r.token == token_id]
        return [r for r in found if after is None or r.seq > after][:limit]

    async def usage_totals(self, token_id: str) -> dict[str, Any]:
        return _totals([r for r in self._s.usage if r.token == token_id])


class FakeUsageReceipts(_Repository):
    """Receipts by (grant, side, seq), as the SQL table keys them."""

    def _of(self, grant_id: str, side: str) -> list[StoredReceipt]:
        found = [
            r for (g, s, _), r in self._s.usage_receipts.items() if g == grant_id and s == side
        ]
        return sorted(found, key=lambda r: r.seq)

    async def head(self, grant_id: str, side: str) -> Head:
        kept = self._of(grant_id, side)
        if not kept:
            return EMPTY_HEAD
        last = kept[-1]
        try:
            return head_after(last.receipt)
        except (ValueError, KeyError, TypeError, AttributeError):
            return Head(last.seq, last.digest, {})

    async def add(self, receipt: StoredReceipt) -> bool:
        key = (receipt.grant, receipt.side, receipt.seq)
        if key in self._s.usage_receipts:
            return False
        self._s.usage_receipts[key] = replace(receipt, receipt=_json(dict(receipt.receipt)))
        return True

    async def append(self, receipt: StoredReceipt) -> None:
        if not await self.add(receipt):
            raise IntegrityError(f"receipt {receipt.seq} of {receipt.grant} exists")

    async def append_after(self, receipt: StoredReceipt, head: Head) -> bool:
        kept = self._of(receipt.grant, receipt.side)
        last = (kept[-1].seq, kept[-1].digest) if kept else (0, EMPTY_HEAD.digest)
        if last != (head.seq, head.digest):
            return False
        return await self.add(receipt)

    async def add_signed(
        self, record: UsageRecord, receipt: StoredReceipt, head: Head | None
    ) -> bool:
        if head is None:
            await self.append(receipt)
        elif not await self.append_after(receipt, head):
            return False
        self._s.usage = [*self._s.usage, replace(record, seq=len(self._s.usage) + 1)]
        return True

    async def page(
        self, grant_id: str, side: str, *, after: int, limit: int
    ) -> list[StoredReceipt]:
        return [r for r in self._of(grant_id, side) if r.seq > after][:limit]

    async def of_requests(
        self, grant_id: str, side: str, requests: list[str]
    ) -> dict[str, StoredReceipt]:
        wanted = set(requests)
        found: dict[str, StoredReceipt] = {}
        for r in reversed(self._of(grant_id, side)):
            if r.request in wanted:
                found[r.request] = r
        return found

    async def mark(self, grant_id: str, side: str, seq: int, problem: str | None) -> None:
        key = (grant_id, side, seq)
        if (kept := self._s.usage_receipts.get(key)) is not None:
            self._s.usage_receipts[key] = replace(kept, verified=problem is None, problem=problem)

    async def save_report(
        self, grant_id: str, peer_id: str, at: datetime, report: dict[str, Any]
    ) -> None:
        self._s.usage_reports[grant_id] = _json(report)

    async def last_report(self, grant_id: str) -> dict[str, Any] | None:
        report = self._s.usage_reports.get(grant_id)
        return None if report is None else _json(report)


class FakeReceiptChains(_Repository):
    """Rows only inserted and deleted, as the SQL table's are."""

    async def note(self, grant_id: str, peer_id: str, after: int | None) -> None:
        self._s.receipt_chains.append((grant_id, peer_id, after))

    async def behind(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for grant_id, _, after in self._s.receipt_chains:
            if after is not None:
                found[grant_id] = min(found.get(grant_id, after), after)
        return found

    async def caught_up(self, grant_id: str) -> None:
        self._s.receipt_chains = [
            row for row in self._s.receipt_chains if row[0] != grant_id or row[2] is None
        ]

    async def of_peer(self, peer_id: str) -> list[str]:
        return sorted({grant for grant, peer, _ in self._s.receipt_chains if peer == peer_id})


class FakeUnitOfWork:
    """One transaction: it holds the store's writer from enter to exit, and puts back what it
    found unless it committed (or its guard refused the commit)."""

    def __init__(
        self,
        store: FakeStore,
        guard: CommitGuard | None = None,
        audit_signer: Signer | None = None,
    ) -> None:
        self._store = store
        self._guard = guard
        self._begun: dict[str, Any] | None = None
        self.users: UsersRepository = FakeUsers(store)
        self.tokens: TokensRepository = FakeTokens(store)
        self.sessions: SessionsRepository = FakeSessions(store)
        self.login_links: LoginLinksRepository = FakeLoginLinks(store)
        self.projects: ProjectsRepository = FakeProjects(store)
        self.audit: AuditRepository = FakeAudit(store, audit_signer)
        self.settings: SettingsRepository = FakeSettings(store)
        self.nodes: NodesRepository = FakeNodes(store)
        self.models: ModelsRepository = FakeModels(store)
        self.model_usage: ModelUsage = FakeModelUsage(store)
        self.services: ServicesRepository = FakeServices(store)
        self.attempts: AttemptsRepository = FakeAttempts(store)
        self._receipts = FakeReceipts(store)
        self.receipts: ReceiptsRepository = self._receipts
        self.peers: PeersRepository = FakePeers(store)
        self.offers: OffersRepository = FakeOffers(store)
        self.grants: GrantsRepository = FakeGrants(store)
        self.remote_grants: RemoteGrantsRepository = FakeRemoteGrants(store)
        self.transfers: TransfersRepository = FakeTransfers(store)
        self.leases: LeasesRepository = FakeLeases(store)
        self.routes: RoutesRepository = FakeRoutes(store)
        self.usage: UsageRepository = FakeUsage(store)
        self.token_limits: TokenLimitsRepository = FakeTokenLimits(store)
        self.usage_receipts: UsageReceiptsRepository = FakeUsageReceipts(store)
        self.receipt_chains: ReceiptChainsRepository = FakeReceiptChains(store)

    async def __aenter__(self) -> Self:
        await self._store.writer.acquire()
        self._begun = self._store.snapshot()
        return self

    async def commit(self) -> None:
        if self._begun is None:
            raise RuntimeError("the unit of work is not open")
        if self._guard is not None:
            await self._guard.check(self.leases)
        self._begun = self._store.snapshot()
        self._store.commits += 1

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Anything not committed is put back as it was."""
        try:
            if self._begun is not None:
                self._store.restore(self._begun)
            self._store.receipt_reads.append(self._receipts.reads)
        finally:
            self._begun = None
            self._store.writer.release()


class FakeUnitOfWorkFactory:
    """Makes fake units of work over one shared :class:`FakeStore`."""

    def __init__(
        self,
        store: FakeStore | None = None,
        guard: CommitGuard | None = None,
        *,
        audit_signer: Signer | None = None,
    ) -> None:
        self.store = store or FakeStore()
        self.guard = guard
        self._audit_signer = audit_signer

    def __call__(self) -> FakeUnitOfWork:
        return FakeUnitOfWork(self.store, self.guard, self._audit_signer)

    def signed_by(self, signer: Signer) -> FakeUnitOfWorkFactory:
        """The same store and guard, signing the audit log with ``signer``."""
        return FakeUnitOfWorkFactory(self.store, self.guard, audit_signer=signer)
