"""The nodes of a Ray cluster, as FICC schedules on them (``ficc serve --ray ADDRESS``).

FICC joins the cluster as a Ray driver in a namespace of its own (detached actors are found
again only in the namespace they were made in). Each Ray node becomes a FICC node whose ID is
derived from its Ray node ID, so the same machine keeps its ID across FICC restarts; a node Ray
reports dead is kept, marked unavailable. Ray is imported here only: the default serve never
loads it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

import ray
import ray._private.state as ray_state

from ficc.base.errors import EngineUnavailable, InvalidInput
from ficc.base.ids import new_id
from ficc.domain.nodes import Capacity, Gpu, Node

RAY_NODE_REFRESH_SECONDS: Final = 2.0
"""How often the node list follows Ray: a node that left is unavailable within about this."""
NAMESPACE_PREFIX: Final = "ficc-"
GPU_RESOURCE: Final = "GPU"


@dataclass(frozen=True)
class RayNode:
    """One node as Ray reports it."""

    ray_node_id: str
    alive: bool
    address: str
    hostname: str
    capacity: Capacity
    """Ray counts GPUs, it does not measure them: each is a ``GPU`` of unknown memory."""
    labels: tuple[tuple[str, str], ...]


def ficc_node_id(ray_node_id: str) -> str:
    """The FICC node ID of a Ray node: derived from its Ray ID, stable across FICC restarts."""
    return new_id("node", bytes.fromhex(ray_node_id))


def namespace_of(cluster_key_text: str) -> str:
    """The Ray namespace of one FICC cluster: fixed, and not shared with another FICC."""
    return NAMESPACE_PREFIX + cluster_key_text[:16].lower()


def parse_ray_node(entry: dict[str, Any], available: dict[str, Any]) -> RayNode:
    """A ``ray.nodes()`` entry and its node's available resources as a :class:`RayNode`."""
    resources = entry.get("Resources") or {}
    labels = entry.get("Labels") or {}
    return RayNode(
        ray_node_id=str(entry["NodeID"]),
        alive=bool(entry.get("Alive")),
        address=str(entry.get("NodeManagerAddress", "")),
        hostname=str(entry.get("NodeManagerHostname", "")),
        capacity=Capacity(
            cpu_count=int(resources.get("CPU", 0)),
            memory_bytes=int(resources.get("memory", 0)),
            memory_available_bytes=int(available.get("memory", 0)),
            gpus=tuple(
                Gpu(index=index, name=GPU_RESOURCE, memory_bytes=0, memory_used_bytes=0)
                for index in range(int(resources.get(GPU_RESOURCE, 0)))
            ),
        ),
        labels=tuple(sorted((str(key), str(value)) for key, value in labels.items())),
    )


class RayNodes:
    """The connection to Ray and the latest view of its nodes (refreshed by the caller)."""

    def __init__(self, address: str, namespace: str) -> None:
        if not address.strip():
            raise InvalidInput("--ray needs the address of a Ray cluster", field="ray")
        self.address = address.strip()
        self.namespace = namespace
        self._nodes: dict[str, RayNode] = {}
        self._driver_node_id = ""

    def connect(self) -> None:
        """Join the Ray cluster as a driver; EngineUnavailable naming the address when it cannot."""
        try:
            ray.init(
                address=self.address,
                namespace=self.namespace,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise EngineUnavailable(
                f"cannot join the Ray cluster at {self.address}: {exc}",
                details={"ray": self.address},
            ) from exc
        self._driver_node_id = ray.get_runtime_context().get_node_id()

    def disconnect(self) -> None:
        """Leave the cluster; detached actors (running replicas) stay."""
        if ray.is_initialized():
            ray.shutdown()

    def observe(self) -> list[RayNode]:
        """Ask Ray for its nodes now (a blocking call: run it off the event loop)."""
        available = ray_state.available_resources_per_node()  # type: ignore[no-untyped-call]
        entries = ray.nodes()  # type: ignore[no-untyped-call]
        observed = [parse_ray_node(entry, available.get(entry["NodeID"], {})) for entry in entries]
        self._nodes = {ficc_node_id(node.ray_node_id): node for node in observed}
        return observed

    def find(self, node_id: str) -> RayNode | None:
        """The Ray node behind FICC node ``node_id`` as last observed."""
        return self._nodes.get(node_id)

    def driver_address(self) -> str:
        """The address of the Ray node FICC's driver runs on (this machine)."""
        if not self._driver_node_id:
            return ""
        driver = self._nodes.get(ficc_node_id(self._driver_node_id))
        return "" if driver is None else driver.address

    def as_nodes(self, observed: list[RayNode], now: datetime) -> list[Node]:
        """The FICC nodes of ``observed``; the one FICC's driver runs on is the local node."""
        return [
            Node.of_capacity(
                ficc_node_id(node.ray_node_id),
                f"{node.hostname or node.address}-{node.ray_node_id[:8]}",
                # A node that left has no memory to give, whatever Ray last measured.
                node.capacity if node.alive else replace(node.capacity, memory_available_bytes=0),
                now,
                is_local=node.ray_node_id == self._driver_node_id,
                ray_node_id=node.ray_node_id,
                labels=node.labels,
                available=node.alive,
                unavailable_reason=None if node.alive else "the node left the Ray cluster",
            )
            for node in observed
        ]
