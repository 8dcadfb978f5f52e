"""Nodes: the local node is registered at start and refreshed when asked for."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from ficc.domain.nodes import Capacity, Node
from ficc.services.ports import Clock, UnitOfWorkFactory

LOCAL_NODE_SETTING = "local_node_id"


CapacityProbe = Callable[[], Awaitable[Capacity]]
"""What this machine has now. Asynchronous: a probe runs beside peer sessions and must never
hold the event loop."""


@dataclass(frozen=True, eq=False)
class Nodes:
    """The cluster's nodes: this machine, or the nodes of the Ray cluster FICC runs on."""

    uow_factory: UnitOfWorkFactory
    clock: Clock

    async def register_local_node(self, probe: CapacityProbe, node_id: str, *, name: str) -> Node:
        """Record (or refresh) this machine as the cluster's local node under a stable ID."""
        capacity = await probe()
        async with self.uow_factory() as uow:
            stored = await uow.settings.get(LOCAL_NODE_SETTING)
            if isinstance(stored, str):
                node_id = stored
            else:
                await uow.settings.put(LOCAL_NODE_SETTING, node_id)
            node = Node.of_capacity(node_id, name, capacity, self.clock(), is_local=True)
            await uow.nodes.upsert(node)
            await uow.commit()
        return node

    async def record_observed_nodes(self, observed: Sequence[Node]) -> None:
        """Record the nodes another scheduler (Ray) reports; a recorded node it no longer
        reports is kept (services may name it) but marked unavailable, so nothing is
        scheduled on it."""
        seen = {node.id for node in observed}
        async with self.uow_factory() as uow:
            for node in observed:
                await uow.nodes.upsert(node)
            for stored in await uow.nodes.list():
                if stored.id not in seen and stored.available:
                    await uow.nodes.upsert(
                        replace(
                            stored,
                            is_local=False,
                            available=False,
                            unavailable_reason="not a node of the Ray cluster FICC runs on",
                            updated_at=self.clock(),
                        )
                    )
            await uow.commit()

    async def list_nodes(self) -> list[Node]:
        async with self.uow_factory() as uow:
            return await uow.nodes.list()
