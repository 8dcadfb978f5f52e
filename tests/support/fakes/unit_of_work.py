"""A dict-backed unit of work for service tests: commits together or not at all, like SQL.

It holds the repositories the inference and node services use (projects, audit, settings,
nodes, models, services, attempts, receipts). Each unit of work works on a copy of the store
and writes it back only on ``commit``, so a refused change leaves the store as it was, as a
rollback does.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from ficc.domain.audit import AuditEntry
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.inference import ServiceState
from ficc.domain.nodes import Node
from ficc.domain.service_records import AttemptRecord, MutationReceipt, ServiceRecord


class IntegrityError(Exception):
    """A unique key taken twice: what a database's constraint refuses."""


@dataclass
class FakeStore:
    """The committed state every fake unit of work starts from."""

    projects: dict[str, datetime] = field(default_factory=dict)
    audit: list[AuditEntry] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    models: dict[str, CatalogueModel] = field(default_factory=dict)
    blob_refs: set[tuple[str, str]] = field(default_factory=set)
    services: dict[str, ServiceRecord] = field(default_factory=dict)
    attempts: dict[str, AttemptRecord] = field(default_factory=dict)
    receipts: dict[tuple[str, str], MutationReceipt] = field(default_factory=dict)
    state_changes: list[tuple[ServiceState, ServiceState]] = field(default_factory=list)
    """Every committed change of a service's state, as (from, to): the state tables' test."""
    commits: int = 0


class _Repository:
    def __init__(self, store: FakeStore) -> None:
        self._s = store


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
    async def append(self, entry: AuditEntry) -> int:
        self._s.audit.append(entry)
        return len(self._s.audit)

    async def list(
        self, *, project: str | None, after_seq: int, limit: int, cluster_wide: bool = True
    ) -> list[AuditEntry]:
        entries = self._s.audit[after_seq:]
        if project is not None:
            entries = [
                e for e in entries if e.project == project or (cluster_wide and e.project is None)
            ]
        return entries[:limit]


class FakeSettings(_Repository):
    async def get(self, key: str) -> Any | None:
        return self._s.settings.get(key)

    async def put(self, key: str, value: Any) -> None:
        self._s.settings[key] = value

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
        return any(digest == sha256 for _, digest in self._s.blob_refs)

    async def own_blobs(self, project: str, digests: Sequence[str]) -> None:
        self._s.blob_refs.update((project, digest) for digest in digests)

    async def owns_blobs(self, project: str, digests: Sequence[str]) -> bool:
        return all((project, digest) in self._s.blob_refs for digest in digests)

    async def release_blobs(self, project: str, digests: Sequence[str]) -> None:
        still = {
            d for m in self._s.models.values() if m.project == project for d in m.blob_digests()
        }
        self._s.blob_refs.difference_update((project, d) for d in digests if d not in still)


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


class FakeReceipts(_Repository):
    async def get(self, scope: str, mutation_id: str) -> MutationReceipt | None:
        return self._s.receipts.get((scope, mutation_id))

    async def put(self, receipt: MutationReceipt) -> None:
        self._s.receipts[(receipt.scope, receipt.mutation_id)] = receipt

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


class FakeUnitOfWork:
    """One transaction over a private copy of the store; ``commit`` publishes it."""

    def __init__(self, store: FakeStore) -> None:
        self._store = store
        self._work = store

    async def __aenter__(self) -> Self:
        self._work = copy.copy(self._store)
        for name in ("projects", "settings", "nodes", "models", "services", "attempts", "receipts"):
            setattr(self._work, name, dict(getattr(self._store, name)))
        self._work.audit = list(self._store.audit)
        self._work.state_changes = list(self._store.state_changes)
        self._work.blob_refs = set(self._store.blob_refs)
        self.projects = FakeProjects(self._work)
        self.audit = FakeAudit(self._work)
        self.settings = FakeSettings(self._work)
        self.nodes = FakeNodes(self._work)
        self.models = FakeModels(self._work)
        self.services = FakeServices(self._work)
        self.attempts = FakeAttempts(self._work)
        self.receipts = FakeReceipts(self._work)
        return self

    async def commit(self) -> None:
        for name in (
            "projects",
            "audit",
            "state_changes",
            "settings",
            "nodes",
            "models",
            "blob_refs",
            "services",
            "attempts",
            "receipts",
        ):
            setattr(self._store, name, copy.copy(getattr(self._work, name)))
        self._store.commits += 1

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Anything not committed is dropped with the private copy."""


class FakeUnitOfWorkFactory:
    """Makes fake units of work over one shared :class:`FakeStore`."""

    def __init__(self, store: FakeStore | None = None) -> None:
        self.store = store or FakeStore()

    def __call__(self) -> Any:
        return FakeUnitOfWork(self.store)
