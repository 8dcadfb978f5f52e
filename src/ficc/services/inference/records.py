"""What the parts of managed inference share: who acts, where a service answers, the views.

Kept apart so that commands, supervisor, router and admission import one small module and not
each other for a helper.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from ficc.base.errors import InvalidInput, NotFound, RevisionMismatch
from ficc.base.ids import new_id
from ficc.base.json_types import JSONObject
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.grants import GrantState
from ficc.domain.inference import AttemptState, Capacity, RuntimeName, ServiceSpec, ServiceState
from ficc.domain.nodes import Node
from ficc.domain.service_records import (
    AttemptRecord,
    PreviewView,
    ServiceRecord,
    ServiceView,
    attempts_to_forget,
)
from ficc.services import audit
from ficc.services.ports import Clock, UnitOfWork
from ficc.services.ports.runtimes import NodeInfo

START_TIMEOUT_SECONDS: Final = 120.0
STOP_GRACE_SECONDS: Final = 5.0

ACTIVE_STATES: Final = frozenset(
    {ServiceState.STARTING, ServiceState.RUNNING, ServiceState.DRAINING}
)
"""States in which a service's replicas hold (or are taking) their node's resources."""

ModelPath = Callable[[CatalogueModel], Path]
AttemptFence = Callable[[str, float], Awaitable[int]]
"""Kill every process tagged with an attempt ID; returns how many were killed."""


@dataclass(frozen=True)
class Endpoint:
    """Where a running service answers, the name its engine knows it by, and what of its spec
    an invocation needs (its runtime and options), so that routing reads no record."""

    service_id: str
    base_url: str
    model_name: str
    runtime: RuntimeName
    options: Mapping[str, object]


@dataclass(frozen=True)
class Actor:
    """Who changes a service: an audit name, and the grant when a peer acts."""

    name: str
    grant_id: str | None = None
    peer_hypernet_id: str | None = None
    peer_cluster_key: str | None = None


async def load_service(uow: UnitOfWork, project: str, service_id: str) -> ServiceRecord:
    """The service of ``project``; another project's service reads as absent (no oracle)."""
    service = await uow.services.get(service_id)
    if service is None or service.project != project:
        raise NotFound(
            f"no service {service_id} in project {project}", details={"service": service_id}
        )
    return service


async def view_of(uow: UnitOfWork, service: ServiceRecord) -> ServiceView:
    """The owner's view of ``service`` with its attempts, read in the caller's transaction."""
    return ServiceView.of(service, await uow.attempts.for_service(service.id))


async def find_node(uow: UnitOfWork, node_id: str | None) -> Node | None:
    """The named node, or the local one when the spec names none."""
    if node_id is None:
        local = [node for node in await uow.nodes.list() if node.is_local]
        return local[0] if local else None
    return await uow.nodes.get(node_id)


async def record_audit(
    uow: UnitOfWork,
    clock: Clock,
    actor: Actor,
    project: str,
    action: str,
    target: str,
    details: JSONObject | None = None,
) -> None:
    """An audit entry for ``actor``'s change, committed with it."""
    await audit.record(
        uow,
        clock,
        action=action,
        actor=actor.name,
        project=project,
        target=target,
        details=details,
        peer_hypernet_id=actor.peer_hypernet_id,
        peer_cluster_key=actor.peer_cluster_key,
    )


async def record_attempts(
    uow: UnitOfWork, service: ServiceRecord, serve_instance: str, now: datetime
) -> list[AttemptRecord]:
    """One pending attempt per replica, written before any launch (write-ahead); the oldest
    ended attempts beyond those a service keeps are forgotten in the same transaction."""
    for attempt_id in attempts_to_forget(await uow.attempts.for_service(service.id)):
        await uow.attempts.delete(attempt_id)
    attempts = [
        AttemptRecord(
            id=new_id("attempt", secrets.token_bytes(16)),
            service_id=service.id,
            replica=index,
            state=AttemptState.PENDING,
            serve_instance=serve_instance,
            created_at=now,
        )
        for index in range(service.spec.replicas)
    ]
    for attempt in attempts:
        await uow.attempts.add(attempt)
    return attempts


async def grant_lapsed(uow: UnitOfWork, service: ServiceRecord, now: datetime) -> bool:
    """Whether the service was created by a grant that is no longer active: FICC starts such a
    service again (after a crash or its own restart) only while the grant holds."""
    if service.created_by_grant is None:
        return False
    grant = await uow.grants.get(service.created_by_grant)
    return grant is None or grant.state_at(now) != GrantState.ACTIVE


def parse_revision(value: object) -> int:
    """A caller's expected revision: a positive JSON integer, never a boolean."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput("revision must be a positive integer", field="revision")
    return value


def check_revision(service: ServiceRecord, expected: int) -> None:
    """Refuse a change made against an older revision than the stored one."""
    if service.revision != expected:
        raise RevisionMismatch(
            f"revision {expected} is stale; the service is at revision {service.revision}",
            details={"revision": service.revision},
        )


def node_info(node: Node) -> NodeInfo:
    """The part of a node a runtime needs to decide where and how to launch."""
    return NodeInfo(node_id=node.id, local=node.is_local, gpu_count=len(node.gpus))


def capacity(node: Node) -> Capacity:
    """A node's measured resources, as the domain's fit arithmetic takes them."""
    return Capacity(
        cpu_count=node.cpu_count,
        memory_bytes=node.memory_bytes,
        memory_available_bytes=node.memory_available_bytes,
        gpu_count=len(node.gpus),
    )


def preview_json(
    spec: ServiceSpec,
    node: Node | None,
    reasons: list[str],
    warnings: list[str],
    need: dict[str, int],
) -> PreviewView:
    """The answer of a preview: fits only when there is no reason against it."""
    return {
        "fits": not reasons,
        "reasons": reasons,
        "warnings": warnings,
        "node": None if node is None else node.id,
        "spec": spec.to_json(),
        "requirements": need,
    }
