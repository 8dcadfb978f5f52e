"""What a peer may do with the grantor's models, nodes and its own operations under a grant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ficc.base.errors import NotFound
from ficc.base.ids import parse_id, parse_mutation_id
from ficc.base.json_types import JSONObject
from ficc.base.times import with_times_formatted
from ficc.domain.grants import MAX_CREATED_MODELS
from ficc.domain.manifests import parse_manifest
from ficc.domain.mutations import ReceiptState
from ficc.services import mutations
from ficc.services.catalogue import Catalogue
from ficc.services.grant_slots import GrantSlots
from ficc.services.mutations import MutationKey, grant_scope
from ficc.services.ports import Clock, UnitOfWorkFactory
from ficc.services.remote.call import Call, Effect
from ficc.services.remote.views import peer_answer

ADVICE: Final = {
    ReceiptState.UNCERTAIN: "retry with the same mutation_id and arguments; it is applied once",
    ReceiptState.NOT_APPLIED: (
        "nothing happened; retry with the same mutation_id and arguments to apply it once"
    ),
}
"""What a caller should do next about a mutation in each state (nothing, when settled)."""


@dataclass(frozen=True, eq=False)
class ModelOperations:
    """The grantor's catalogue, nodes and receipts as a peer reaches them under a grant."""

    uow_factory: UnitOfWorkFactory
    clock: Clock
    catalogue: Catalogue
    slots: GrantSlots

    async def manifest(self, call: Call) -> JSONObject:
        model_id = parse_id("model", call.body.get("model"), field="body.model")
        call.require("models", model_id, "body.model")
        async with self.uow_factory() as uow:
            model = await uow.models.get(model_id)
        if model is None or model.project != call.grant.project:
            raise NotFound(f"no model {model_id}", details={"model": model_id})
        return {"model": model.id, "manifest": model.manifest, "sha256": model.sha256}

    async def create(self, call: Call) -> Effect:
        manifest = parse_manifest(call.body["manifest"], field="body.manifest")
        grant = call.grant

        async def effect(key: MutationKey) -> tuple[JSONObject, bool]:
            return await self.catalogue.create_model_record(
                grant.project,
                manifest,
                key=key,
                created_by_grant=grant.id,
                actor=call.actor.name,
                peer=call.peer_key,
                max_created=MAX_CREATED_MODELS,
            )

        return effect

    async def remove(self, call: Call) -> Effect:
        model_id = parse_id("model", call.body.get("model"), field="body.model")
        call.require("models", model_id, "body.model")

        async def effect(key: MutationKey) -> tuple[JSONObject, bool]:
            return await self.catalogue.remove_model_record(
                call.grant.project,
                model_id,
                key=key,
                actor=call.actor.name,
                peer=call.peer_key,
            )

        return effect

    async def resources(self, call: Call) -> JSONObject:
        async with self.uow_factory() as uow:
            nodes = [n for n in await uow.nodes.list() if n.id in call.grant.terms.nodes]
        return {"nodes": [with_times_formatted(node.as_json()) for node in nodes]}

    async def status(self, call: Call) -> JSONObject:
        """Where one of this grant's mutations stands, from its receipt.

        Inspection settles an uncertain mutation when no other request of the grant is in
        flight: its effect commits with its receipt, so a receipt still uncertain then means
        nothing happened. It becomes ``not_applied``: the capacity it held is free again, and a
        retry with the same ID and arguments applies it once.
        """
        mutation_id = parse_mutation_id(call.body.get("id"), field="body.id")
        settle = self.slots.in_flight(call.grant.id) <= 1
        async with self.uow_factory() as uow:
            receipt = await uow.receipts.get(grant_scope(call.grant.id), mutation_id)
            if receipt is not None and receipt.state == ReceiptState.UNCERTAIN and settle:
                key = MutationKey(
                    receipt.scope, mutation_id, receipt.operation, receipt.arguments_sha256
                )
                scope = await mutations.begin(uow, key)
                await scope.mark_not_applied(self.clock())
                await uow.commit()
                receipt = await uow.receipts.get(grant_scope(call.grant.id), mutation_id)
        if receipt is None:
            raise NotFound(
                f"no operation {mutation_id} under this grant", details={"id": mutation_id}
            )
        return {
            "id": receipt.mutation_id,
            "operation": receipt.operation,
            "state": receipt.state,
            "result": None if receipt.result is None else peer_answer(receipt.result),
            "advice": ADVICE.get(ReceiptState(receipt.state)),
        }
