"""Admission: whether a spec may be created, and whether a start fits its node and its grant.

The arithmetic is the domain's (``requirements``, ``fit``, ``grant_running_shortfall``); this
module reads what it needs from the database and the runtimes. ``preview`` and ``admit`` use
the same arithmetic, so what a preview promises is what a start enforces.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from ficc.base.errors import Conflict, InvalidInput, LimitExceeded
from ficc.base.json_types import JSONObject
from ficc.domain.catalogue import CatalogueModel
from ficc.domain.inference import (
    Requirements,
    ServiceSpec,
    UpstreamAllowList,
    check_context,
    fit,
    grant_running_shortfall,
    parse_service_spec,
    requirements,
    uses_local_model,
)
from ficc.domain.nodes import Node
from ficc.domain.service_records import PreviewView, ServiceRecord
from ficc.services.catalogue import resolves
from ficc.services.inference.records import (
    ACTIVE_STATES,
    ModelPath,
    capacity,
    find_node,
    node_info,
    preview_json,
)
from ficc.services.inference.supervisor import ReplicaSupervisor
from ficc.services.ports import UnitOfWork, UnitOfWorkFactory


@dataclass(frozen=True, eq=False)
class Admission:
    """Checks of specs and starts; one start at a time passes :meth:`admit` and commits."""

    uow_factory: UnitOfWorkFactory
    supervisor: ReplicaSupervisor
    model_path: ModelPath
    upstream_allow: UpstreamAllowList
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)
    """Held from :meth:`admit` to the commit of the start, so that two starts cannot both
    count the same free memory."""

    async def preview(self, project: str, spec_data: object) -> PreviewView:
        """Would this spec fit on its node now? Reasons, not a launch; ``start`` enforces it."""
        spec = parse_service_spec(spec_data)
        reasons: list[str] = []
        warnings: list[str] = []
        async with self.uow_factory() as uow:
            node = await find_node(uow, spec.node)
            model: CatalogueModel | None = None
            present = True
            if uses_local_model(spec.runtime):
                model = await uow.models.get(spec.model)
                if model is None or model.project != project:
                    # Another project's model is not measured: its size is not this project's.
                    model = None
                    reasons.append(f"model {spec.model} is not in the catalogue of {project}")
                else:
                    present = await self.present(uow, model)
                    try:
                        check_context(spec, model.manifest.get("metadata", {}))
                    except InvalidInput as exc:
                        reasons.append(exc.message)
            if node is None:
                reasons.append(f"node {spec.node} is not a node of this cluster")
                return preview_json(spec, None, reasons, warnings, {})
            committed = await self._committed(uow, node, exclude=None)
        availability = await self.supervisor.runtime(spec.runtime).availability(node_info(node))
        reasons.extend(availability.reasons)
        if model is not None and not present:
            reasons.append(f"model {model.id} has files missing from the blob store")
        need = requirements(spec, 0 if model is None else model.total_bytes())
        shortfalls, fit_warnings = fit(need, committed, capacity(node))
        reasons.extend(shortfall.reason for shortfall in shortfalls)
        warnings.extend(fit_warnings)
        return preview_json(spec, node, reasons, warnings, need.to_json())

    async def prepare(
        self,
        project: str,
        *,
        model_ids: frozenset[str] | None = None,
        node_ids: frozenset[str] | None = None,
    ) -> JSONObject:
        """Models (names, revisions, readiness) and the node/runtime offers that can run them."""
        async with self.uow_factory() as uow:
            models = [
                m for m in await uow.models.list(project) if model_ids is None or m.id in model_ids
            ]
            ready = {model.id: await self.present(uow, model) for model in models}
            nodes = [n for n in await uow.nodes.list() if node_ids is None or n.id in node_ids]
        offers = []
        for node in nodes:
            for runtime in self.supervisor.runtimes():
                availability = await runtime.availability(node_info(node))
                offers.append(
                    {
                        "node": node.id,
                        "runtime": runtime.name.value,
                        "available": availability.available,
                        "reasons": list(availability.reasons),
                    }
                )
        return {
            "models": [
                {
                    "id": model.id,
                    "name": model.name,
                    "revision": model.sha256,
                    "format": model.format,
                    "ready": ready[model.id],
                }
                for model in models
            ],
            "offers": offers,
        }

    async def admit(self, uow: UnitOfWork, service: ServiceRecord, node: Node) -> None:
        """Refuse a start that does not fit its node, or passes its grant's running caps.

        Call with :attr:`lock` held, in the transaction that records the start.
        """
        if service.created_by_grant is not None:
            of_grant = [
                other.spec
                for other in await uow.services.list_all()
                if other.id != service.id
                and other.state in ACTIVE_STATES
                and other.created_by_grant == service.created_by_grant
            ]
            over = grant_running_shortfall(of_grant, service.spec)
            if over is not None:
                raise LimitExceeded(
                    over.reason,
                    details={"limit": over.resource, "allowed": over.available},
                )
        need = await self._requirements(uow, service.spec)
        committed = await self._committed(uow, node, exclude=service.id)
        shortfalls, _ = fit(need, committed, capacity(node))
        if shortfalls:
            raise Conflict(
                f"service {service.id} does not fit on node {node.id}: "
                + "; ".join(shortfall.reason for shortfall in shortfalls),
                details={
                    "resources": [
                        {
                            "resource": shortfall.resource,
                            "needed": shortfall.needed,
                            "available": shortfall.available,
                        }
                        for shortfall in shortfalls
                    ]
                },
            )

    async def _committed(self, uow: UnitOfWork, node: Node, *, exclude: str | None) -> Requirements:
        """What the active services on ``node`` (but ``exclude``) hold or are taking."""
        committed = Requirements()
        for other in await uow.services.list_all():
            if other.id != exclude and other.node == node.id and other.state in ACTIVE_STATES:
                committed += await self._requirements(uow, other.spec)
        return committed

    @staticmethod
    async def _requirements(uow: UnitOfWork, spec: ServiceSpec) -> Requirements:
        model = await uow.models.get(spec.model) if uses_local_model(spec.runtime) else None
        return requirements(spec, 0 if model is None else model.total_bytes())

    async def check_spec(self, uow: UnitOfWork, project: str, spec: ServiceSpec) -> Node:
        """The node a new or replaced spec names, once its upstream, node and model pass."""
        self.upstream_allow.check(spec)
        node = await find_node(uow, spec.node)
        if node is None:
            raise InvalidInput(f"node {spec.node} is not a node of this cluster", field="node")
        if uses_local_model(spec.runtime):
            model = await uow.models.get(spec.model)
            if model is None or model.project != project:
                raise InvalidInput(
                    f"model {spec.model} is not in the catalogue of project {project}",
                    field="model",
                )
            check_context(spec, model.manifest.get("metadata", {}))
        return node

    async def check_runtime(self, spec: ServiceSpec, node: Node) -> None:
        """At start: the upstream is still allowed and the runtime can run on the node."""
        self.upstream_allow.check(spec)  # the owner may have withdrawn it since the create
        availability = await self.supervisor.runtime(spec.runtime).availability(node_info(node))
        if not availability.available:
            raise Conflict(
                f"runtime {spec.runtime.value} cannot run on node {node.id}: "
                + "; ".join(availability.reasons),
                details={"runtime": spec.runtime.value, "reasons": list(availability.reasons)},
            )

    async def model_file(self, uow: UnitOfWork, project: str, spec: ServiceSpec) -> Path | None:
        """The model file a start launches with; None for a runtime without a local model."""
        if not uses_local_model(spec.runtime):
            return None
        model = await uow.models.get(spec.model)
        if model is None or model.project != project:
            raise Conflict(f"model {spec.model} is no longer in the catalogue")
        if not await self.present(uow, model):
            raise Conflict(
                f"model {model.id} has files missing from the blob store",
                details={"model": model.id, "reason": "files_missing"},
            )
        return self.model_path(model)

    async def present(self, uow: UnitOfWork, model: CatalogueModel) -> bool:
        """Whether the model's files are stored and resolve for it (``catalogue.resolves``).

        A blob stored for another project, or for a model a peer's grant does not name, reads
        as missing: a record naming a digest is no capability to its bytes, and no oracle of
        whether they are stored.
        """
        if not await resolves(uow, model, model.blob_digests()):
            return False
        return self.model_path(model).exists()
