"""Nodes: the machines a cluster schedules inference on, and their capacity."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_bytes: int
    memory_used_bytes: int


@dataclass(frozen=True)
class Capacity:
    """What a probe of a machine found: the values a node records as its capacity."""

    cpu_count: int
    memory_bytes: int
    memory_available_bytes: int
    gpus: tuple[Gpu, ...]


@dataclass(frozen=True)
class Node:
    id: str
    name: str
    cpu_count: int
    memory_bytes: int
    memory_available_bytes: int
    gpus: tuple[Gpu, ...]
    is_local: bool
    updated_at: datetime
    ray_node_id: str | None = None
    """The Ray node this node is (``ficc serve --ray``); None for the machine FICC runs on."""
    labels: tuple[tuple[str, str], ...] = ()
    available: bool = True
    """False once the node left (its Ray node died): nothing is scheduled on it."""
    unavailable_reason: str | None = None

    @classmethod
    def of_capacity(
        cls,
        node_id: str,
        name: str,
        capacity: Capacity,
        updated_at: datetime,
        *,
        is_local: bool,
        ray_node_id: str | None = None,
        labels: tuple[tuple[str, str], ...] = (),
        available: bool = True,
        unavailable_reason: str | None = None,
    ) -> Node:
        """The node whose machine a probe found to have ``capacity``: this machine, or a node
        Ray reports."""
        return cls(
            id=node_id,
            name=name,
            cpu_count=capacity.cpu_count,
            memory_bytes=capacity.memory_bytes,
            memory_available_bytes=capacity.memory_available_bytes,
            gpus=capacity.gpus,
            is_local=is_local,
            updated_at=updated_at,
            ray_node_id=ray_node_id,
            labels=labels,
            available=available,
            unavailable_reason=unavailable_reason,
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "local": self.is_local,
            "ray_node_id": self.ray_node_id,
            "labels": dict(self.labels),
            "capacity": {
                "cpu_count": self.cpu_count,
                "memory_bytes": self.memory_bytes,
                "gpus": [
                    {"index": gpu.index, "name": gpu.name, "memory_bytes": gpu.memory_bytes}
                    for gpu in self.gpus
                ],
            },
            "availability": {
                "available": self.available,
                "reason": self.unavailable_reason,
                "memory_available_bytes": self.memory_available_bytes,
                "gpus": [
                    {
                        "index": gpu.index,
                        "memory_available_bytes": max(gpu.memory_bytes - gpu.memory_used_bytes, 0),
                    }
                    for gpu in self.gpus
                ],
            },
            "updated_at": self.updated_at,
        }
