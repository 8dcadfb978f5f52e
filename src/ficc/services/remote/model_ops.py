"""What a peer may do with the grantor's models, nodes and its own operations under a grant."""

from __future__ import annotations

from typing import Any

from ficc.base.errors import NotFound
from ficc.base.ids import parse_id, parse_mutation_id
from ficc.base.times import with_times_formatted
from ficc.domain import grants as g
from ficc.domain.manifests import parse_manifest
from ficc.domain.mutations import ReceiptState
from ficc.services.catalogue import create_model_record, remove_model_record
from ficc.services.mutations import MutationKey, grant_scope
from ficc.services.ports import Clock, UnitOfWorkFactory
from ficc.services.remote.call import Call, Effect


class ModelOperations:
    """The grantor's catalogue, nodes and receipts as a peer reaches them under a grant."""

    def __init__(self, uow_factory: UnitOfWorkFactory, clock: Clock) -> None:
        self._uow_factory = uow_factory
        self._clock = clock

    async def manifest(self, call: Call) -> dict[str, Any]:
        model_id = parse_id("model", call.body.get("model"), field="body.model")
        call.require("models", model_id, "body.model")
        async with self._uow_factory() as uow:
            model = await uow.models.get(model_id)
        if model is None or model.project != call.grant.project:
            raise NotFound(f"no model {model_id}", details={"model": model_id})
        return {"model": model.id, "manifest": model.manifest, "sha256": model.sha256}

    async def create(self, call: Call) -> Effect:
        manifest = parse_manifest(call.body["manifest"], field="body.manifest")
        grant = call.grant

        async def effect(key: MutationKey) -> tuple[dict[str, Any], bool]:
            return await create_model_record(
                self._uow_factory,
                self._clock,
                grant.project,
                manifest,
                key=key,
                created_by_grant=grant.id,
                actor=call.actor.name,
                peer=call.peer_key,
                max_created=g.MAX_CREATED_MODELS,
            )

        return effect

    async def remove(self, call: Call) -> Effect:
        model_id = parse_id("model", call.body.get("model"), field="body.model")
        call.require("models", model_id, "body.model")

        async def effect(key: MutationKey) -> tuple[dict[str, Any], bool]:
            return await remove_model_record(
                self._uow_factory,
                self._clock,
                call.grant.project,
                model_id,
                key=key,
                actor=call.actor.name,
                peer=call.peer_key,
            )

        return effect

    async def resources(self, call: Call) -> dict[str, Any]:
        async with self._uow_factory() as uow:
            nodes = [n for n in await uow.nodes.list() if n.id in call.grant.terms.nodes]
        return {"nodes": [with_times_formatted(node.as_json()) for node in nodes]}

    async def status(self, call: Call) -> dict[str, Any]:
        """Where one of this grant's mutations stands, from its receipt."""
        mutation_id = parse_mutation_id(call.body.get("id"), field="body.id")
        async with self._uow_factory() as uow:
            receipt = await uow.receipts.get(grant_scope(call.grant.id), mutation_id)
        if receipt is None:
            raise NotFound(
                f"no operation {mutation_id} under this grant", details={"id": mutation_id}
            )
        return {
            "id": receipt.mutation_id,
            "operation": receipt.operation,
            "state": receipt.state,
            "result": receipt.result,
            "advice": (
                "retry with the same mutation_id and arguments; it is applied once"
                if receipt.state == ReceiptState.UNCERTAIN
                else None
            ),
        }
